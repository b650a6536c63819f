package history

import (
	"bytes"
	"context"
	"fmt"

	"github.com/google/uuid"

	"github.com/hookline/hookline/internal/unfinished"
)

// A webhook's unfinished deliveries (pending or retrying) are in
// deliveries_unfinished_idx, in id order, beside an entry for every
// delivery that finished since the last vacuum: the lists of them read
// from the webhook's unfinished floor (package unfinished).
//
// unfinishedStatuses are the states whose lists read from the floor.
var unfinishedStatuses = map[string]bool{"pending": true, "retrying": true}

// Unfinished tells whether a list filtered by status lists unfinished
// deliveries only, and so may read from the webhook's floor.
func Unfinished(status string) bool { return unfinishedStatuses[status] }

// advanceFloorSQL moves the webhook's ($1) floor, if it is the tenant's
// ($2), and returns the floor the lists may read from.
var advanceFloorSQL = `WITH ` + unfinished.AdvanceFloor("$1", "$2") + `
SELECT floor FROM next`

// UnfinishedFloor moves the tenant's webhook's floor to its oldest
// unfinished delivery (at most unfinished.FloorLag before now) and
// returns it: every pending or retrying delivery of the webhook has an id
// at or after it.
func (r *Reader) UnfinishedFloor(ctx context.Context, tenantID, webhookID uuid.UUID) (uuid.UUID, error) {
	var floor uuid.UUID
	if err := r.pool.QueryRow(ctx, advanceFloorSQL, webhookID, tenantID).
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
