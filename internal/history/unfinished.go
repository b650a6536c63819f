package history

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
)

// A webhook's unfinished deliveries (pending or retrying) are in
// deliveries_unfinished_idx, in id order, beside an entry for every
// delivery that finished since the last vacuum: a list of them read from
// the webhook's first entry would read pages in proportion to its
// history. Every unfinished delivery of a webhook has an id at or after
// its floor in webhook_unfinished_floors, so the lists read from there.
//
// The floor only moves forward, to the webhook's oldest unfinished
// delivery, and never past FloorLag before now. Every delivery's id is
// taken by uuidv7() in the statement that inserts it, from Postgres's
// clock, and the transaction commits right after that statement: a
// delivery not yet visible to the statement that moves the floor has an
// id from the last moments, which the lag keeps ahead of the floor. A
// terminal state is final and every new delivery (a retry, a recovery,
// a replay) takes a new id, so a delivery behind the floor never becomes
// unfinished again.
const FloorLag = 5 * time.Minute

// unfinishedStatuses are the states whose lists read from the floor.
var unfinishedStatuses = map[string]bool{"pending": true, "retrying": true}

// Unfinished tells whether a list filtered by status lists unfinished
// deliveries only, and so may read from the webhook's floor.
func Unfinished(status string) bool { return unfinishedStatuses[status] }

// advanceFloorSQL finds the webhook's oldest unfinished delivery from its
// floor (from the webhook's first entry when it has none) and moves the
// floor to it, or to FloorLag ($3) before now if that is earlier or the
// webhook has none; it returns the floor the lists may read from. A
// concurrent advance may have moved the floor further since: the upsert
// keeps the greater, and the one returned here is at or before both.
const advanceFloorSQL = `WITH cur AS (
    SELECT coalesce((SELECT floor FROM webhook_unfinished_floors WHERE webhook_id = $1),
        '00000000-0000-0000-0000-000000000000') AS floor
), head AS (
    SELECT d.id FROM deliveries d
    WHERE d.webhook_id = $1 AND d.tenant_id = $2 AND d.status IN ('pending', 'retrying')
      AND d.id >= (SELECT floor FROM cur)
    ORDER BY d.id
    LIMIT 1
), next AS (
    SELECT greatest((SELECT floor FROM cur), least((SELECT id FROM head), uuidv7_floor(now() - $3::interval))) AS floor
), moved AS (
    INSERT INTO webhook_unfinished_floors AS f (webhook_id, floor)
    SELECT w.id, n.floor FROM webhooks w, next n WHERE w.id = $1 AND w.tenant_id = $2
    ON CONFLICT (webhook_id) DO UPDATE SET floor = excluded.floor WHERE f.floor < excluded.floor
)
SELECT floor FROM next`

// UnfinishedFloor moves the tenant's webhook's floor to its oldest
// unfinished delivery (at most FloorLag before now) and returns it: every
// pending or retrying delivery of the webhook has an id at or after it.
func (r *Reader) UnfinishedFloor(ctx context.Context, tenantID, webhookID uuid.UUID) (uuid.UUID, error) {
	var floor uuid.UUID
	if err := r.pool.QueryRow(ctx, advanceFloorSQL, webhookID, tenantID, FloorLag).
		Scan(&floor); err != nil {
		return uuid.Nil, fmt.Errorf("advance unfinished floor of webhook %s: %w", webhookID, err)
	}
	return floor, nil
}

// later returns the later of two ids.
func later(a, b uuid.UUID) uuid.UUID {
	if bytes.Compare(a[:], b[:]) < 0 {
		return b
	}
	return a
}
