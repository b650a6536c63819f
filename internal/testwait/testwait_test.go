package testwait

import (
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// recorder is a testing.TB that keeps what Fatalf was given and ends the
// calling goroutine, as the real one does.
type recorder struct {
	testing.TB
	fatal string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) {
	r.fatal = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// run calls Eventually on a goroutine of its own, since a failure ends it.
func run(cond func() bool, msg string, args ...any) string {
	r := &recorder{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		Eventually(r, 3*Tick, cond, msg, args...)
	}()
	<-done
	return r.fatal
}

func TestEventuallyReturnsOnceTheConditionHolds(t *testing.T) {
	calls := 0
	got := run(func() bool { calls++; return calls == 2 }, "never")
	require.Empty(t, got)
	require.Equal(t, 2, calls)
}

func TestEventuallyFailsAtTheDeadlineWithPointeesReadThen(t *testing.T) {
	last, lastErr := "", error(nil)
	type state struct{ N int }
	var s state
	var nilPtr *int
	start := time.Now()
	got := run(func() bool {
		last, lastErr, s.N = "late", errors.New("boom"), s.N+1
		return false
	}, "%q %v %d %v %+v", &last, &lastErr, 7, nilPtr, &s)
	require.GreaterOrEqual(t, time.Since(start), 3*Tick)
	require.Regexp(t, `^not within `+(3*Tick).String()+`: "late" boom 7 <nil> \{N:[1-9][0-9]*\}$`, got)
}

// runNever calls Never on a goroutine of its own, since a failure ends it.
func runNever(cond func() bool, msg string, args ...any) string {
	r := &recorder{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		Never(r, 3*Tick, cond, msg, args...)
	}()
	<-done
	return r.fatal
}

func TestNeverAsksUntilTheEndAndLeavesNoCallRunning(t *testing.T) {
	// Each call takes a tick, so a call is under way at the deadline: one
	// left running on a goroutine of its own would still be at return.
	var running, calls atomic.Int32
	start := time.Now()
	got := runNever(func() bool {
		require.Equal(t, int32(1), running.Add(1), "calls overlap")
		defer running.Add(-1)
		calls.Add(1)
		<-time.After(Tick)
		return false
	}, "held")
	require.Empty(t, got)
	require.GreaterOrEqual(t, time.Since(start), 3*Tick)
	require.GreaterOrEqual(t, calls.Load(), int32(2))
	require.Zero(t, running.Load(), "a call outlived Never")
}

func TestNeverFailsTheFirstTimeTheConditionHolds(t *testing.T) {
	calls := 0
	got := runNever(func() bool { calls++; return calls == 2 }, "calls %d", &calls)
	require.Equal(t, "within "+(3*Tick).String()+": calls 2", got)
	require.Equal(t, 2, calls)
}
