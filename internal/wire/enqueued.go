package wire

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
)

// UnfinishedByKey is the condition on a delivery's status column (status,
// or d.status) with which the statements that find deliveries by id name
// the states they may move from: every state but the finished ones.
// Written as status IN ('pending', 'retrying'), it let a generic plan
// made while few deliveries were unfinished read the partial index of
// unfinished deliveries whole and filter it by id, instead of looking
// the ids up by primary key: a mark of five deliveries read all 3,000
// unfinished ones (2,000 pages), and that index also keeps an entry for
// every finished delivery until a vacuum. Postgres cannot tell that this
// condition implies that index's, so no plan of these statements uses it.
func UnfinishedByKey(status string) string {
	return status + ` NOT IN ('succeeded', 'exhausted', 'cancelled')`
}

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
// The rows are found by their ids alone (IDsIn), a primary key lookup per id
// (not a join rescanning the array) in every plan made from current
// statistics (see db.RunAnalyzer and UnfinishedByKey).
var MarkEnqueuedSQL = `WITH locked AS (
    SELECT id FROM deliveries
    WHERE ` + IDsIn("id", "$1") + ` AND attempt_count = $2
      AND enqueued_at IS NULL AND ` + UnfinishedByKey("status") + `
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

// IDsIn is the condition that col is one of the ids in the uuid[]
// parameter p, for statements on deliveries, which is partitioned by week
// on its id. Postgres does not prune partitions by = ANY of a parameter
// array, and would read the primary key of every week; so the condition
// also names the least and the greatest of the ids, which it prunes by as
// the statement starts: a batch of ids made within seconds reads one week.
//
// A generic plan counts such a pair of bounds of unknown values as 0.5 %
// of the rows, so that any index ending in the id (a webhook's, say)
// looks as cheap as the primary key; a statement that joins deliveries to
// a table it could drive them from reads them in a subquery of their own
// (see delivery's loadJobsSQL).
func IDsIn(col, p string) string {
	return col + ` = ANY(` + p + `::uuid[]) AND ` + col + ` BETWEEN (SELECT x FROM unnest(` + p + `::uuid[]) x ORDER BY x LIMIT 1)
    AND (SELECT x FROM unnest(` + p + `::uuid[]) x ORDER BY x DESC LIMIT 1)`
}
