package dlq

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookline/hookline/internal/metrics"
	"github.com/hookline/hookline/internal/wire"
)

// Sweeper records exhausted deliveries whose dead letter never reached the
// queue (the worker lost the broker between exhausting and publishing).
type Sweeper struct {
	pool     *pgxpool.Pool
	dispatch dispatcher
	log      *slog.Logger
	Interval time.Duration
	Age      time.Duration
}

// NewSweeper returns a sweeper checking every minute for deliveries
// exhausted over a minute ago.
func NewSweeper(pool *pgxpool.Pool, d dispatcher, log *slog.Logger) *Sweeper {
	return &Sweeper{pool: pool, dispatch: d, log: log, Interval: time.Minute, Age: time.Minute}
}

const sweepSQL = `UPDATE deliveries d SET dead_lettered_at = now()
FROM events e
WHERE d.id IN (
    SELECT id FROM deliveries
    WHERE status = 'exhausted' AND dead_lettered_at IS NULL AND completed_at < now() - $1::interval
    LIMIT 1000
    FOR UPDATE SKIP LOCKED)
  AND d.status = 'exhausted' AND d.dead_lettered_at IS NULL AND e.id = d.event_id
RETURNING ` + exhaustedColumns

// Run sweeps until ctx ends.
func (s *Sweeper) Run(ctx context.Context) error {
	tick := time.NewTicker(s.Interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		if err := s.Sweep(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("dead-letter sweep failed", "error", err)
		}
	}
}

// Sweep records, with their owner notifications, the exhausted deliveries
// whose dead letter is over Age late, up to 1,000 at a time.
func (s *Sweeper) Sweep(ctx context.Context) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit
	rows, err := tx.Query(ctx, sweepSQL, s.Age)
	if err != nil {
		return err
	}
	swept, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (exhausted, error) {
		var x exhausted
		return x, row.Scan(x.fields()...)
	})
	if err != nil {
		return err
	}
	var tasks []wire.Task
	for _, x := range swept {
		t, err := notifyExhausted(ctx, tx, s.log, x)
		if err != nil {
			return err
		}
		tasks = append(tasks, t...)
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	s.dispatch.Enqueue(tasks...)
	if n := len(swept); n > 0 {
		metrics.DeadLettered.WithLabelValues("swept").Add(float64(n))
		s.log.Info("recorded exhausted deliveries whose dead letter was lost", "deliveries", n)
	}
	return nil
}
