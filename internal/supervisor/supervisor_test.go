package supervisor

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// recorder notes the order in which parts return.
type recorder struct {
	mu    sync.Mutex
	order []string
}

func (r *recorder) part(name string) func(context.Context) error {
	return func(ctx context.Context) error {
		<-ctx.Done()
		r.mu.Lock()
		r.order = append(r.order, name)
		r.mu.Unlock()
		return ctx.Err()
	}
}

func TestStopsInReverseOrderOneAtATime(t *testing.T) {
	var r recorder
	g := New(nil)
	for _, name := range []string{"broker", "outbox", "commit", "http"} {
		g.Go(name, r.part(name))
	}
	require.NoError(t, g.Check(context.Background()))
	require.NoError(t, g.Run(canceled(), time.Second), "a context error on stop is not a failure")
	require.Equal(t, []string{"http", "commit", "outbox", "broker"}, r.order)
}

func TestAPartWaitsForThoseStartedAfterIt(t *testing.T) {
	g := New(nil)
	release := make(chan struct{})
	var laterDone, earlierSawLaterDone bool
	g.Go("earlier", func(ctx context.Context) error {
		<-ctx.Done()
		earlierSawLaterDone = laterDone
		return nil
	})
	g.Go("later", func(ctx context.Context) error {
		<-ctx.Done()
		<-release // still flushing after its stop
		laterDone = true
		return nil
	})
	stopped := make(chan error, 1)
	go func() { stopped <- g.Stop(time.Minute) }()
	close(release)
	require.NoError(t, <-stopped)
	require.True(t, earlierSawLaterDone)
}

func TestAPartEndingUnaskedFailsReadinessAndStopsTheRest(t *testing.T) {
	var r recorder
	g := New(nil)
	g.Go("broker", r.part("broker"))
	boom := errors.New("channel closed")
	crash := make(chan struct{})
	g.Go("consumer", func(context.Context) error { <-crash; return boom })
	g.Go("http", r.part("http"))

	close(crash)
	<-g.Failed()
	err := g.Check(context.Background())
	require.ErrorIs(t, err, boom)
	require.ErrorContains(t, err, "consumer")

	runErr := g.Run(context.Background(), time.Second)
	require.ErrorIs(t, runErr, boom, "Run returns the failure, not a later stop error")
	require.Equal(t, []string{"http", "broker"}, r.order)
}

func TestAPartReturningNilUnaskedIsAFailure(t *testing.T) {
	g := New(nil)
	g.Go("loop", func(context.Context) error { return nil })
	<-g.Failed()
	require.ErrorContains(t, g.Check(context.Background()), "loop: returned before it was stopped")
	require.Error(t, g.Stop(time.Second))
}

func TestFirstStopErrorIsReturned(t *testing.T) {
	g := New(nil)
	first, second := errors.New("flush failed"), errors.New("close failed")
	g.Go("a", func(ctx context.Context) error { <-ctx.Done(); return second })
	g.Go("b", func(ctx context.Context) error { <-ctx.Done(); return first })
	err := g.Stop(time.Second)
	require.ErrorIs(t, err, first, "b stops first, so its error is the first")
	require.NotErrorIs(t, err, second)
	require.ErrorContains(t, err, "b: ")
}

func TestDeadlineCancelsTheRestTogether(t *testing.T) {
	g := New(nil)
	var mu sync.Mutex
	cancelled := map[string]bool{}
	note := func(name string) func(context.Context) error {
		return func(ctx context.Context) error {
			<-ctx.Done()
			mu.Lock()
			cancelled[name] = true
			mu.Unlock()
			return nil
		}
	}
	stuck := make(chan struct{})
	defer close(stuck)
	g.Go("early", note("early"))
	g.Go("stuck", func(ctx context.Context) error { <-ctx.Done(); <-stuck; return nil })

	err := g.Stop(50 * time.Millisecond)
	require.ErrorContains(t, err, "did not stop within 50ms")
	require.ErrorContains(t, err, "stuck")
	require.ErrorContains(t, err, "early")
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return cancelled["early"] },
		time.Second, time.Millisecond, "the parts left are cancelled when the deadline passes")
}

func TestStopAfterStopIsEmpty(t *testing.T) {
	g := New(nil)
	g.Go("a", func(ctx context.Context) error { <-ctx.Done(); return nil })
	require.NoError(t, g.Stop(time.Second))
	require.NoError(t, g.Stop(time.Second))
	require.NoError(t, g.Check(context.Background()), "parts stopped when asked are not failures")
}

func canceled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

func TestEveryRunsPassesUntilTheContextEnds(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	passes := make(chan time.Time, 10)
	done := make(chan error, 1)
	go func() {
		done <- Every(ctx, 0, 20*time.Millisecond, func(context.Context) {
			passes <- time.Now()
			if len(passes) == 3 {
				cancel()
			}
		})
	}()
	require.NoError(t, <-done)
	require.Len(t, passes, 3, "no pass after the context ended")
	first := <-passes
	second := <-passes
	require.GreaterOrEqual(t, second.Sub(first), 20*time.Millisecond, "passes are interval apart")
}

func TestEveryWithFirstZeroRunsAPassAtOnce(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	require.NoError(t, Every(ctx, 0, time.Hour, func(context.Context) { cancel() }))
}

func TestEveryWaitsFirstAndStopsWithoutAPass(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.NoError(t, Every(ctx, time.Hour, time.Hour, func(context.Context) { t.Error("a pass ran after the context ended") }))
}
