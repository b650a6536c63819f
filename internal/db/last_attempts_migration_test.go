package db_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/db"
)

// A database with attempts migrates with each webhook's last attempt,
// wherever in the attempt log's days it is, and without the index that
// found it; migrating back gives the index again.
func TestLastAttemptsMigrationFindsEachWebhooksLastAttempt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, exec := atVersion(t, 17)
	exec(`SELECT ensure_attempt_partitions(2)`)
	exec(`INSERT INTO tenants (id, name, rate_limit_rpm, rate_limit_burst, publish_rps, publish_burst)
		SELECT uuidv7(), 'tenant ' || n, 1, 1, 1, 1 FROM generate_series(1, 2) n`)
	// Three webhooks a tenant; the third of each never attempted.
	exec(`INSERT INTO webhooks (id, tenant_id, url, events, secret, retry_config, circuit_breaker_config, rate_limit)
		SELECT uuidv7(), t.id, 'http://example.com/' || n, '{*}', 's', '{}', '{}', '{}'
		FROM tenants t, generate_series(1, 3) n`)
	// Each attempted webhook: attempts of deliveries created today, and one
	// of a delivery created yesterday executed after all of them (a retry
	// lives in its delivery's day).
	exec(`INSERT INTO delivery_attempts (delivery_id, delivery_created_at, attempt_number, tenant_id, webhook_id,
			status_code, error, duration_ms, scheduled_at, executed_at)
		SELECT gen_random_uuid(), now() - interval '1 minute', 1, w.tenant_id, w.id, 200, NULL, 5, now(),
			now() - n * interval '1 second'
		FROM webhooks w, generate_series(1, 5) n WHERE w.url NOT LIKE '%/3'`)
	exec(`INSERT INTO delivery_attempts (delivery_id, delivery_created_at, attempt_number, tenant_id, webhook_id,
			status_code, error, duration_ms, scheduled_at, executed_at)
		SELECT gen_random_uuid(), now() - interval '1 day', 4, w.tenant_id, w.id, 502, 'HTTP 502 from ' || w.url, 5, now(), now()
		FROM webhooks w WHERE w.url NOT LIKE '%/3'`)

	v, err := db.Migrate(ctx, pool)
	require.NoError(t, err)
	require.GreaterOrEqual(t, v, uint(18))

	rows, err := pool.Query(ctx, `SELECT w.url, l.status_code, l.error, l.tenant_id = w.tenant_id, l.executed_at
		FROM webhooks w LEFT JOIN webhook_last_attempts l ON l.webhook_id = w.id ORDER BY w.tenant_id, w.url`)
	require.NoError(t, err)
	var got []string
	for rows.Next() {
		var url string
		var code *int
		var msg *string
		var sameTenant *bool
		var at *time.Time
		require.NoError(t, rows.Scan(&url, &code, &msg, &sameTenant, &at))
		if code == nil {
			got = append(got, url+": none")
			continue
		}
		require.True(t, *sameTenant)
		require.WithinDuration(t, time.Now(), *at, time.Minute)
		got = append(got, url+": "+*msg)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{
		"http://example.com/1: HTTP 502 from http://example.com/1", "http://example.com/2: HTTP 502 from http://example.com/2",
		"http://example.com/3: none",
		"http://example.com/1: HTTP 502 from http://example.com/1", "http://example.com/2: HTTP 502 from http://example.com/2",
		"http://example.com/3: none",
	}, got)

	var index *string
	require.NoError(t, pool.QueryRow(ctx, `SELECT to_regclass('delivery_attempts_webhook_idx')::text`).Scan(&index))
	require.Nil(t, index, "the index that found the last attempts is gone")
	require.NoError(t, db.MigrateTo(ctx, pool, 17))
	require.NoError(t, pool.QueryRow(ctx, `SELECT to_regclass('delivery_attempts_webhook_idx')::text`).Scan(&index))
	require.NotNil(t, index, "and back after migrating down")
}
