package db_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/db/dbtest"
)

// The rollup triggers of deliveries count what each statement changed,
// whatever its size and whatever statements the connection ran before
// (PL/pgSQL keeps a trigger's plans for the connection): after one-row
// updates, statements of 5,000 rows that move states, postponements and
// the DLQ's keys, one that changes nothing counted, and statements of
// hundreds of retries, first and second, leave rollups equal to the rows
// counted afresh.
func TestRollupTriggersCountStatementsOfAnySize(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, conn, exec := oneConnection(t, 1)
	exec(`INSERT INTO deliveries (id, tenant_id, event_id, webhook_id, priority)
SELECT uuidv7(), $1, $2, $3, 'normal' FROM generate_series(1, 5000)`, s.Tenant, s.Event, s.Webhooks[0])
	var small []string
	require.NoError(t, conn.QueryRow(ctx, `SELECT array_agg(id::text) FROM (SELECT id FROM deliveries ORDER BY id LIMIT 8) d`).Scan(&small))
	for i, id := range small {
		switch i % 3 {
		case 0:
			exec(`UPDATE deliveries SET status = 'retrying' WHERE id = $1`, id)
		case 1:
			exec(`UPDATE deliveries SET postponed_count = postponed_count + 1 WHERE id = $1`, id)
		default:
			exec(`UPDATE deliveries SET enqueued_at = now() WHERE id = $1`, id)
		}
	}
	exec(`UPDATE deliveries SET postponed_count = postponed_count + 2`)
	exec(`UPDATE deliveries d SET
    status = (ARRAY['succeeded', 'exhausted', 'cancelled', 'retrying', 'pending'])[1 + x.n % 5],
    completed_at = CASE WHEN x.n % 5 < 3 THEN now() - interval '3 hours' END,
    failure_category = CASE WHEN x.n % 5 = 1 THEN 'http_5xx' END
FROM (SELECT id, row_number() OVER (ORDER BY id) AS n FROM deliveries) x
WHERE x.id = d.id AND d.status IN ('pending', 'retrying')`)
	// Half the DLQ moves to another hour and category, and nothing counted
	// changes for every row.
	exec(`UPDATE deliveries SET completed_at = now(), failure_category = 'timeout'
WHERE status = 'exhausted' AND right(id::text, 1) < '8'`)
	exec(`UPDATE deliveries SET updated_at = now(), enqueued_at = NULL`)
	// Retries of most of the DLQ in one statement, delivered, then second
	// retries of some of them, which are not retried for the first time.
	retry := func(below string) {
		t.Helper()
		exec(`INSERT INTO deliveries (id, tenant_id, event_id, webhook_id, priority, retry_of)
SELECT uuidv7(), tenant_id, event_id, webhook_id, 'low', id FROM deliveries
WHERE status = 'exhausted' AND right(id::text, 1) < $1`, below)
	}
	retry("c")
	exec(`UPDATE deliveries SET status = 'succeeded', completed_at = now() WHERE retry_of IS NOT NULL`)
	retry("4")

	var stored, counted string
	require.NoError(t, conn.QueryRow(ctx, `SELECT
    (SELECT concat_ws(' ', sum(created), sum(retrying), sum(succeeded), sum(exhausted), sum(cancelled), sum(postponed))
     FROM delivery_rollups WHERE scope_id = $1 AND NOT hourly),
    (SELECT concat_ws(' ', count(*), count(*) FILTER (WHERE status = 'retrying'), count(*) FILTER (WHERE status = 'succeeded'),
         count(*) FILTER (WHERE status = 'exhausted'), count(*) FILTER (WHERE status = 'cancelled'), sum(postponed_count))
     FROM deliveries WHERE webhook_id = $1)`, s.Webhooks[0]).Scan(&stored, &counted))
	require.Equal(t, counted, stored, "delivery rollups: created, retrying, succeeded, exhausted, cancelled, postponed")

	require.NoError(t, conn.QueryRow(ctx, `SELECT
    (SELECT string_agg(concat_ws(' ', at, failure_category, exhausted, retried), ', ' ORDER BY at, failure_category)
     FROM dead_letter_rollups WHERE tenant_id = $1 AND hourly AND exhausted <> 0),
    (SELECT string_agg(concat_ws(' ', at, failure_category, n, retried), ', ' ORDER BY at, failure_category) FROM (
         SELECT date_trunc('hour', completed_at, 'UTC') AS at, coalesce(failure_category, 'unknown') AS failure_category,
             count(*) AS n, count(*) FILTER (WHERE EXISTS (SELECT 1 FROM deliveries r WHERE r.retry_of = d.id)) AS retried
         FROM deliveries d WHERE tenant_id = $1 AND status = 'exhausted' GROUP BY 1, 2) d)`, s.Tenant).Scan(&stored, &counted))
	require.Equal(t, counted, stored, "DLQ rollups by hour and category: exhausted, retried")
	require.Contains(t, stored, "timeout")
	require.Contains(t, stored, "http_5xx")
}

// The attempt rollups' trigger counts what each statement inserted,
// whatever its size and whatever statements the connection ran before:
// after one-row inserts, one of 3,000 attempts over two webhooks and 48
// minutes (in each minute only successes or only failures of one
// category, in each hour all four), with latencies of every bucket,
// leaves rollups equal to the attempts counted afresh:
// totals, successes and the last success, errors by category, latencies by
// bucket, by minute and by hour.
func TestAttemptRollupTriggerCountsStatementsOfAnySize(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, conn, exec := oneConnection(t, 2)
	exec(`INSERT INTO deliveries (id, tenant_id, event_id, webhook_id, priority, created_at)
SELECT uuidv7(), $1, $2, w, 'normal', now() - interval '1 hour' FROM unnest($3::uuid[]) w, generate_series(1, 1500)`,
		s.Tenant, s.Event, s.Webhooks)
	const attempt = `INSERT INTO delivery_attempts (delivery_id, delivery_created_at, attempt_number, tenant_id, webhook_id,
    status_code, failure_category, duration_ms, scheduled_at, executed_at)
SELECT id, created_at, $1, tenant_id, webhook_id,
    CASE WHEN n % 4 = 0 THEN 200 WHEN n % 4 = 1 THEN 503 END,
    (ARRAY[NULL, 'http_5xx', 'timeout', 'connection'])[1 + n % 4],
    (n * 37) % 40000, now() - (n % 48) * interval '1 minute', now() - (n % 48) * interval '1 minute'
FROM (SELECT d.*, row_number() OVER (ORDER BY id) AS n FROM deliveries d) d
WHERE n <= $2`
	for i := range 5 {
		exec(attempt, 10+i, 1)
	}
	exec(attempt, 1, 3000)

	const stored = `SELECT scope_id, hourly, at, 'total', sum(attempts)::text || ' ' || sum(successes) || ' ' || coalesce(max(last_success_at)::text, '')
FROM attempt_rollups GROUP BY 1, 2, 3
UNION ALL
SELECT scope_id, hourly, at, 'error ' || e.key, sum(e.value::int)::text FROM attempt_rollups, jsonb_each_text(errors) e GROUP BY 1, 2, 3, 4
UNION ALL
SELECT scope_id, hourly, at, 'latency ' || l.key, sum(l.value::int)::text FROM attempt_rollups, jsonb_each_text(latency) l GROUP BY 1, 2, 3, 4`
	const counted = `WITH a AS (
    SELECT s.scope_id, g.hourly, g.at, x.* FROM delivery_attempts x
    CROSS JOIN LATERAL (VALUES (x.webhook_id), (x.tenant_id), ('00000000-0000-0000-0000-000000000000'::uuid)) AS s (scope_id)
    CROSS JOIN LATERAL (VALUES (false, date_trunc('minute', x.executed_at)), (true, date_trunc('hour', x.executed_at, 'UTC')))
        AS g (hourly, at)
)
SELECT scope_id, hourly, at, 'total', count(*)::text || ' ' || count(*) FILTER (WHERE status_code BETWEEN 200 AND 299) || ' '
    || coalesce((max(executed_at) FILTER (WHERE status_code BETWEEN 200 AND 299))::text, '')
FROM a GROUP BY 1, 2, 3
UNION ALL
SELECT scope_id, hourly, at, 'error ' || failure_category, count(*)::text FROM a WHERE failure_category IS NOT NULL GROUP BY 1, 2, 3, 4
UNION ALL
SELECT scope_id, hourly, at, 'latency ' || latency_bucket(duration_ms), count(*)::text FROM a GROUP BY 1, 2, 3, 4`
	var missing, extra, rows int
	require.NoError(t, conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM ((`+counted+`) EXCEPT (`+stored+`)) x),
    (SELECT count(*) FROM ((`+stored+`) EXCEPT (`+counted+`)) x), (SELECT count(*) FROM (`+counted+`) x)`).Scan(&missing, &extra, &rows))
	require.Zero(t, missing, "counted but not in the rollups")
	require.Zero(t, extra, "in the rollups but not counted")
	require.Greater(t, rows, 1000, "keys of every kind")
}

// oneConnection returns a database seeded with a tenant, webhooks of it
// and an event, one connection to it held until the test ends (the
// triggers' plans are kept per connection), and exec, which runs a
// statement on that connection and fails the test on error.
func oneConnection(t *testing.T, webhooks int) (dbtest.Seeded, *pgxpool.Conn, func(sql string, args ...any)) {
	t.Helper()
	ctx := context.Background()
	pool := dbtest.New(t)
	s := dbtest.Seed(t, pool, webhooks)
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	t.Cleanup(conn.Release)
	return s, conn, func(sql string, args ...any) {
		t.Helper()
		_, err := conn.Exec(ctx, sql, args...)
		require.NoError(t, err)
	}
}
