// Package schedule decides when work that cannot go now goes, and how a
// worker's capacity is shared between tenants (docs/SCHEDULING.md).
//
// Deferred deliveries are parked, not spun: a delivery that has to wait
// longer than ParkAfter (for its reserved rate-limit slot, for the
// half-open decision of its circuit, for a free connection to its host or
// a free slot of its tenant) is written down in Postgres with its reason
// and its time, its message is acknowledged, and a Waker publishes it
// again when its time comes: one row update and one publish however long
// it waits. Shorter waits go through the broker's delay tiers.
//
// Gate shares a worker's slots between tenants; see its doc.
package schedule

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/hookline/hookline/internal/db"
	"github.com/hookline/hookline/internal/wire"
)

// Reason is why a delivery is parked (the park_reason column).
type Reason string

// The reasons a delivery waits in Postgres.
const (
	// Order: behind an earlier delivery of its order key; released by
	// whoever finishes that one, never by time.
	Order Reason = "order"
	// Backoff: for its next retry; the attempt record parks it.
	Backoff Reason = "backoff"
	// RateLimited: for its own reserved slot in its token buckets.
	RateLimited Reason = "rate_limited"
	// CircuitOpen: for the half-open decision of its webhook's circuit.
	CircuitOpen Reason = "circuit_open"
	// HostBusy: for its endpoint host's next estimated free connection.
	HostBusy Reason = "host_busy"
	// TenantShare: for its tenant's next estimated free worker slot.
	TenantShare Reason = "tenant_share"
	// Inactive: for the webhook to be enabled again.
	Inactive Reason = "inactive"
	// Unverified: for the endpoint to pass verification.
	Unverified Reason = "unverified"
	// Released: its wait was ended by a decision (its circuit closed or
	// was reset); the wakers publish it at once.
	Released Reason = "released"
)

// ParkAfter is the shortest wait that is parked in Postgres; shorter ones
// go through the broker's delay tiers (a few hops at most).
const ParkAfter = time.Second

// HeaderReservedAt carries, on a delivery message, the unix millisecond of
// the rate-limit slot reserved for it: the worker sends it then without
// drawing from the buckets again.
const HeaderReservedAt = "x-reserved-at"

// parkSQL parks deliveries, each for its attempt (the attempt count its
// message was built for), counting the postponement; a NULL time parks
// until released. A delivery parked already is left alone: the message is
// a stale duplicate (one redelivered after a worker died, say), and the
// waker publishes the delivery at its time. A waker's claim holds the row
// until its transaction ends, and the update then looks again, so a
// woken delivery can be parked anew. Rows are
// found by their ids (wire.IDsIn), a primary key lookup in any plan made from
// current statistics (see db.RunAnalyzer), and they are written
// in id order, as the worker's attempt records are, so that the two never
// deadlock.
var parkSQL = `UPDATE deliveries d SET parked_at = now(), park_reason = i.reason, next_attempt_at = i.until,
    enqueued_at = NULL, postponed_count = d.postponed_count + 1, updated_at = now()
FROM unnest($1::uuid[], $2::text[], $3::timestamptz[], $4::int[]) AS i(id, reason, until, attempts)
WHERE ` + wire.IDsIn("d.id", "$1") + ` AND d.id = i.id AND d.attempt_count = i.attempts
  AND ` + wire.UnfinishedByKey("d.status") + `
  AND d.parked_at IS NULL
RETURNING d.id`

// Parking is one delivery to park.
type Parking struct {
	DeliveryID uuid.UUID
	// Attempt is the attempt the delivery's message was for.
	Attempt int
	Reason  Reason
	// Until is when it is looked at again; nil: until released.
	Until *time.Time
}

// Park parks deliveries with one statement, and reports for each whether
// it was parked (false: finished, or moved on by another message). It
// fits batch.Func, so that the parkings of many handlers share a round
// trip.
func Park(ctx context.Context, q db.Querier, ps []Parking) ([]bool, error) {
	sorted := slices.Clone(ps)
	slices.SortFunc(sorted, func(a, b Parking) int { return bytes.Compare(a.DeliveryID[:], b.DeliveryID[:]) })
	ids, reasons := make([]uuid.UUID, len(sorted)), make([]string, len(sorted))
	until, attempts := make([]*time.Time, len(sorted)), make([]int32, len(sorted))
	for i, p := range sorted {
		ids[i], reasons[i], until[i], attempts[i] = p.DeliveryID, string(p.Reason), p.Until, int32(p.Attempt-1) //nolint:gosec // attempt numbers are at most max_attempts
	}
	rows, err := q.Query(ctx, parkSQL, ids, reasons, until, attempts)
	if err != nil {
		return nil, fmt.Errorf("park %d deliveries: %w", len(ps), err)
	}
	parked, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return nil, fmt.Errorf("park %d deliveries: %w", len(ps), err)
	}
	done := make(map[uuid.UUID]bool, len(parked))
	for _, id := range parked {
		done[id] = true
	}
	out := make([]bool, len(ps))
	for i, p := range ps {
		out[i] = done[p.DeliveryID]
	}
	return out, nil
}

// hastenSQL brings forward deliveries of the webhooks $1 parked for a busy
// host whose reservations the host no longer needs (see Hasten): in the
// order of their reservations, one every $2 microseconds from now, each
// only if that is earlier than its reservation; at most $3 of them. Rows
// another transaction holds at the moment (a waker publishing them, say)
// are skipped, and the update touches only the rows claimed, so it never
// waits for a lock and cannot deadlock. They are found through
// deliveries_host_parked_idx. now() is the transaction's start: run it on
// its own, not inside a longer transaction.
const hastenSQL = `WITH claimed AS (
    SELECT id, next_attempt_at FROM deliveries
    WHERE webhook_id = ANY($1) AND park_reason = 'host_busy' AND status IN ('pending', 'retrying')
      AND next_attempt_at > now()
    ORDER BY next_attempt_at, id
    LIMIT $3
    FOR UPDATE SKIP LOCKED
), spaced AS (
    SELECT id, now() + make_interval(secs => row_number() OVER (ORDER BY next_attempt_at, id) * $2::bigint / 1e6) AS at
    FROM claimed
)
UPDATE deliveries d SET next_attempt_at = s.at, updated_at = now()
FROM spaced s
WHERE d.id = s.id AND s.at < d.next_attempt_at`

// execer runs a statement: a pool, a connection or a transaction.
type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// MaxHastened bounds the deliveries one Hasten brings forward; the others
// keep their reservations.
const MaxHastened = 10000

// Hasten brings forward the deliveries of webhooks parked for their
// endpoint host's next free connection (HostBusy) when the host turns out
// to need less time than their reservations allowed for: reservations
// made during a stall, at the pace the stall showed, would keep them
// parked long after the host is fast again. They get new times one step
// apart from now, in their order (at most MaxHastened of them), and the
// wakers publish them then. It returns how many it moved.
func Hasten(ctx context.Context, q execer, webhooks []uuid.UUID, step time.Duration) (int64, error) {
	tag, err := q.Exec(ctx, hastenSQL, webhooks, max(step.Microseconds(), 1), MaxHastened)
	if err != nil {
		return 0, fmt.Errorf("hasten deliveries parked for a busy host: %w", err)
	}
	return tag.RowsAffected(), nil
}
