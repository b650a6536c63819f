package delivery

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
	"github.com/hookline/hookline/internal/supervisor"
	"github.com/hookline/hookline/internal/wire"
)

// Ordered delivery (docs/DESIGN.md §9). The deliveries of an ordered webhook carry an
// order key: the webhook (strict) or the webhook and event type
// (per_event_type). Only the first unfinished delivery of a key, in event
// order, is ever attempted:
//
//   - before attempting an ordered delivery, the worker checks, under an
//     advisory lock on the key, that no earlier delivery of the key is
//     unfinished; if one is, the delivery is parked (parked_at) and its
//     message acknowledged: it waits in Postgres, not in a queue, so it
//     holds no worker and no queue slot, and the relay leaves it alone;
//   - when the head of a key finishes (succeeded, exhausted or cancelled),
//     whoever finished it releases the next one under the same lock: it is
//     unparked, marked not enqueued and published (the outbox relay
//     publishes it if that fails or the process dies first).
//
// The lock makes the check and the release exclusive, so a delivery is
// either seen as unfinished by its successor's check, or finished before
// it and then the successor goes ahead. Retries of the head wait as any
// retry does (parked in Postgres, or in the broker's delay tiers when
// shorter than schedule.ParkAfter): nothing behind it can move meanwhile, and a
// circuit breaker or rate limit that postpones the head postpones the
// whole key. Other keys and unordered webhooks never wait.

const (
	orderLockSQL = `SELECT pg_advisory_xact_lock(hashtextextended($1, 9))`
	// earlierSQL: is an earlier delivery of the key unfinished?
	earlierSQL = `SELECT EXISTS (SELECT 1 FROM deliveries
    WHERE order_key = $1 AND status IN ('pending', 'retrying') AND (event_id, id) < ($2, $3))`
	parkSQL = `UPDATE deliveries SET parked_at = now(), park_reason = 'order', updated_at = now()
WHERE id = $1 AND status IN ('pending', 'retrying')`
	// releaseSQL unparks the first unfinished delivery of the key if it is
	// parked, and clears its outbox mark so that the relay covers it (once
	// it is due for the relay: next_attempt_at is now).
	releaseSQL = `UPDATE deliveries d SET parked_at = NULL, park_reason = NULL, enqueued_at = NULL, next_attempt_at = now(), updated_at = now()
FROM events e
WHERE d.id = (SELECT id FROM deliveries WHERE order_key = $1 AND status IN ('pending', 'retrying')
              ORDER BY event_id, id LIMIT 1)
  AND d.park_reason = 'order' AND e.id = d.event_id
RETURNING d.id, d.event_id, d.webhook_id, d.tenant_id, d.priority, d.attempt_count, d.created_at, e.correlation_id`
)

// waitYourTurn parks the delivery if an earlier one of its key is
// unfinished, and reports whether it did.
func waitYourTurn(ctx context.Context, pool *pgxpool.Pool, key string, eventID, id uuid.UUID) (bool, error) {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return false, fmt.Errorf("order check: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit
	if _, err := tx.Exec(ctx, orderLockSQL, key); err != nil {
		return false, fmt.Errorf("order lock: %w", err)
	}
	var earlier bool
	if err := tx.QueryRow(ctx, earlierSQL, key, eventID, id).Scan(&earlier); err != nil {
		return false, fmt.Errorf("order check: %w", err)
	}
	if !earlier {
		return false, nil // nothing written: the rollback releases the lock
	}
	if _, err := tx.Exec(ctx, parkSQL, id); err != nil {
		return false, fmt.Errorf("park: %w", err)
	}
	return true, tx.Commit(ctx)
}

// ReleaseNext unparks the next delivery of an order key whose head has just
// finished, and returns its task for the caller to publish (nil when there
// is none, or it is not parked: then its message is already on its way).
func ReleaseNext(ctx context.Context, pool *pgxpool.Pool, key string) (*wire.Task, error) {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("release: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit
	if _, err := tx.Exec(ctx, orderLockSQL, key); err != nil {
		return nil, fmt.Errorf("order lock: %w", err)
	}
	var t wire.Task
	var attempts int
	err = tx.QueryRow(ctx, releaseSQL, key).Scan(&t.DeliveryID, &t.EventID, &t.WebhookID, &t.TenantID, &t.Priority,
		&attempts, &t.CreatedAt, &t.CorrelationID)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("release: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("release: %w", err)
	}
	t.Attempt = attempts + 1
	return &t, nil
}

// release publishes the next delivery of the finished delivery's key.
func (w *Worker) release(ctx context.Context, log *slog.Logger, key string) {
	ctx = context.WithoutCancel(ctx)
	next, err := ReleaseNext(ctx, w.store.pool, key)
	if err != nil {
		log.Warn("next ordered delivery not released; it waits until the next finish of its key", "order_key", key, "error", err)
		return
	}
	if next == nil {
		return
	}
	metrics.OrderedReleased.Inc()
	w.enqueue(ctx, log, *next, time.Time{})
}

// stalledKeysSQL finds order keys whose first unfinished delivery has been
// parked for longer than $1: the worker that finished the one before it
// died between recording the outcome and releasing the next.
const stalledKeysSQL = `SELECT DISTINCT d.order_key FROM deliveries d
WHERE d.park_reason = 'order' AND d.parked_at < now() - $1::interval AND d.status IN ('pending', 'retrying')
  AND NOT EXISTS (SELECT 1 FROM deliveries p WHERE p.order_key = d.order_key
                  AND p.status IN ('pending', 'retrying') AND (p.event_id, p.id) < (d.event_id, d.id))
LIMIT 100`

// RescueStalledKeys releases, every interval until ctx ends, the parked
// head of any order key whose release was lost; the outbox relay then
// enqueues it (ReleaseNext leaves it unmarked and due).
func RescueStalledKeys(ctx context.Context, pool *pgxpool.Pool, log *slog.Logger, interval, age time.Duration) error {
	return supervisor.Every(ctx, interval, interval, func(ctx context.Context) {
		rows, err := pool.Query(ctx, stalledKeysSQL, age)
		if err != nil {
			if ctx.Err() == nil {
				log.Warn("stalled order keys not checked", "error", err)
			}
			return
		}
		keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return
		}
		for _, k := range keys {
			if t, err := ReleaseNext(ctx, pool, k); err == nil && t != nil {
				metrics.OrderedReleased.Inc()
				log.Warn("released the parked head of an order key whose release was lost", "order_key", k,
					"delivery_id", t.DeliveryID.String())
			}
		}
	})
}
