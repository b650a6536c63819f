package dlq

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookline/hookline/internal/metrics"
)

// Sweeper records exhausted deliveries whose dead letter never reached the
// queue (the worker lost the broker between exhausting and publishing).
type Sweeper struct {
	pool     *pgxpool.Pool
	log      *slog.Logger
	Interval time.Duration
	Age      time.Duration
}

// NewSweeper returns a sweeper checking every minute for deliveries
// exhausted over a minute ago.
func NewSweeper(pool *pgxpool.Pool, log *slog.Logger) *Sweeper {
	return &Sweeper{pool: pool, log: log, Interval: time.Minute, Age: time.Minute}
}

const sweepSQL = `UPDATE deliveries SET dead_lettered_at = now()
WHERE id IN (
    SELECT id FROM deliveries
    WHERE status = 'exhausted' AND dead_lettered_at IS NULL AND completed_at < now() - $1::interval
    LIMIT 1000)
  AND status = 'exhausted'`

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
		tag, err := s.pool.Exec(ctx, sweepSQL, s.Age)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("dead-letter sweep failed", "error", err)
			}
			continue
		}
		if n := tag.RowsAffected(); n > 0 {
			metrics.DeadLettered.WithLabelValues("swept").Add(float64(n))
			s.log.Info("recorded exhausted deliveries whose dead letter was lost", "deliveries", n)
		}
	}
}
