package schedule

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/hookline/hookline/internal/duescan"
	"github.com/hookline/hookline/internal/metrics"
	"github.com/hookline/hookline/internal/queue"
	"github.com/hookline/hookline/internal/supervisor"
	"github.com/hookline/hookline/internal/wire"
)

// publisher is the part of queue.Publisher the waker uses.
type publisher interface {
	Publish(ctx context.Context, msgs ...queue.Message) error
}

// Waker publishes parked deliveries when their time comes. Every worker
// runs one; rows are claimed with FOR UPDATE SKIP LOCKED, so they share
// the work and a killed worker's parked deliveries are woken by the
// others.
//
// Deliveries parked behind an open circuit are woken a few at a time per
// webhook (its half_open_max_calls: the probes); the others stay parked
// for one more sleep window, unless the circuit's decision releases them
// first (breaker.ReleaseParked when it closes or is reset, HoldParked when
// it opens again).
type Waker struct {
	pool *pgxpool.Pool
	pub  publisher
	log  *slog.Logger
	// Interval is the pause between passes that found nothing more to do.
	Interval time.Duration
	// Lead is how early a delivery is published before its time; the
	// message carries its time and the consumer holds it for the rest.
	Lead time.Duration
	// Batch bounds the deliveries of one pass.
	Batch int
	// Scan bounds the passes: deliveries_wake_idx keeps an entry for
	// every delivery parked since the last vacuum, so most passes begin
	// shortly before the previous one's due time, one a minute at a
	// floor a few minutes back, and one an hour at the oldest entry
	// (package duescan).
	Scan duescan.Bound
}

// NewWaker returns a waker with the default timings: every 100 ms,
// publishing what is due within the next 100 ms, 500 at a time, with the
// passes of duescan.Defaults.
func NewWaker(pool *pgxpool.Pool, pub publisher, log *slog.Logger) *Waker {
	return &Waker{pool: pool, pub: pub, log: log, Interval: 100 * time.Millisecond, Lead: 100 * time.Millisecond, Batch: 500,
		Scan: duescan.Defaults()}
}

// dueBoundSQL is the due time of a pass: deliveries parked until before
// it are published.
const dueBoundSQL = `SELECT now() + $1::interval`

// dueSQL claims parked deliveries due by $1, up to $2, oldest time first,
// with what their message needs and, for the circuit's, how many probes
// their webhook's half-open period takes and its base sleep window.
// dueSinceSQL claims only those due at or after $3: a statement of its
// own, so that its generic plan keeps $3 as the index's lower bound.
//
// The deliveries are chosen and locked from deliveries alone, then
// joined: a join on their webhook would imply deliveries_unfinished_idx's
// predicate (migration 000028), and the planner could then walk that
// index, every delivery since the last vacuum, instead of
// deliveries_wake_idx.
const (
	dueSQL      = dueColumns + ` AND next_attempt_at <= $1` + dueOrder
	dueSinceSQL = dueColumns + ` AND next_attempt_at <= $1 AND next_attempt_at >= $3` + dueOrder
	dueColumns  = `SELECT d.id, d.event_id, d.webhook_id, d.tenant_id, d.priority, d.attempt_count, d.created_at,
    e.correlation_id, d.park_reason, d.next_attempt_at,
    coalesce((w.circuit_breaker_config->>'half_open_max_calls')::int, 5),
    coalesce((w.circuit_breaker_config->>'sleep_window_ms')::bigint, 30000)
FROM (
    SELECT id, event_id, webhook_id, tenant_id, priority, attempt_count, created_at, park_reason, next_attempt_at
    FROM deliveries
    WHERE parked_at IS NOT NULL AND park_reason <> 'order' AND status IN ('pending', 'retrying')`
	dueOrder = `
    ORDER BY next_attempt_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
) d
JOIN events e ON e.id = d.event_id
JOIN webhooks w ON w.id = d.webhook_id
ORDER BY d.next_attempt_at`
)

// oldestSQL is the oldest time of a parked delivery the waker publishes,
// of those every transaction can see (locked or not), for the next floor
// of the passes (package duescan); oldestSinceSQL of those at or after $1.
const (
	oldestSQL = `SELECT min(next_attempt_at) FROM deliveries
WHERE parked_at IS NOT NULL AND park_reason <> 'order' AND status IN ('pending', 'retrying')`
	oldestSinceSQL = oldestSQL + ` AND next_attempt_at >= $1`
)

// wokenSQL unparks the published deliveries; their messages are confirmed.
var wokenSQL = `UPDATE deliveries SET parked_at = NULL, park_reason = NULL, enqueued_at = now(), updated_at = now()
WHERE ` + wire.IDsIn("id", "$1") + ` AND park_reason IS NOT NULL AND park_reason <> 'order'`

// heldSQL keeps deliveries parked behind a half-open circuit for another
// sleep window ($2 ms), beyond that window's probes.
var heldSQL = `UPDATE deliveries SET next_attempt_at = now() + make_interval(secs => $2::bigint / 1000.0), updated_at = now()
WHERE ` + wire.IDsIn("id", "$1") + ` AND park_reason = 'circuit_open'`

// parked is one claimed row.
type parked struct {
	task      wire.Task
	reason    Reason
	due       time.Time
	probes    int
	sleepMS   int64
	webhookID uuid.UUID
}

// Run wakes deliveries until ctx ends.
func (w *Waker) Run(ctx context.Context) error {
	return supervisor.Every(ctx, 0, w.Interval, func(ctx context.Context) {
		for {
			n, err := w.Pass(ctx)
			if err != nil && ctx.Err() == nil {
				w.log.Warn("parked deliveries not woken; next pass retries", "error", err)
			}
			if err != nil || n < w.Batch {
				return
			}
		}
	})
}

// Pass wakes one batch of due deliveries and reports how many rows it
// handled (woken or held).
func (w *Waker) Pass(ctx context.Context) (int, error) {
	var n int
	var bound, oldest time.Time
	pass := w.Scan.Start(time.Now())
	err := pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, dueBoundSQL, w.Lead).Scan(&bound); err != nil {
			return fmt.Errorf("select due parked deliveries: %w", err)
		}
		var rows pgx.Rows
		var err error
		if pass.Full() {
			rows, err = tx.Query(ctx, dueSQL, bound, w.Batch)
		} else {
			rows, err = tx.Query(ctx, dueSinceSQL, bound, w.Batch, pass.Since)
		}
		if err != nil {
			return fmt.Errorf("select due parked deliveries: %w", err)
		}
		due, err := pgx.CollectRows(rows, scanParked)
		if err != nil {
			return fmt.Errorf("scan due parked deliveries: %w", err)
		}
		n = len(due)
		wake, hold := probesOnly(due)
		if err := w.publish(ctx, tx, wake); err != nil {
			return err
		}
		for sleepMS, ids := range hold {
			if _, err := tx.Exec(ctx, heldSQL, ids, sleepMS); err != nil {
				return fmt.Errorf("hold parked deliveries: %w", err)
			}
		}
		if pass.Settles && n < w.Batch {
			oldest, err = duescan.Oldest(ctx, tx, pass, oldestSQL, oldestSinceSQL)
			if err != nil {
				return fmt.Errorf("select the oldest parked delivery: %w", err)
			}
		}
		return nil
	})
	if err == nil {
		w.Scan.Done(pass, bound, n, w.Batch, oldest)
	}
	if errors.Is(err, context.Canceled) {
		return n, nil
	}
	return n, err
}

func scanParked(row pgx.CollectableRow) (parked, error) {
	var p parked
	var attempts int
	var reason string
	err := row.Scan(&p.task.DeliveryID, &p.task.EventID, &p.task.WebhookID, &p.task.TenantID, &p.task.Priority,
		&attempts, &p.task.CreatedAt, &p.task.CorrelationID, &reason, &p.due, &p.probes, &p.sleepMS)
	p.task.Attempt = attempts + 1
	p.reason = Reason(reason)
	p.webhookID = p.task.WebhookID
	return p, err
}

// probesOnly splits due deliveries into those to wake and, for circuits,
// those beyond their webhook's probes, grouped by sleep window.
func probesOnly(due []parked) (wake []parked, hold map[int64][]uuid.UUID) {
	hold = map[int64][]uuid.UUID{}
	woken := map[uuid.UUID]int{}
	for _, p := range due {
		if p.reason == CircuitOpen {
			if woken[p.webhookID] >= max(p.probes, 1) {
				hold[p.sleepMS] = append(hold[p.sleepMS], p.task.DeliveryID)
				continue
			}
			woken[p.webhookID]++
		}
		wake = append(wake, p)
	}
	return wake, hold
}

// publish publishes the woken deliveries, due at their time, and unparks
// them; if the broker fails, nothing is unparked (the transaction rolls
// back) and the next pass tries again.
func (w *Waker) publish(ctx context.Context, tx pgx.Tx, wake []parked) error {
	if len(wake) == 0 {
		return nil
	}
	msgs := make([]queue.Message, len(wake))
	ids := make([]uuid.UUID, len(wake))
	for i, p := range wake {
		msgs[i] = p.task.Message(p.due)
		// A rate-limited delivery goes on its reserved slot; one that found
		// its host busy had been let in on a slot already. Neither draws
		// from the buckets again.
		if p.reason == RateLimited || p.reason == HostBusy {
			msgs[i].Headers = amqp.Table{HeaderReservedAt: p.due.UnixMilli()}
		}
		ids[i] = p.task.DeliveryID
	}
	if err := w.pub.Publish(ctx, msgs...); err != nil {
		return fmt.Errorf("publish %d woken deliveries: %w", len(msgs), err)
	}
	if _, err := tx.Exec(ctx, wokenSQL, ids); err != nil {
		return fmt.Errorf("unpark %d woken deliveries: %w", len(ids), err)
	}
	for _, p := range wake {
		metrics.DeliveryRepublishes.WithLabelValues(string(p.reason)).Inc()
	}
	return nil
}
