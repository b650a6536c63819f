package db_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/db"
	"github.com/hookline/hookline/internal/db/dbtest"
	"github.com/hookline/hookline/internal/history"
)

// A database with deliveries migrates with an index of each webhook's
// unfinished deliveries, old ones included, from which the lists of
// pending and retrying deliveries read; migrating back removes it and
// the floors.
func TestUnfinishedMigrationIndexesEveryUnfinishedDelivery(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, exec := atVersion(t, 18)
	tenant, one, two := uuid.New(), uuid.New(), uuid.New()
	exec(`INSERT INTO tenants (id, name, rate_limit_rpm, rate_limit_burst, publish_rps, publish_burst) VALUES ($1, 't', 1, 1, 1, 1)`, tenant)
	exec(`INSERT INTO webhooks (id, tenant_id, url, events, secret, retry_config, circuit_breaker_config, rate_limit)
		SELECT id, $1, 'http://example.com/', '{*}', 's', '{}', '{}', '{}' FROM unnest($2::uuid[]) id`, tenant, []uuid.UUID{one, two})
	// Each delivery of its own event, created n hours ago: the first
	// webhook's two oldest pending, its third retrying, the rest finished.
	exec(`WITH d AS (
    SELECT uuidv7_floor(now() - n * interval '1 hour') AS id, w, n FROM generate_series(1, 120) n, unnest($2::uuid[]) w
), e AS (
    INSERT INTO events (id, tenant_id, event_type, idempotency_key, request_hash, priority, data)
    SELECT d.id, $1, 'a', d.id::text || d.w::text, '\x00', 'normal', '{}' FROM d WHERE d.w = $3
)
INSERT INTO deliveries (id, tenant_id, event_id, webhook_id, priority, status, completed_at)
SELECT CASE WHEN d.w = $3 THEN d.id ELSE uuidv7() END, $1, d.id, d.w, 'normal',
    CASE WHEN d.w <> $3 THEN 'succeeded' WHEN d.n > 118 THEN 'pending' WHEN d.n = 118 THEN 'retrying' ELSE 'exhausted' END,
    CASE WHEN d.w <> $3 OR d.n < 118 THEN now() END
FROM d`, tenant, []uuid.UUID{one, two}, one)

	v, err := db.Migrate(ctx, pool)
	require.NoError(t, err)
	require.GreaterOrEqual(t, v, uint(19))
	var valid bool
	require.NoError(t, pool.QueryRow(ctx, `SELECT indisvalid FROM pg_index WHERE indexrelid = 'deliveries_unfinished_idx'::regclass`).Scan(&valid))
	require.True(t, valid)

	r := history.NewReader(pool)
	list := func(hook uuid.UUID, status string) []string {
		t.Helper()
		page, err := r.List(ctx, tenant, hook, history.ListFilter{Status: &status, Limit: 50})
		require.NoError(t, err)
		out := []string{}
		for _, d := range page {
			out = append(out, string(d.Status))
		}
		return out
	}
	require.Equal(t, []string{"pending", "pending"}, list(one, "pending"))
	require.Equal(t, []string{"retrying"}, list(one, "retrying"))
	require.Empty(t, list(two, "pending"))

	require.NoError(t, db.MigrateTo(ctx, pool, 18))
	var index, floors *string
	require.NoError(t, pool.QueryRow(ctx, `SELECT to_regclass('deliveries_unfinished_idx')::text, to_regclass('webhook_unfinished_floors')::text`).
		Scan(&index, &floors))
	require.Nil(t, index)
	require.Nil(t, floors)
}

// atVersion is a new database migrated to version v, and a statement
// runner that fails the test on an error.
func atVersion(t *testing.T, v uint) (*pgxpool.Pool, func(sql string, args ...any)) {
	t.Helper()
	ctx := context.Background()
	pool, err := db.Open(ctx, dbtest.NewURL(t, false), 2)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	require.NoError(t, db.MigrateTo(ctx, pool, v))
	return pool, func(sql string, args ...any) {
		t.Helper()
		_, err := pool.Exec(ctx, sql, args...)
		require.NoError(t, err)
	}
}

// tenantWithWebhook stores a tenant and one webhook of it, subscribed to
// every event type, through exec (atVersion's), and returns their ids.
func tenantWithWebhook(exec func(sql string, args ...any)) (tenant, hook uuid.UUID) {
	tenant, hook = uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
	exec(`INSERT INTO tenants (id, name, rate_limit_rpm, rate_limit_burst, publish_rps, publish_burst) VALUES ($1, 't', 1, 1, 1, 1)`, tenant)
	exec(`INSERT INTO webhooks (id, tenant_id, url, events, secret, retry_config, circuit_breaker_config, rate_limit)
		VALUES ($2, $1, 'http://example.com/', '{*}', 's', '{}', '{}', '{}')`, tenant, hook)
	return tenant, hook
}
