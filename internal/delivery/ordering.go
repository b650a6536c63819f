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
// Both read the key's unfinished deliveries from its floor (order_floors)
// on, not from its first entry in deliveries_order_idx, which keeps one for
// every delivery of the key until a vacuum. The floor is at or before
// every unfinished delivery of the key: a release moves it up to the new
// first one, but never past five minutes before it runs (a publish still
// committing may hold an event that old); a retry or recovery of an older
// event moves it down (webhook.LowerOrderFloorsSQL). A release that read
// the floor before such a move leaves it as the move left it.
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
	// floorSQL reads the key's floor.
	floorSQL = `SELECT event_id, id FROM order_floors WHERE order_key = $1`
	// earlierSQL: is a delivery of the key from its floor ($4, $5) on,
	// and before ($2, $3), unfinished?
	earlierSQL = `SELECT EXISTS (SELECT 1 FROM deliveries
    WHERE order_key = $1 AND status IN ('pending', 'retrying') AND (event_id, id) < ($2, $3) AND (event_id, id) >= ($4, $5))`
	parkSQL = `UPDATE deliveries SET parked_at = now(), park_reason = 'order', updated_at = now()
WHERE id = $1 AND status IN ('pending', 'retrying')`
	// headSQL finds the first unfinished delivery of the key $1 from its
	// floor ($2, $3) on.
	headSQL = `SELECT event_id, id FROM deliveries
WHERE order_key = $1 AND status IN ('pending', 'retrying') AND (event_id, id) >= ($2, $3)
ORDER BY event_id, id LIMIT 1`
	// raiseFloorSQL moves the key's floor up to its first unfinished
	// delivery ($2, $3; NULL when none), or to five minutes ago if that is
	// earlier, provided the floor is still the one read ($4, $5; NULL when
	// the key had none).
	raiseFloorSQL = `INSERT INTO order_floors AS f (order_key, event_id, id)
SELECT $1, m.event_id, m.id
FROM (VALUES ($2::uuid, $3::uuid), (uuidv7_floor(now() - interval '5 minutes'), '00000000-0000-0000-0000-000000000000'::uuid)) AS m(event_id, id)
WHERE m.event_id IS NOT NULL
ORDER BY m.event_id, m.id
LIMIT 1
ON CONFLICT (order_key) DO UPDATE SET event_id = excluded.event_id, id = excluded.id
WHERE (f.event_id, f.id) = ($4::uuid, $5::uuid) AND (excluded.event_id, excluded.id) > (f.event_id, f.id)`
	// releaseSQL unparks the delivery $1 if it is parked behind its key,
	// and clears its outbox mark so that the relay covers it (once it is
	// due for the relay: next_attempt_at is now).
	releaseSQL = `UPDATE deliveries d SET parked_at = NULL, park_reason = NULL, enqueued_at = NULL, next_attempt_at = now(), updated_at = now()
FROM events e
WHERE d.id = $1 AND d.park_reason = 'order' AND d.status IN ('pending', 'retrying') AND e.id = d.event_id
RETURNING d.id, d.event_id, d.webhook_id, d.tenant_id, d.priority, d.attempt_count, d.created_at, e.correlation_id`
)

// noFloor is the floor of a key without one: it bounds nothing.
var noFloor = [2]uuid.UUID{}

// readFloor returns the key's floor, or noFloor and false without one.
func readFloor(ctx context.Context, tx pgx.Tx, key string) ([2]uuid.UUID, bool, error) {
	var f [2]uuid.UUID
	err := tx.QueryRow(ctx, floorSQL, key).Scan(&f[0], &f[1])
	if errors.Is(err, pgx.ErrNoRows) {
		return noFloor, false, nil
	}
	if err != nil {
		return noFloor, false, fmt.Errorf("order floor: %w", err)
	}
	return f, true, nil
}

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
	floor, _, err := readFloor(ctx, tx, key)
	if err != nil {
		return false, err
	}
	var earlier bool
	if err := tx.QueryRow(ctx, earlierSQL, key, eventID, id, floor[0], floor[1]).Scan(&earlier); err != nil {
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
	floor, had, err := readFloor(ctx, tx, key)
	if err != nil {
		return nil, err
	}
	var head *[2]uuid.UUID
	var h [2]uuid.UUID
	switch err := tx.QueryRow(ctx, headSQL, key, floor[0], floor[1]).Scan(&h[0], &h[1]); {
	case err == nil:
		head = &h
	case !errors.Is(err, pgx.ErrNoRows):
		return nil, fmt.Errorf("release: %w", err)
	}
	raise := []any{key, nil, nil, nil, nil}
	if head != nil {
		raise[1], raise[2] = head[0], head[1]
	}
	if had {
		raise[3], raise[4] = floor[0], floor[1]
	}
	if _, err := tx.Exec(ctx, raiseFloorSQL, raise...); err != nil {
		return nil, fmt.Errorf("raise order floor: %w", err)
	}
	var t *wire.Task
	if head != nil {
		t = &wire.Task{}
		var attempts int
		err = tx.QueryRow(ctx, releaseSQL, head[1]).Scan(&t.DeliveryID, &t.EventID, &t.WebhookID, &t.TenantID, &t.Priority,
			&attempts, &t.CreatedAt, &t.CorrelationID)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			t = nil // not parked: its message is on its way
		case err != nil:
			return nil, fmt.Errorf("release: %w", err)
		default:
			t.Attempt = attempts + 1
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("release: %w", err)
	}
	return t, nil
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
const stalledKeysSQL = `SELECT DISTINCT d.order_key FROM deliveries d LEFT JOIN order_floors f ON f.order_key = d.order_key
WHERE d.park_reason = 'order' AND d.parked_at < now() - $1::interval AND d.status IN ('pending', 'retrying')
  AND NOT EXISTS (SELECT 1 FROM deliveries p WHERE p.order_key = d.order_key
                  AND p.status IN ('pending', 'retrying') AND (p.event_id, p.id) < (d.event_id, d.id)
                  AND (p.event_id, p.id) >= (coalesce(f.event_id, '00000000-0000-0000-0000-000000000000'),
                                             coalesce(f.id, '00000000-0000-0000-0000-000000000000')))
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
