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
	_, err = pool.Exec(ctx, `SELECT ensure_attempt_partitions(1);
INSERT INTO tenants (id, name, rate_limit_rpm, rate_limit_burst, publish_rps, publish_burst)
    VALUES ('01a21c5a-0000-7000-8000-000000000001', 't', 1, 1, 1, 1);
INSERT INTO webhooks (id, tenant_id, url, events, secret, retry_config, circuit_breaker_config, rate_limit)
    VALUES ('01a21c5a-0000-7000-8000-000000000002', '01a21c5a-0000-7000-8000-000000000001', 'http://example.com/',
        '{*}', 's', '{}', '{}', '{}');
INSERT INTO events (id, tenant_id, event_type, idempotency_key, request_hash, priority, data)
    VALUES ('01a21c5a-0000-7000-8000-000000000003', '01a21c5a-0000-7000-8000-000000000001', 'a.b', 'k', '\x00', 'normal', '{}')`)
	require.NoError(t, err)

	deliver := func(marked bool, status string) {
		t.Helper()
		b := &pgx.Batch{}
		if marked {
			history.MarkTallied(b)
		}
		b.Queue(`WITH d AS (
    INSERT INTO deliveries (id, tenant_id, event_id, webhook_id, priority)
    VALUES (uuidv7(), '01a21c5a-0000-7000-8000-000000000001', '01a21c5a-0000-7000-8000-000000000003',
        '01a21c5a-0000-7000-8000-000000000002', 'normal')
    RETURNING id, created_at)
INSERT INTO delivery_attempts (delivery_id, delivery_created_at, attempt_number, tenant_id, webhook_id, status_code,
    duration_ms, scheduled_at, executed_at)
SELECT id, created_at, 1, '01a21c5a-0000-7000-8000-000000000001', '01a21c5a-0000-7000-8000-000000000002', 500, 5,
    now(), now() FROM d`)
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
