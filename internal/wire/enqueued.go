package wire

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
)

// MarkEnqueuedSQL records that the messages for the next attempt of
// deliveries $1 are confirmed, for deliveries whose attempt count is $2
// (the count the messages were built for, so that a late mark cannot cover
// a newer attempt's message that was not sent). See MarkEnqueued.
//
// It never waits for a row lock: a delivery locked by someone else is
// being changed by a worker recording its attempt (after which this mark
// would not apply) or by the relay (which marks it itself). Waiting there
// would put the mark and a worker's batch of attempt records in each
// other's way, a deadlock that Postgres breaks only after a second.
//
// The rows are found by id = ANY($1) alone, a primary key lookup per id
// (not a join rescanning the array) in every plan made from current
// statistics (see db.RunAnalyzer).
const MarkEnqueuedSQL = `WITH locked AS (
    SELECT id FROM deliveries
    WHERE id = ANY($1::uuid[]) AND attempt_count = $2
      AND enqueued_at IS NULL AND status IN ('pending', 'retrying')
    FOR UPDATE SKIP LOCKED
)
UPDATE deliveries d SET enqueued_at = now() FROM locked WHERE d.id = locked.id`

// MarkEnqueued marks the deliveries of tasks enqueued: one statement per
// distinct attempt number among them (usually one).
func MarkEnqueued(ctx context.Context, db execer, tasks []Task) error {
	byAttempts := map[int][]uuid.UUID{}
	for _, t := range tasks {
		byAttempts[t.Attempt-1] = append(byAttempts[t.Attempt-1], t.DeliveryID)
	}
	for attempts, ids := range byAttempts {
		if _, err := db.Exec(ctx, MarkEnqueuedSQL, ids, attempts); err != nil {
			return fmt.Errorf("mark %d deliveries enqueued: %w", len(ids), err)
		}
	}
	return nil
}

// execer is a pool or a transaction.
type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}
