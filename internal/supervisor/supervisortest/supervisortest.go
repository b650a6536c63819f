// Package supervisortest runs the long-running parts a test starts (a
// broker connection, consumers, the outbox) in a supervisor.Group that
// stops them, the last started first, when the test ends.
package supervisortest

import (
	"log/slog"
	"testing"
	"time"

	"github.com/hookline/hookline/internal/supervisor"
)

// StopWithin bounds the stop of a test's parts, all together.
const StopWithin = 15 * time.Second

// Start runs parts, in order, until t ends. Then it stops them in reverse
// and fails t if one of them ended before it was asked to, returned an
// error when stopped, or did not stop within StopWithin. log receives the
// group's log lines.
func Start(t testing.TB, log *slog.Logger, parts ...supervisor.Part) {
	t.Helper()
	g := supervisor.New(log)
	for _, p := range parts {
		g.Go(p.Name, p.Run)
	}
	t.Cleanup(func() {
		if err := g.Stop(StopWithin); err != nil {
			t.Errorf("stop the test's parts: %v", err)
		}
	})
}
