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

// advanceFloorSQL moves the webhook's ($1) floor and span, if it is the
// tenant's ($2), and returns them.
var advanceFloorSQL = `WITH ` + unfinished.AdvanceFloor("$1", "$2") + `
SELECT (SELECT floor FROM next), head, behind FROM span`

// Span is where a webhook's unfinished deliveries are: every pending or
// retrying delivery has an id in Behind or at or after Head, and at or
// after Floor (package unfinished).
type Span struct {
	Floor, Head uuid.UUID
	// Behind are old unfinished deliveries, before Head, oldest first;
	// some may have finished since.
	Behind []uuid.UUID
}

// UnfinishedSpan moves the tenant's webhook's floor to its oldest
// unfinished delivery (at most unfinished.FloorLag before now) and its
// span past the old ones, and returns them.
func (r *Reader) UnfinishedSpan(ctx context.Context, tenantID, webhookID uuid.UUID) (Span, error) {
	var sp Span
	if err := r.pool.QueryRow(ctx, advanceFloorSQL, webhookID, tenantID).Scan(&sp.Floor, &sp.Head, &sp.Behind); err != nil {
		return Span{}, fmt.Errorf("advance unfinished floor of webhook %s: %w", webhookID, err)
	}
	return sp, nil
}

// later returns the later of two ids.
func later(a, b uuid.UUID) uuid.UUID {
	if bytes.Compare(a[:], b[:]) < 0 {
		return b
	}
	return a
}

// earlier returns the earlier of two ids.
func earlier(a, b uuid.UUID) uuid.UUID {
	if bytes.Compare(a[:], b[:]) < 0 {
		return a
	}
	return b
}
