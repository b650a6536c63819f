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
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
)

// Reason is why a delivery is parked (the park_reason column).
type Reason string

// The reasons a delivery waits in Postgres.
const (
	// Order: behind an earlier delivery of its order key; released by
	// whoever finishes that one, never by time.
	Order Reason = "order"
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

// parkSQL parks a delivery for its attempt $4 (the attempt count it was
// built for, so that a stale duplicate message parks nothing), counting
// the postponement. $3 NULL parks it until it is released.
const parkSQL = `UPDATE deliveries SET parked_at = now(), park_reason = $2, next_attempt_at = $3,
    enqueued_at = NULL, postponed_count = postponed_count + 1, updated_at = now()
WHERE id = $1 AND attempt_count = $4 AND status IN ('pending', 'retrying')`

// execer is a pool or a transaction.
type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Park parks delivery id, whose next attempt is number attempt, until
// until (nil: until released). It reports false when the delivery was not
// in that state any more (finished, or another message moved it on).
func Park(ctx context.Context, db execer, id uuid.UUID, attempt int, reason Reason, until *time.Time) (bool, error) {
	tag, err := db.Exec(ctx, parkSQL, id, string(reason), until, attempt-1)
	if err != nil {
		return false, fmt.Errorf("park delivery %s (%s): %w", id, reason, err)
	}
	return tag.RowsAffected() == 1, nil
}
