package db_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/db"
	"github.com/hookline/hookline/internal/testwait"
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

// Migration 29 locks batch_operations and then deliveries, the order in
// which a batch's chunk takes them (its heartbeat, then its retries), so
// that a chunk under way when it starts finishes before it instead of
// deadlocking with it: the chunk holds the batch row and waits for
// deliveries, which the migration must not hold while it waits for the
// batch operations.
func TestBatchOutcomesMigrationWaitsForAChunkUnderWay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, exec := atVersion(t, 28)
	tenant, hook := tenantWithWebhook(exec)
	batch := uuid.New()
	exec(`INSERT INTO batch_operations (id, tenant_id, filter, requests_per_second, priority, state)
VALUES ($1, $2, '{}', 10, 'normal', 'running')`, batch, tenant)

	chunk, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer chunk.Rollback(ctx) //nolint:errcheck // no-op after commit
	_, err = chunk.Exec(ctx, `UPDATE batch_operations SET heartbeat_at = now() WHERE id = $1`, batch)
	require.NoError(t, err)

	migrated := make(chan error, 1)
	go func() {
		_, err := db.Migrate(ctx, pool)
		migrated <- err
	}()
	testwait.Eventually(t, 30*time.Second, func() bool {
		var waiting bool
		err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE NOT granted AND relation = 'batch_operations'::regclass)`).Scan(&waiting)
		return err == nil && waiting
	}, "the migration waits for the chunk's lock on batch_operations")

	_, err = chunk.Exec(ctx, `INSERT INTO deliveries (id, tenant_id, event_id, webhook_id, priority, batch_operation_id)
VALUES (uuidv7(), $1, gen_random_uuid(), $2, 'normal', $3)`, tenant, hook, batch)
	require.NoError(t, err, "the chunk's retries are written while the migration waits")
	require.NoError(t, chunk.Commit(ctx))
	require.NoError(t, <-migrated)
	var retries int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM deliveries WHERE batch_operation_id = $1`, batch).Scan(&retries))
	require.Equal(t, 1, retries)
}
