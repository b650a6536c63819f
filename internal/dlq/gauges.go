package dlq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookline/hookline/internal/metrics"
	"github.com/hookline/hookline/internal/queue"
	"github.com/hookline/hookline/internal/supervisor"
)

// Gauges keeps the queue depth and DLQ size gauges current. One dlq process
// is enough to export them; every one does, harmlessly.
type Gauges struct {
	pool     *pgxpool.Pool
	conn     *queue.Conn
	topo     queue.Topology
	log      *slog.Logger
	Interval time.Duration
	// seen are the tenants whose DLQ size has been exported.
	seen map[uuid.UUID]bool
}

// NewGauges returns gauges refreshed every 15 s.
func NewGauges(pool *pgxpool.Pool, conn *queue.Conn, topo queue.Topology, log *slog.Logger) *Gauges {
	return &Gauges{pool: pool, conn: conn, topo: topo, log: log, Interval: 15 * time.Second, seen: map[uuid.UUID]bool{}}
}

// dlqSizeSQL counts the DLQ as GET /v1/dlq lists it: exhausted deliveries
// not retried since (a failed retry is itself in the DLQ), from the rollups
// the triggers keep (docs/DATA.md, "Rollups"), whose rows grow with the
// days and kinds of failures, not with the deliveries.
const dlqSizeSQL = `SELECT tenant_id, sum(exhausted - retried) FROM dead_letter_rollups WHERE hourly = false AND at = '-infinity'
GROUP BY tenant_id HAVING sum(exhausted - retried) > 0`

// Run refreshes the gauges until ctx ends. While the broker is not
// connected (at start, or during an outage the connection and readiness
// already report) the queue depths wait and the DLQ size is still read.
func (g *Gauges) Run(ctx context.Context) error {
	return supervisor.Every(ctx, 0, g.Interval, func(ctx context.Context) {
		err := g.Refresh(ctx)
		switch {
		case err == nil || ctx.Err() != nil:
		case errors.Is(err, queue.ErrNotConnected):
			g.log.Debug("queue depths not refreshed", "error", err)
		default:
			g.log.Warn("gauges not refreshed", "error", err)
		}
	})
}

// Refresh reads the queue depths and the DLQ size once; a failure of one
// does not keep the other from being read.
func (g *Gauges) Refresh(ctx context.Context) error {
	return errors.Join(g.queues(), g.dlqSize(ctx))
}

func (g *Gauges) dlqSize(ctx context.Context) error {
	rows, err := g.pool.Query(ctx, dlqSizeSQL)
	if err != nil {
		return fmt.Errorf("count exhausted deliveries: %w", err)
	}
	type count struct {
		tenant uuid.UUID
		n      int64
	}
	counts, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (count, error) {
		var c count
		return c, r.Scan(&c.tenant, &c.n)
	})
	if err != nil {
		return fmt.Errorf("count exhausted deliveries: %w", err)
	}
	// A tenant whose DLQ emptied keeps its series, at zero.
	now := map[uuid.UUID]bool{}
	for _, c := range counts {
		metrics.DLQDeliveries.WithLabelValues(c.tenant.String()).Set(float64(c.n))
		now[c.tenant] = true
	}
	for t := range g.seen {
		if !now[t] {
			metrics.DLQDeliveries.WithLabelValues(t.String()).Set(0)
		}
	}
	for t := range now {
		g.seen[t] = true
	}
	return nil
}

func (g *Gauges) queues() error {
	conn, err := g.conn.Current()
	if err != nil {
		return err
	}
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("open channel: %w", err)
	}
	defer ch.Close()
	names := map[string][]string{"dead": {g.topo.DeadQueue()}}
	for _, p := range queue.Priorities {
		names[p] = g.topo.WorkQueues(p)
	}
	for label, queues := range names {
		n := 0
		for _, name := range queues {
			q, err := ch.QueueDeclarePassive(name, true, false, false, false, nil)
			if err != nil {
				return fmt.Errorf("inspect queue %s: %w", name, err)
			}
			n += q.Messages
		}
		metrics.QueueDepth.WithLabelValues(label).Set(float64(n))
	}
	return nil
}
