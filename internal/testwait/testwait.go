// Package testwait waits in tests for something that happens in the
// background (a delivery recorded, a queue drained, a consumer ready): it
// polls a condition on a ticker until it holds, and fails the test at a
// deadline instead of sleeping for a guessed time.
package testwait

import (
	"reflect"
	"testing"
	"time"
)

// Tick is how often Eventually asks its condition.
const Tick = 25 * time.Millisecond

// Eventually polls cond every Tick until it holds. When timeout passes
// first, it fails t with "not within <timeout>: " and msg formatted with
// args, and stops the test. An arg that is a non-nil pointer is formatted
// as what it points to at the deadline, so that a message can show the
// last value the condition saw.
func Eventually(t testing.TB, timeout time.Duration, cond func() bool, msg string, args ...any) {
	t.Helper()
	deadline := time.After(timeout)
	tick := time.NewTicker(Tick)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline:
			t.Fatalf("not within %s: "+msg, append([]any{timeout}, pointees(args)...)...)
		case <-tick.C:
		}
	}
}

// Never asks cond every Tick for d, on the calling goroutine, and fails t
// with msg formatted with args (pointers as in Eventually) the first time
// it holds. Unlike testify's Never, no call of cond is left running when
// it returns, so cond may use what the test closes when it ends.
func Never(t testing.TB, d time.Duration, cond func() bool, msg string, args ...any) {
	t.Helper()
	deadline := time.After(d)
	tick := time.NewTicker(Tick)
	defer tick.Stop()
	for {
		if cond() {
			t.Fatalf("within %s: "+msg, append([]any{d}, pointees(args)...)...)
		}
		select {
		case <-deadline:
			return
		case <-tick.C:
		}
	}
}

// pointees returns args with each non-nil pointer replaced by its pointee.
func pointees(args []any) []any {
	out := make([]any, len(args))
	for i, a := range args {
		out[i] = a
		if v := reflect.ValueOf(a); v.Kind() == reflect.Pointer && !v.IsNil() {
			out[i] = v.Elem().Interface()
		}
	}
	return out
}
