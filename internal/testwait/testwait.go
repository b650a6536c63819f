// Package testwait waits in tests for something that happens in the
// background (a delivery recorded, a queue drained, a consumer ready): it
// polls a condition on a ticker until it holds, and fails the test at a
// deadline instead of sleeping for a guessed time.
package testwait

import (
	"testing"
	"time"
)

// Tick is how often Eventually asks its condition.
const Tick = 25 * time.Millisecond

// Eventually polls cond every Tick until it holds. When timeout passes
// first, it fails t with "not within <timeout>: " and msg formatted with
// args, and stops the test.
func Eventually(t testing.TB, timeout time.Duration, cond func() bool, msg string, args ...any) {
	t.Helper()
	deadline := time.After(timeout)
	tick := time.NewTicker(Tick)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline:
			t.Fatalf("not within %s: "+msg, append([]any{timeout}, args...)...)
		case <-tick.C:
		}
	}
}
