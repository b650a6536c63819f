package dlq

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/metrics"
	"github.com/hookline/hookline/internal/queue"
)

// warnCounter is a log handler that counts records at Warn and above.
type warnCounter struct{ n atomic.Int64 }

func (w *warnCounter) Enabled(context.Context, slog.Level) bool { return true }
func (w *warnCounter) Handle(_ context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		w.n.Add(1)
	}
	return nil
}
func (w *warnCounter) WithAttrs([]slog.Attr) slog.Handler { return w }
func (w *warnCounter) WithGroup(string) slog.Handler      { return w }

// Before the broker connection is up (every start), the DLQ size is still
// exported and nothing is logged as a warning.
func TestGaugesExportTheDLQSizeWhileTheBrokerIsNotConnected(t *testing.T) {
	t.Parallel()
	f := newRetryFixture(t, "none")
	warns := &warnCounter{}
	conn := queue.NewConn("amqp://guest:guest@127.0.0.1:1/", slog.New(slog.DiscardHandler)) // never run
	g := NewGauges(f.pool, conn, queue.Topology{Prefix: "gauges-test"}, slog.New(warns))

	require.ErrorIs(t, g.Refresh(context.Background()), queue.ErrNotConnected)
	size := metrics.DLQDeliveries.WithLabelValues(f.tenant.String())
	require.Equal(t, 1.0, testutil.ToFloat64(size))

	size.Set(0)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	tick, timeout := time.NewTicker(10*time.Millisecond), time.After(10*time.Second)
	defer tick.Stop()
	for testutil.ToFloat64(size) != 1 {
		select {
		case <-tick.C:
		case <-timeout:
			t.Fatal("Run's first pass did not export the DLQ size")
		}
	}
	cancel()
	require.NoError(t, <-done)
	require.Zero(t, warns.n.Load(), "a broker not yet connected is not a warning")
}
