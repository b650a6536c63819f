package db_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/db"
)

// A database with deliveries from before they were partitioned migrates
// with them: each stays where its id finds it (one whose id is no UUIDv7
// in the default partition), the table's triggers fire once for each, the
// weeks ahead are made, and migrating back gives one table with every
// delivery again.
func TestDeliveriesByWeekMigrationKeepsEveryDelivery(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, exec := atVersion(t, 31)
	tenant, hook := tenantWithWebhook(exec)
	exec(`INSERT INTO events (id, tenant_id, event_type, idempotency_key, request_hash, priority, data)
		SELECT uuidv7(), $1, 'a.b', 'k' || n, '\x00', 'normal', '{}' FROM generate_series(1, 30) n`, tenant)
	exec(`INSERT INTO deliveries (id, tenant_id, event_id, webhook_id, priority)
		SELECT uuidv7(), tenant_id, id, $1, 'normal' FROM events`, hook)
	exec(`INSERT INTO deliveries (id, tenant_id, event_id, webhook_id, priority)
		SELECT 'ffffffff-0000-4000-8000-000000000000', tenant_id, id, $1, 'normal' FROM events LIMIT 1`, hook)
	count := func(sql string, args ...any) int {
		t.Helper()
		var n int
		require.NoError(t, pool.QueryRow(ctx, sql, args...).Scan(&n))
		return n
	}
	ids := func() []string {
		t.Helper()
		rows, err := pool.Query(ctx, `SELECT id::text FROM deliveries ORDER BY id`)
		require.NoError(t, err)
		var out []string
		for rows.Next() {
			var id string
			require.NoError(t, rows.Scan(&id))
			out = append(out, id)
		}
		require.NoError(t, rows.Err())
		return out
	}
	before := ids()
	require.Len(t, before, 31)

	require.NoError(t, db.MigrateTo(ctx, pool, 32))
	require.NoError(t, db.EnsurePartitions(ctx, pool, 14))
	var kind string
	require.NoError(t, pool.QueryRow(ctx, `SELECT relkind::text FROM pg_class WHERE oid = 'deliveries'::regclass`).Scan(&kind))
	require.Equal(t, "p", kind)
	require.Equal(t, before, ids(), "every delivery kept")
	require.Equal(t, 30, count(`SELECT count(*) FROM deliveries_before`))
	require.Equal(t, 1, count(`SELECT count(*) FROM deliveries_default WHERE id = 'ffffffff-0000-4000-8000-000000000000'`))
	require.GreaterOrEqual(t, count(`SELECT count(*) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = 'deliveries'::regclass AND c.relname ~ '^deliveries_[0-9]{8}$'`), 2, "the weeks ahead")
	require.Equal(t, 16, count(`SELECT count(*) FROM pg_index WHERE indrelid = 'deliveries_before'::regclass`),
		"the table's indexes serve the partition, none built twice")

	// A new delivery goes to the week ahead's partition once the week
	// comes; today's goes where its id falls. The triggers fire once:
	// an exhausted delivery counts once in the DLQ, and its deletion takes
	// it off once.
	dlq := func() int {
		return count(`SELECT coalesce(sum(exhausted), 0) FROM dead_letter_rollups WHERE tenant_id = $1 AND at = '-infinity'`, tenant)
	}
	exec(`UPDATE deliveries SET status = 'exhausted', attempt_count = 1, completed_at = now() WHERE id = $1`, before[0])
	require.Equal(t, 1, dlq())
	exec(`DELETE FROM deliveries WHERE id = $1`, before[0])
	require.Zero(t, dlq())
	exec(`INSERT INTO deliveries (id, tenant_id, event_id, webhook_id, priority)
		SELECT uuidv7_floor(now() + interval '8 days'), tenant_id, id, $1, 'normal' FROM events LIMIT 1`, hook)
	require.Equal(t, 1, count(`SELECT count(*) FROM deliveries d JOIN pg_class c ON c.oid = d.tableoid
		WHERE c.relname ~ '^deliveries_[0-9]{8}$'`), "a delivery of next week in its week")

	// Back: one table with every delivery, its triggers once.
	require.NoError(t, db.MigrateTo(ctx, pool, 31))
	require.NoError(t, pool.QueryRow(ctx, `SELECT relkind::text FROM pg_class WHERE oid = 'deliveries'::regclass`).Scan(&kind))
	require.Equal(t, "r", kind)
	require.Equal(t, 31, count(`SELECT count(*) FROM deliveries`))
	require.Equal(t, 1, count(`SELECT count(*) FROM deliveries WHERE id = 'ffffffff-0000-4000-8000-000000000000'`))
	exec(`UPDATE deliveries SET status = 'exhausted', attempt_count = 1, completed_at = now() WHERE id = $1`, before[1])
	require.Equal(t, 1, dlq())
	exec(`DELETE FROM deliveries WHERE id = $1`, before[1])
	require.Zero(t, dlq())
	require.Equal(t, 5, count(`SELECT count(*) FROM pg_trigger WHERE tgrelid = 'deliveries'::regclass AND NOT tgisinternal`))
}

// A week of deliveries is made when its table can be locked within a
// second: a statement under way on deliveries does not make the
// partitioner, and every delivery behind it, wait for it; the week is made
// at a later call.
func TestEnsurePartitionsLeavesALockedWeekForLater(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, exec := atVersion(t, 32)
	require.NoError(t, db.EnsurePartitions(ctx, pool, 14))
	var week string
	require.NoError(t, pool.QueryRow(ctx, `SELECT max(c.relname) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = 'deliveries'::regclass AND c.relname ~ '^deliveries_[0-9]{8}$'`).Scan(&week))
	exec(`DROP TABLE ` + week)

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `LOCK TABLE deliveries IN ACCESS SHARE MODE`)
	require.NoError(t, err)
	waiting, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	require.NoError(t, db.EnsurePartitions(waiting, pool, 14), "given up within a second, not waited for")
	exists := func() bool {
		var ok bool
		require.NoError(t, pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, week).Scan(&ok))
		return ok
	}
	require.False(t, exists(), "not made while deliveries is in use")
	require.NoError(t, tx.Rollback(ctx))
	require.NoError(t, db.EnsurePartitions(ctx, pool, 14))
	require.True(t, exists(), "made at the next call")
}
