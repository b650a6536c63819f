package dlq

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/db/dbtest"
)

// newBatch stores a batch operation of the fixture's tenant in state,
// having enqueued processed retries, all of them when enqueuedAll.
func (f *dlqFixture) newBatch(state string, processed int, enqueuedAll bool) uuid.UUID {
	f.t.Helper()
	var id uuid.UUID
	require.NoError(f.t, f.pool.QueryRow(context.Background(), `INSERT INTO batch_operations
    (id, tenant_id, filter, requests_per_second, priority, state, processed, started_at, enqueued_all_at, finished_at)
VALUES (uuidv7(), $1, '{}', 10, 'normal', $2, $3, now(), CASE WHEN $4 THEN now() END,
    CASE WHEN $2 NOT IN ('pending', 'running') THEN now() END) RETURNING id`,
		f.seed.Tenant, state, processed, enqueuedAll).Scan(&id))
	return id
}

// retries stores n pending retries batch made of new exhausted
// deliveries, in one statement, and returns their ids in id order.
func (f *dlqFixture) retries(batch uuid.UUID, n int) []uuid.UUID {
	f.t.Helper()
	rows, err := f.pool.Query(context.Background(), `WITH exhausted AS (
    INSERT INTO deliveries (id, tenant_id, event_id, webhook_id, priority, status, attempt_count, completed_at)
    SELECT uuidv7(), $1, $2, $3, 'normal', 'exhausted', 5, now() - interval '1 hour' FROM generate_series(1, $5)
    RETURNING id
), retries AS (
    INSERT INTO deliveries (id, tenant_id, event_id, webhook_id, priority, batch_operation_id, retry_of)
    SELECT uuidv7(), $1, $2, $3, 'normal', $4, id FROM exhausted
    RETURNING id
)
SELECT id FROM retries ORDER BY id`, f.seed.Tenant, f.seed.Event, f.seed.Webhooks[0], batch, n)
	require.NoError(f.t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	require.NoError(f.t, err)
	require.Len(f.t, ids, n)
	return ids
}

// counts returns batch's succeeded and failed counts after a pass of
// the tracking.
func (f *dlqFixture) counts(batch uuid.UUID) [2]int {
	f.t.Helper()
	runner := NewRunner(f.pool, &taskRecorder{}, slog.New(slog.DiscardHandler), 1, 30*time.Second)
	require.NoError(f.t, runner.TrackOutcomes(context.Background()))
	var c [2]int
	require.NoError(f.t, f.pool.QueryRow(context.Background(),
		`SELECT succeeded, failed FROM batch_operations WHERE id = $1`, batch).Scan(&c[0], &c[1]))
	return c
}

// A batch's retries count in its succeeded and failed as the statements
// that end them commit (the tracking adds up the batch's counters),
// whoever runs them, while the batch runs or after it was cancelled.
func TestBatchCountsEachRetryAsItEnds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newDLQFixture(t)
	batch := f.newBatch("running", 6, false)
	other := f.newBatch("running", 1, false)
	r := f.retries(batch, 6)
	o := f.retries(other, 1)

	f.exec(`UPDATE deliveries SET status = 'retrying', attempt_count = 1 WHERE id = $1`, r[0])
	require.Equal(t, [2]int{0, 0}, f.counts(batch), "a retry still under way")

	f.exec(`UPDATE deliveries SET status = 'succeeded', completed_at = now() WHERE id = $1`, r[0])
	require.Equal(t, [2]int{1, 0}, f.counts(batch), "a success, from retrying")

	// One statement ending retries of two batches: an exhausted one, a
	// cancelled one, and the other batch's success.
	f.exec(`UPDATE deliveries SET status = CASE WHEN id = $1 THEN 'exhausted' WHEN id = $2 THEN 'cancelled' ELSE 'succeeded' END,
    completed_at = now() WHERE id IN ($1, $2, $3)`, r[1], r[2], o[0])
	require.Equal(t, [2]int{1, 2}, f.counts(batch))
	require.Equal(t, [2]int{1, 0}, f.counts(other))

	// An ended retry written again (the DLQ's record of it) is not counted again.
	f.exec(`UPDATE deliveries SET dead_lettered_at = now() WHERE id = $1`, r[1])
	require.Equal(t, [2]int{1, 2}, f.counts(batch))

	// A cancelled batch's retries enqueued before the cancel still count.
	f.exec(`UPDATE batch_operations SET state = 'cancelled', finished_at = now() WHERE id = $1`, batch)
	f.exec(`UPDATE deliveries SET status = 'succeeded', completed_at = now() WHERE id = $1`, r[3])
	require.Equal(t, [2]int{2, 2}, f.counts(batch))

	// The worker's role ends most retries; it cannot read batch operations,
	// and its statements count them all the same.
	require.NoError(t, pgx.BeginFunc(ctx, f.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL ROLE hookline_worker`); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `UPDATE deliveries SET status = 'succeeded', completed_at = now() WHERE id = $1`, r[4])
		return err
	}))
	require.Equal(t, [2]int{3, 2}, f.counts(batch))

	// A delivery of no batch, and a batch's deleted retry, change nothing.
	var single uuid.UUID
	require.NoError(t, f.pool.QueryRow(ctx, `INSERT INTO deliveries (id, tenant_id, event_id, webhook_id, priority)
VALUES (uuidv7(), $1, $2, $3, 'normal') RETURNING id`, f.seed.Tenant, f.seed.Event, f.seed.Webhooks[0]).Scan(&single))
	f.exec(`UPDATE deliveries SET status = 'succeeded', completed_at = now() WHERE id = $1`, single)
	f.exec(`DELETE FROM deliveries WHERE id = $1`, r[0])
	require.Equal(t, [2]int{3, 2}, f.counts(batch))
	require.Equal(t, [2]int{1, 0}, f.counts(other))
}

// The tracking completes a running batch once it has enqueued every
// retry and every one of them has ended, and not before.
func TestTrackingCompletesABatchOnceEveryRetryEnded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newDLQFixture(t)
	enqueued := f.newBatch("running", 2, true)
	enqueuing := f.newBatch("running", 1, false)
	r := f.retries(enqueued, 2)
	f.retries(enqueuing, 1)
	f.exec(`UPDATE deliveries SET status = 'succeeded', completed_at = now() WHERE id = $1 OR batch_operation_id = $2`, r[0], enqueuing)
	state := func(id uuid.UUID) (s string, finished bool) {
		t.Helper()
		require.NoError(t, f.pool.QueryRow(ctx, `SELECT state, finished_at IS NOT NULL FROM batch_operations WHERE id = $1`, id).
			Scan(&s, &finished))
		return s, finished
	}
	runner := NewRunner(f.pool, &taskRecorder{}, slog.New(slog.DiscardHandler), 1, 30*time.Second)
	require.NoError(t, runner.TrackOutcomes(ctx))
	s, finished := state(enqueued)
	require.Equal(t, "running", s, "one retry still under way")
	require.False(t, finished)

	f.exec(`UPDATE deliveries SET status = 'exhausted', completed_at = now() WHERE id = $1`, r[1])
	require.NoError(t, runner.TrackOutcomes(ctx))
	s, finished = state(enqueued)
	require.Equal(t, "completed", s)
	require.True(t, finished)
	require.Equal(t, [2]int{1, 1}, f.counts(enqueued))
	s, _ = state(enqueuing)
	require.Equal(t, "running", s, "its one retry ended, but it may have more to enqueue")
	require.Equal(t, [2]int{1, 0}, f.counts(enqueuing))
}

// The tracking (every second) reads the open batches and their counters
// alone: beside 5,000 finished batches and 500 cancelled ones, with a
// running batch whose 20,000 retries have ended, it reads a few pages,
// not the batch's deliveries, and counts and completes that batch.
func TestTrackingReadsOnlyOpenBatches(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newDLQFixture(t)
	f.exec(`INSERT INTO batch_operations
    (id, tenant_id, filter, requests_per_second, priority, state, processed, succeeded, finished_at)
SELECT uuidv7(), $1, '{"event_types": ["order.created"]}', 100, 'normal',
    CASE WHEN g % 10 = 0 THEN 'cancelled' ELSE 'completed' END, 100, 100, now() - g * interval '1 second'
FROM generate_series(1, 5500) g`, f.seed.Tenant)
	const retries = 20000
	running := f.newBatch("running", retries, true)
	f.retries(running, retries)
	f.exec(`UPDATE deliveries SET status = 'succeeded', completed_at = now() WHERE batch_operation_id = $1`, running)
	f.exec(`ANALYZE batch_operations`)
	f.exec(`ANALYZE deliveries`)

	pages := dbtest.PagesRead(t, f.pool, trackSQL)
	t.Logf("pages read: %d", pages)
	require.Less(t, pages, 30)
	var state string
	var succeeded int
	require.NoError(t, f.pool.QueryRow(ctx, `SELECT state, succeeded FROM batch_operations WHERE id = $1`, running).Scan(&state, &succeeded))
	require.Equal(t, "completed", state)
	require.Equal(t, retries, succeeded)
}

// The trigger that counts a batch's retries plans its statement for each
// update's rows: PL/pgSQL keeps one plan per connection, and a plan made
// for a first update of one row, used for an update of thousands (a
// webhook's deletion cancelling them), must not join the two transition
// tables row by row. auto_explain shows the trigger's plans to the test.
func TestBatchCountsPlanNoJoinOfTheTransitionTables(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newDLQFixture(t)
	batch := f.newBatch("running", 2001, true)
	f.retries(batch, 2001)

	cfg := f.pool.Config().ConnConfig.Copy()
	var plans []string
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		if strings.Contains(n.Message, "INSERT INTO batch_outcomes") {
			plans = append(plans, n.Message)
		}
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	defer conn.Close(ctx)
	for _, sql := range []string{`LOAD 'auto_explain'`, `SET auto_explain.log_min_duration = 0`,
		`SET auto_explain.log_nested_statements = on`, `SET client_min_messages = log`} {
		_, err := conn.Exec(ctx, sql)
		require.NoError(t, err, sql)
	}
	_, err = conn.Exec(ctx, `UPDATE deliveries SET status = 'succeeded', completed_at = now()
WHERE id = (SELECT id FROM deliveries WHERE batch_operation_id = $1 LIMIT 1)`, batch)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `UPDATE deliveries SET status = 'cancelled', completed_at = now()
WHERE batch_operation_id = $1 AND status = 'pending'`, batch)
	require.NoError(t, err)

	require.Len(t, plans, 2, "the trigger's statement, once per update")
	for _, plan := range plans {
		require.NotContains(t, plan, "Nested Loop", plan)
		require.Contains(t, plan, "SetOp", plan)
	}
	require.Equal(t, [2]int{1, 2000}, f.counts(batch))
}
