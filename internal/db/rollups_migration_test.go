package db_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/db"
	"github.com/hookline/hookline/internal/db/dbtest"
)

// A database with history written before the rollups existed migrates
// with it: the rollups the migration builds are what the history counts,
// and the triggers keep them from then on.
func TestRollupsMigrationCountsTheExistingHistory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := dbtest.NewURL(t, false)
	pool, err := db.Open(ctx, url, 2)
	require.NoError(t, err)
	defer pool.Close()
	require.NoError(t, db.MigrateTo(ctx, pool, 11))
	exec := func(sql string, args ...any) {
		t.Helper()
		_, err := pool.Exec(ctx, sql, args...)
		require.NoError(t, err)
	}
	exec(`SELECT ensure_attempt_partitions(2)`)
	exec(`INSERT INTO tenants (id, name, rate_limit_rpm, rate_limit_burst, publish_rps, publish_burst)
		SELECT uuidv7(), 'tenant ' || n, 1, 1, 1, 1 FROM generate_series(1, 3) n`)
	exec(`INSERT INTO webhooks (id, tenant_id, url, events, secret, retry_config, circuit_breaker_config, rate_limit)
		SELECT uuidv7(), t.id, 'http://example.com/' || n, '{*}', 's', '{}', '{}', '{}'
		FROM tenants t, generate_series(1, 2) n`)
	// 600 events over the last two hours, one delivery each to every
	// webhook of the tenant, in every state, with one to three attempts.
	exec(`INSERT INTO events (id, tenant_id, event_type, idempotency_key, request_hash, priority, data, created_at)
		SELECT uuidv7(), t.id, (ARRAY['a.b', 'c.d', 'e.f'])[1 + n % 3], 'k' || n, '\x00', 'normal', '{}',
			now() - (n * 12) * interval '1 second'
		FROM tenants t, generate_series(1, 200) n`)
	exec(`INSERT INTO deliveries (id, tenant_id, event_id, webhook_id, priority, status, attempt_count, postponed_count,
			failure_category, created_at, completed_at)
		SELECT uuidv7(), e.tenant_id, e.id, w.id, 'normal',
			(ARRAY['pending', 'retrying', 'succeeded', 'succeeded', 'exhausted', 'cancelled'])[1 + (row_number() OVER ()) % 6],
			1 + (row_number() OVER ()) % 3, (row_number() OVER ()) % 2,
			(ARRAY['timeout', NULL, 'server_error'])[1 + (row_number() OVER ()) % 3], e.created_at, e.created_at
		FROM events e JOIN webhooks w ON w.tenant_id = e.tenant_id`)
	exec(`INSERT INTO deliveries (id, tenant_id, event_id, webhook_id, priority, status, retry_of, created_at)
		SELECT uuidv7(), tenant_id, event_id, webhook_id, 'normal', 'succeeded', id, now()
		FROM deliveries WHERE status = 'exhausted' AND attempt_count = 2`)
	exec(`INSERT INTO delivery_attempts (delivery_id, delivery_created_at, attempt_number, tenant_id, webhook_id,
			status_code, failure_category, duration_ms, scheduled_at, executed_at)
		SELECT d.id, d.created_at, n, d.tenant_id, d.webhook_id, CASE WHEN n = 1 THEN 500 ELSE 200 END,
			CASE WHEN n = 1 THEN 'server_error' END, 5 + n * 40, d.created_at, d.created_at + n * interval '1 second'
		FROM deliveries d, generate_series(1, 3) n WHERE n <= d.attempt_count`)

	v, err := db.Migrate(ctx, pool)
	require.NoError(t, err)
	require.GreaterOrEqual(t, v, uint(12))

	same := func(what, rollup, direct string) {
		t.Helper()
		var a, b []int64
		require.NoError(t, pool.QueryRow(ctx, `SELECT array_agg(n ORDER BY k) FROM (`+rollup+`) x (k, n)`).Scan(&a))
		require.NoError(t, pool.QueryRow(ctx, `SELECT array_agg(n ORDER BY k) FROM (`+direct+`) x (k, n)`).Scan(&b))
		require.NotEmpty(t, b, what)
		require.Equal(t, b, a, what)
	}
	for _, scope := range []string{"tenant_id", "webhook_id"} {
		same("deliveries by state per "+scope,
			`SELECT scope_id::text || st, sum(n) FROM delivery_rollups r, LATERAL (VALUES ('c', r.created), ('r', r.retrying),
				('s', r.succeeded), ('x', r.exhausted), ('z', r.cancelled), ('p', r.postponed)) v (st, n)
				WHERE NOT hourly AND scope_id IN (SELECT `+scope+` FROM deliveries) GROUP BY scope_id, st`,
			`SELECT `+scope+`::text || st, n FROM (SELECT `+scope+`, count(*) c, count(*) FILTER (WHERE status = 'retrying') r,
				count(*) FILTER (WHERE status = 'succeeded') s, count(*) FILTER (WHERE status = 'exhausted') x,
				count(*) FILTER (WHERE status = 'cancelled') z, sum(postponed_count) p FROM deliveries GROUP BY 1) d,
				LATERAL (VALUES ('c', c), ('r', r), ('s', s), ('x', x), ('z', z), ('p', p)) v (st, n)`)
		same("attempts per "+scope,
			`SELECT scope_id::text, sum(attempts) * 1000 + sum(successes) FROM attempt_rollups
				WHERE NOT hourly AND scope_id IN (SELECT `+scope+` FROM deliveries) GROUP BY 1`,
			`SELECT `+scope+`::text, count(*) * 1000 + count(*) FILTER (WHERE status_code = 200) FROM delivery_attempts GROUP BY 1`)
	}
	same("everyone's attempts",
		`SELECT 'all', sum(attempts) FROM attempt_rollups WHERE NOT hourly AND scope_id = '00000000-0000-0000-0000-000000000000'`,
		`SELECT 'all', count(*) FROM delivery_attempts`)
	same("the DLQ per tenant",
		`SELECT tenant_id::text, sum(exhausted) * 1000 + sum(exhausted - retried) FROM dead_letter_rollups WHERE at = '-infinity' GROUP BY 1`,
		`SELECT d.tenant_id::text, count(*) * 1000 + count(*) FILTER (WHERE NOT EXISTS (SELECT 1 FROM deliveries r WHERE r.retry_of = d.id))
			FROM deliveries d WHERE status = 'exhausted' GROUP BY 1`)

	same("hourly attempt rows add up to their minutes",
		`SELECT scope_id::text, sum(attempts) * 1000 + sum(successes) FROM attempt_rollups WHERE hourly GROUP BY 1`,
		`SELECT scope_id::text, sum(attempts) * 1000 + sum(successes) FROM attempt_rollups WHERE NOT hourly GROUP BY 1`)
	same("hourly delivery rows add up to their minutes",
		`SELECT scope_id::text || at::text, sum(created + succeeded + postponed) FROM delivery_rollups WHERE hourly GROUP BY 1`,
		`SELECT scope_id::text || date_trunc('hour', at)::text, sum(created + succeeded + postponed) FROM delivery_rollups
			WHERE NOT hourly GROUP BY 1`)

	same("the DLQ's hours add up to its days",
		`SELECT tenant_id::text || date_trunc('day', at, 'UTC')::text, sum(exhausted) * 1000 + sum(retried) FROM dead_letter_rollups WHERE hourly GROUP BY 1`,
		`SELECT tenant_id::text || at::text, sum(exhausted) * 1000 + sum(retried) FROM dead_letter_rollups
			WHERE NOT hourly AND at > '-infinity' GROUP BY 1`)
	same("the DLQ's days add up to its all-time rows",
		`SELECT tenant_id::text || webhook_id::text || event_type || failure_category, sum(exhausted) * 1000 + sum(retried)
			FROM dead_letter_rollups WHERE NOT hourly AND at > '-infinity' GROUP BY 1`,
		`SELECT tenant_id::text || webhook_id::text || event_type || failure_category, sum(exhausted) * 1000 + sum(retried)
			FROM dead_letter_rollups WHERE at = '-infinity' GROUP BY 1`)

	// From now on the triggers keep them.
	exec(`UPDATE deliveries SET status = 'succeeded', completed_at = now() WHERE status = 'pending'`)
	same("deliveries after the upgrade",
		`SELECT 'succeeded', sum(succeeded) FROM delivery_rollups WHERE NOT hourly AND scope_id = '00000000-0000-0000-0000-000000000000'`,
		`SELECT 'succeeded', count(*) FROM deliveries WHERE status = 'succeeded'`)
	var withLatency int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM attempt_rollups WHERE latency ? latency_bucket(45)::text AND at > $1`,
		time.Now().Add(-3*time.Hour)).Scan(&withLatency))
	require.Positive(t, withLatency, "45 ms attempts counted in their latency bucket")
}
