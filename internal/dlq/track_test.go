package dlq

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/db/dbtest"
)

// A cancelled batch's retries enqueued before the cancel are counted as
// they end, and once every one of them is, the batch is counted no more:
// its deliveries are not read again every second for the rest of the day.
func TestCancelledBatchIsTrackedUntilItsRetriesEnd(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newDLQFixture(t)
	var batch uuid.UUID
	require.NoError(t, f.pool.QueryRow(ctx, `INSERT INTO batch_operations
    (id, tenant_id, filter, requests_per_second, priority, state, processed, finished_at)
VALUES (uuidv7(), $1, '{}', 10, 'normal', 'cancelled', 3, now() - interval '1 minute') RETURNING id`, f.seed.Tenant).Scan(&batch))
	// retry stores a retry the batch made of a new exhausted delivery.
	retry := func(status string) uuid.UUID {
		t.Helper()
		var id uuid.UUID
		require.NoError(t, f.pool.QueryRow(ctx, `INSERT INTO deliveries
    (id, tenant_id, event_id, webhook_id, priority, status, batch_operation_id, retry_of, completed_at)
VALUES (uuidv7(), $1, $2, $3, 'normal', $4, $5, $6, CASE WHEN $4 <> 'pending' THEN now() END) RETURNING id`,
			f.seed.Tenant, f.seed.Event, f.seed.Webhooks[0], status, batch, f.exhausted(time.Hour)).Scan(&id))
		return id
	}
	retry("succeeded")
	retry("succeeded")
	pending := retry("pending")
	counts := func() [2]int {
		t.Helper()
		var c [2]int
		require.NoError(t, f.pool.QueryRow(ctx, `SELECT succeeded, failed FROM batch_operations WHERE id = $1`, batch).Scan(&c[0], &c[1]))
		return c
	}
	r := NewRunner(f.pool, &taskRecorder{}, slog.New(slog.DiscardHandler), 1, 30*time.Second)
	require.NoError(t, r.TrackOutcomes(ctx))
	require.Equal(t, [2]int{2, 0}, counts())

	f.exec(`UPDATE deliveries SET status = 'exhausted', completed_at = now() WHERE id = $1`, pending)
	require.NoError(t, r.TrackOutcomes(ctx))
	require.Equal(t, [2]int{2, 1}, counts(), "the last retry counted")

	// Every retry has its outcome: a delivery of the batch's that appears
	// now is not counted.
	retry("succeeded")
	require.NoError(t, r.TrackOutcomes(ctx))
	require.Equal(t, [2]int{2, 1}, counts(), "the batch is tracked no more")
	var state string
	require.NoError(t, f.pool.QueryRow(ctx, `SELECT state FROM batch_operations WHERE id = $1`, batch).Scan(&state))
	require.Equal(t, "cancelled", state)
}

// The tracking of outcomes (every second) finds the open batches through
// their indexes: beside 5,000 finished batches and 500 cancelled ones
// whose retries all ended, it reads a few pages, and still counts the
// running batch's outcomes.
func TestTrackingReadsOnlyOpenBatches(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newDLQFixture(t)
	f.exec(`INSERT INTO batch_operations
    (id, tenant_id, filter, requests_per_second, priority, state, processed, succeeded, finished_at)
SELECT uuidv7(), $1, '{"event_types": ["order.created"]}', 100, 'normal',
    CASE WHEN g % 10 = 0 THEN 'cancelled' ELSE 'completed' END, 100, 100, now() - g * interval '1 second'
FROM generate_series(1, 5500) g`, f.seed.Tenant)
	var running uuid.UUID
	require.NoError(t, f.pool.QueryRow(ctx, `INSERT INTO batch_operations
    (id, tenant_id, filter, requests_per_second, priority, state, processed, started_at)
VALUES (uuidv7(), $1, '{}', 10, 'normal', 'running', 1, now()) RETURNING id`, f.seed.Tenant).Scan(&running))
	f.exec(`INSERT INTO deliveries (id, tenant_id, event_id, webhook_id, priority, status, batch_operation_id, retry_of, completed_at)
VALUES (uuidv7(), $1, $2, $3, 'normal', 'succeeded', $4, $5, now())`,
		f.seed.Tenant, f.seed.Event, f.seed.Webhooks[0], running, f.exhausted(time.Hour))
	f.exec(`ANALYZE batch_operations`)

	pages := dbtest.PagesRead(t, f.pool, trackSQL)
	t.Logf("pages read: %d", pages)
	require.Less(t, pages, 30)
	var succeeded int
	require.NoError(t, f.pool.QueryRow(ctx, `SELECT succeeded FROM batch_operations WHERE id = $1`, running).Scan(&succeeded))
	require.Equal(t, 1, succeeded, "the running batch counted")
}
