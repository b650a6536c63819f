package db_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/db"
)

// A database with batches under way migrates with the counters of each
// batch whose counts can still change recounted from its retries, however
// the dlq's tracking last left its counts: the running batch, the
// cancelled one still counting. A finished batch gets none. From then on
// each retry adds to its batch's counters as it ends. Migrating back
// removes the counters and the trigger.
func TestBatchOutcomesMigrationRecountsTheOpenBatches(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, exec := atVersion(t, 28)
	tenant, hook := tenantWithWebhook(exec)
	batch := func(state string, succeeded int) uuid.UUID {
		t.Helper()
		id := uuid.New()
		exec(`INSERT INTO batch_operations (id, tenant_id, filter, requests_per_second, priority, state, processed, succeeded, finished_at)
VALUES ($1, $2, '{}', 10, 'normal', $3, 4, $4, CASE WHEN $3 <> 'running' THEN now() END)`, id, tenant, state, succeeded)
		// Four retries: two succeeded, one exhausted, one pending.
		exec(`INSERT INTO deliveries (id, tenant_id, event_id, webhook_id, priority, batch_operation_id, status, completed_at)
SELECT uuidv7(), $1, gen_random_uuid(), $2, 'normal', $3, s, CASE WHEN s <> 'pending' THEN now() END
FROM unnest(ARRAY['succeeded', 'succeeded', 'exhausted', 'pending']) s`, tenant, hook, id)
		return id
	}
	running := batch("running", 1)     // counted a second before two more ended
	cancelled := batch("cancelled", 0) // cancelled, retries under way
	completed := batch("completed", 3) // every retry ended, as the tracking left it
	exec(`UPDATE deliveries SET status = 'succeeded', completed_at = now() WHERE batch_operation_id = $1 AND status = 'pending'`, completed)
	counts := func(id uuid.UUID) [2]int {
		t.Helper()
		var c [2]int
		require.NoError(t, pool.QueryRow(ctx, `SELECT coalesce(sum(succeeded), 0), coalesce(sum(failed), 0)
FROM batch_outcomes WHERE batch_operation_id = $1`, id).Scan(&c[0], &c[1]))
		return c
	}

	_, err := db.Migrate(ctx, pool)
	require.NoError(t, err)
	require.Equal(t, [2]int{2, 1}, counts(running))
	require.Equal(t, [2]int{2, 1}, counts(cancelled))
	require.Equal(t, [2]int{0, 0}, counts(completed), "a finished batch is not recounted")

	exec(`UPDATE deliveries SET status = 'succeeded', completed_at = now() WHERE batch_operation_id = ANY ($1) AND status = 'pending'`,
		[]uuid.UUID{running, cancelled})
	require.Equal(t, [2]int{3, 1}, counts(running))
	require.Equal(t, [2]int{3, 1}, counts(cancelled))

	require.NoError(t, db.MigrateTo(ctx, pool, 28))
	var left int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_trigger WHERE tgname = 'deliveries_batch_outcomes'`).Scan(&left))
	require.Zero(t, left)
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_class WHERE relname = 'batch_outcomes'`).Scan(&left))
	require.Zero(t, left)
}
