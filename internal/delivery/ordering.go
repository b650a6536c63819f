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

// The check and the release each run as one batch: the key's lock, then
// one statement, in the implicit transaction of the batch, so that each
// holds the lock for one round trip to Postgres. The key's deliveries are
// attempted one after another, each waiting for its predecessor's
// release, so what the lock costs bounds how many a key delivers a second.
const (
	orderLockSQL = `SELECT pg_advisory_xact_lock(hashtextextended($1, 9))`
	// keyFloor is the floor of the key $1: a point at or before its
	// unfinished deliveries in (event_id, id) order, noFloor without one.
	keyFloor = `(coalesce((SELECT f.event_id FROM order_floors f WHERE f.order_key = $1), '00000000-0000-0000-0000-000000000000'),
        coalesce((SELECT f.id FROM order_floors f WHERE f.order_key = $1), '00000000-0000-0000-0000-000000000000'))`
	// keyHead is the key's first unfinished delivery from its floor on,
	// read in the order of deliveries_order_idx: the planner then reads
	// that index from the floor, not the index of every key's deliveries
	// by event (deliveries_event_idx) over the same events.
	keyHead = `SELECT event_id, id FROM deliveries
    WHERE order_key = $1 AND status IN ('pending', 'retrying') AND (event_id, id) >= ` + keyFloor + `
    ORDER BY event_id, id LIMIT 1`
	// checkSQL parks the delivery ($2, $3) of the key $1 if the key's head
	// is an earlier delivery, and says whether it is.
	checkSQL = `WITH earlier AS (
    SELECT coalesce((SELECT (h.event_id, h.id) < ($2, $3) FROM (` + keyHead + `) AS h), false) AS e
), park AS (
    UPDATE deliveries SET parked_at = now(), park_reason = 'order', updated_at = now()
    WHERE id = $3 AND status IN ('pending', 'retrying') AND (SELECT e FROM earlier)
)
SELECT e FROM earlier`
	// releaseSQL, for the key $1 whose head has finished: finds its new
	// head, the first unfinished delivery from its floor on; moves the
	// floor up to it, or to five minutes ago if that is earlier, provided
	// the floor is still the one the statement read (a retry may have
	// moved it down since); and unparks the head if it is parked behind
	// the key, clearing its outbox mark so that the relay covers it (due
	// now). It returns the head's task when it unparked it.
	releaseSQL = `WITH floor AS (
    SELECT event_id, id FROM order_floors WHERE order_key = $1
), head AS (
    ` + keyHead + `
), raise AS (
    INSERT INTO order_floors AS f (order_key, event_id, id)
    SELECT $1, m.event_id, m.id
    FROM (SELECT event_id, id FROM head
          UNION ALL SELECT uuidv7_floor(now() - interval '5 minutes'), '00000000-0000-0000-0000-000000000000'::uuid) AS m
    ORDER BY m.event_id, m.id
    LIMIT 1
    ON CONFLICT (order_key) DO UPDATE SET event_id = excluded.event_id, id = excluded.id
    WHERE (f.event_id, f.id) = ((SELECT event_id FROM floor), (SELECT id FROM floor))
      AND (excluded.event_id, excluded.id) > (f.event_id, f.id)
)
UPDATE deliveries d SET parked_at = NULL, park_reason = NULL, enqueued_at = NULL, next_attempt_at = now(), updated_at = now()
FROM events e, head h
WHERE d.id = h.id AND d.park_reason = 'order' AND d.status IN ('pending', 'retrying') AND e.id = d.event_id
RETURNING d.id, d.event_id, d.webhook_id, d.tenant_id, d.priority, d.attempt_count, d.created_at, e.correlation_id`
)

// noFloor is the floor of a key without one: it bounds nothing.
var noFloor = [2]uuid.UUID{}

// underKeyLock runs sql under the key's lock, in one round trip, and
// scans its row, if it has one, into dest; found says whether it had.
func underKeyLock(ctx context.Context, pool *pgxpool.Pool, key, sql string, args []any, dest ...any) (found bool, err error) {
	b := &pgx.Batch{}
	b.Queue(orderLockSQL, key)
	b.Queue(sql, args...)
	br := pool.SendBatch(ctx, b)
	defer func() {
		if cerr := br.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	if _, err := br.Exec(); err != nil {
		return false, fmt.Errorf("order lock: %w", err)
	}
	switch err := br.QueryRow().Scan(dest...); {
	case errors.Is(err, pgx.ErrNoRows):
		return false, nil
	case err != nil:
		return false, err
	}
	return true, nil
}

// waitYourTurn parks the delivery if an earlier one of its key is
// unfinished, and reports whether it did.
func waitYourTurn(ctx context.Context, pool *pgxpool.Pool, key string, eventID, id uuid.UUID) (bool, error) {
	var earlier bool
	if _, err := underKeyLock(ctx, pool, key, checkSQL, []any{key, eventID, id}, &earlier); err != nil {
		return false, fmt.Errorf("order check: %w", err)
	}
	return earlier, nil
}

// ReleaseNext unparks the next delivery of an order key whose head has just
// finished, and returns its task for the caller to publish (nil when there
// is none, or it is not parked: then its message is already on its way).
func ReleaseNext(ctx context.Context, pool *pgxpool.Pool, key string) (*wire.Task, error) {
	t := &wire.Task{}
	var attempts int
	found, err := underKeyLock(ctx, pool, key, releaseSQL, []any{key}, &t.DeliveryID, &t.EventID, &t.WebhookID,
		&t.TenantID, &t.Priority, &attempts, &t.CreatedAt, &t.CorrelationID)
	if err != nil {
		return nil, fmt.Errorf("release: %w", err)
	}
	if !found {
		return nil, nil
	}
	t.Attempt = attempts + 1
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
