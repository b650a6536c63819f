package db_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/db"
	"github.com/hookline/hookline/internal/db/dbtest"
	"github.com/hookline/hookline/internal/history"
)

// From migration 14 a statement marked as tallied by its process
// (history.MarkTallied) is left out of the delivery and attempt rollups by
// the triggers, while an unmarked one is counted, and a delivery the
// marked statement exhausts still enters the DLQ's rollups. Migrated back
// to 13, the triggers count the marked statement too.
func TestTalliedStatementsAreLeftToTheirProcess(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := dbtest.NewURL(t, false)
	pool, err := db.Open(ctx, url, 2)
	require.NoError(t, err)
	defer pool.Close()
	_, err = db.Migrate(ctx, pool)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `SELECT ensure_attempt_partitions(1)`)
	require.NoError(t, err)
	seed := dbtest.Seed(t, pool, 1)

	deliver := func(marked bool, status string) {
		t.Helper()
		b := &pgx.Batch{}
		if marked {
			history.MarkTallied(b)
		}
		b.Queue(`WITH d AS (
    INSERT INTO deliveries (id, tenant_id, event_id, webhook_id, priority)
    VALUES (uuidv7(), $1, $2, $3, 'normal')
    RETURNING id, tenant_id, webhook_id, created_at)
INSERT INTO delivery_attempts (delivery_id, delivery_created_at, attempt_number, tenant_id, webhook_id, status_code,
    duration_ms, scheduled_at, executed_at)
SELECT id, created_at, 1, tenant_id, webhook_id, 500, 5, now(), now() FROM d`, seed.Tenant, seed.Event, seed.Webhooks[0])
		b.Queue(`UPDATE deliveries SET status = $1, attempt_count = 1, completed_at = now()
WHERE status = 'pending'`, status)
		require.NoError(t, pool.SendBatch(ctx, b).Close())
	}
	counts := func() [4]int {
		t.Helper()
		var c [4]int
		require.NoError(t, pool.QueryRow(ctx, `SELECT
    (SELECT coalesce(sum(created), 0) FROM delivery_rollups WHERE hourly),
    (SELECT coalesce(sum(retrying), 0) FROM delivery_rollups WHERE hourly),
    (SELECT coalesce(sum(attempts), 0) FROM attempt_rollups WHERE hourly),
    (SELECT coalesce(sum(exhausted), 0) FROM dead_letter_rollups WHERE at = '-infinity')`).Scan(&c[0], &c[1], &c[2], &c[3]))
		return c
	}
	deliver(false, "retrying")
	require.Equal(t, [4]int{3, 3, 3, 0}, counts(), "unmarked: created, retrying and attempted in three scopes")
	deliver(true, "retrying")
	require.Equal(t, [4]int{3, 3, 3, 0}, counts(), "marked: left to the process")
	deliver(true, "exhausted")
	require.Equal(t, [4]int{3, 3, 3, 1}, counts(), "marked, but the DLQ counts the exhausted delivery")

	require.NoError(t, db.MigrateTo(ctx, pool, 13))
	deliver(true, "retrying")
	require.Equal(t, [4]int{6, 6, 6, 1}, counts(), "before migration 14 the triggers count every statement")
	require.NoError(t, db.MigrateTo(ctx, pool, 14))
	deliver(true, "retrying")
	require.Equal(t, [4]int{6, 6, 6, 1}, counts())
}
