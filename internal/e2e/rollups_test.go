package e2e

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/history"
	"github.com/hookline/hookline/internal/testwait"
)

// The rollups of what the api's publishes and the worker's attempts wrote
// are tallied in those processes and flushed once a second, with the
// rollup triggers off for those statements: once flushed, they must equal
// the rollups counted afresh from the rows, scope by scope and period by
// period, neither missing a delivery or attempt nor counting one twice
// (by the tally and by a trigger); and each webhook's last attempt kept
// with them must be the last in the attempt log.
func TestRollupsOfTheTalliedWritesEqualTheirRows(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	var mu sync.Mutex
	seen := map[string]bool{}
	rc := newReceiver(t, func(_ int, w http.ResponseWriter, r *http.Request) {
		switch r.Header.Get("X-Webhook-Event") {
		case "order.gone":
			w.WriteHeader(http.StatusGone)
		case "order.flaky":
			mu.Lock()
			first := !seen[r.Header.Get("Webhook-Id")]
			seen[r.Header.Get("Webhook-Id")] = true
			mu.Unlock()
			if first {
				w.WriteHeader(http.StatusServiceUnavailable)
			}
		}
	})
	retry := map[string]any{"retry_config": map[string]any{"max_attempts": 3, "base_delay_ms": 100, "max_delay_ms": 200},
		"circuit_breaker_config": map[string]any{"enabled": false}}
	s.webhook(rc.URL, retry)
	s.webhook(rc.URL, retry)
	for i := range 10 {
		s.publish("order.created", map[string]any{"i": i})
		s.publish("order.flaky", map[string]any{"i": i})
	}
	for i := range 3 {
		s.publish("order.gone", map[string]any{"i": i})
	}
	testwait.Eventually(t, 30*time.Second, func() bool {
		return s.Count(`SELECT count(*) FROM deliveries WHERE status IN ('succeeded', 'exhausted')`) == 46
	}, "46 deliveries finished")
	require.Equal(t, 6, s.Count(`SELECT count(*) FROM deliveries WHERE status = 'exhausted'`))
	// Webhook-Id names the event: the first of its two deliveries to arrive
	// fails once.
	require.Equal(t, 56, s.Count(`SELECT count(*) FROM delivery_attempts`), "46 first attempts, 10 second ones")

	ctx := context.Background()
	var rolled, counted [3]string
	testwait.Eventually(t, 10*history.TallyEvery, func() bool {
		for i, q := range [][2]string{{rolledDeliveriesSQL, countedDeliveriesSQL}, {rolledAttemptsSQL, countedAttemptsSQL},
			{keptLastAttemptsSQL, lastAttemptsSQL}} {
			require.NoError(t, s.Pool.QueryRow(ctx, q[0]).Scan(&rolled[i]))
			require.NoError(t, s.Pool.QueryRow(ctx, q[1]).Scan(&counted[i]))
		}
		return rolled == counted
	}, "the rollups equal their rows: %q, counted %q", &rolled, &counted)
	var created, retrying, succeeded, exhausted int
	require.NoError(t, s.Pool.QueryRow(ctx, `SELECT sum(created)::int, sum(retrying)::int, sum(succeeded)::int, sum(exhausted)::int
FROM delivery_rollups WHERE scope_id = $1 AND hourly`, s.tenantID).Scan(&created, &retrying, &succeeded, &exhausted))
	require.Equal(t, [4]int{46, 0, 40, 6}, [4]int{created, retrying, succeeded, exhausted},
		"the tenant's deliveries: created, retrying, succeeded, exhausted")
}

// Each webhook's last attempt as kept and as found in the attempt log.
const (
	keptLastAttemptsSQL = `SELECT coalesce(string_agg(format('%s %s %s %s', webhook_id, executed_at, status_code, error),
    E'\n' ORDER BY webhook_id), '') FROM webhook_last_attempts`
	lastAttemptsSQL = `SELECT coalesce(string_agg(format('%s %s %s %s', webhook_id, executed_at, status_code, error),
    E'\n' ORDER BY webhook_id), '') FROM (
    SELECT DISTINCT ON (webhook_id) webhook_id, executed_at, status_code, error FROM delivery_attempts
    ORDER BY webhook_id, executed_at DESC) AS x`
)

// The rollups of deliveries and attempts as stored (summed over shards) and
// as counted from the rows, one line per scope and period.
const (
	rolledDeliveriesSQL = `SELECT coalesce(string_agg(l, E'\n' ORDER BY l), '') FROM (
    SELECT format('%s %s %s %s/%s/%s/%s/%s', scope_id, hourly, at, sum(created), sum(retrying), sum(succeeded),
        sum(exhausted), sum(cancelled)) AS l
    FROM delivery_rollups GROUP BY scope_id, hourly, at) AS x`

	countedDeliveriesSQL = `SELECT coalesce(string_agg(l, E'\n' ORDER BY l), '') FROM (
    SELECT format('%s %s %s %s/%s/%s/%s/%s', s.scope_id, g.hourly, g.at, count(*),
        count(*) FILTER (WHERE d.status = 'retrying'), count(*) FILTER (WHERE d.status = 'succeeded'),
        count(*) FILTER (WHERE d.status = 'exhausted'), count(*) FILTER (WHERE d.status = 'cancelled')) AS l
    FROM deliveries d
    CROSS JOIN LATERAL (VALUES (d.webhook_id), (d.tenant_id), ('00000000-0000-0000-0000-000000000000'::uuid)) AS s (scope_id)
    CROSS JOIN LATERAL (VALUES (false, date_trunc('minute', d.created_at)), (true, date_trunc('hour', d.created_at, 'UTC')))
        AS g (hourly, at)
    GROUP BY s.scope_id, g.hourly, g.at) AS x`

	rolledAttemptsSQL = `SELECT coalesce(string_agg(l, E'\n' ORDER BY l), '') FROM (
    SELECT format('%s %s %s %s/%s %s %s %s', r.scope_id, r.hourly, r.at, sum(r.attempts), sum(r.successes),
        (SELECT jsonb_object_agg(k, n ORDER BY k) FROM (SELECT e.key AS k, sum(e.value::bigint) AS n
            FROM attempt_rollups x, jsonb_each_text(x.errors) AS e
            WHERE (x.scope_id, x.hourly, x.at) = (r.scope_id, r.hourly, r.at) GROUP BY 1) AS e),
        (SELECT jsonb_object_agg(k, n ORDER BY k) FROM (SELECT l.key AS k, sum(l.value::bigint) AS n
            FROM attempt_rollups x, jsonb_each_text(x.latency) AS l
            WHERE (x.scope_id, x.hourly, x.at) = (r.scope_id, r.hourly, r.at) GROUP BY 1) AS l),
        max(r.last_success_at)) AS l
    FROM attempt_rollups r GROUP BY r.scope_id, r.hourly, r.at) AS x`

	countedAttemptsSQL = `SELECT coalesce(string_agg(l, E'\n' ORDER BY l), '') FROM (
    SELECT format('%s %s %s %s/%s %s %s %s', s.scope_id, g.hourly, g.at, count(*),
        count(*) FILTER (WHERE a.status_code BETWEEN 200 AND 299),
        (SELECT jsonb_object_agg(k, n ORDER BY k) FROM (SELECT b.failure_category AS k, count(*) AS n
            FROM delivery_attempts b
            WHERE b.failure_category IS NOT NULL AND (s.scope_id IN (b.webhook_id, b.tenant_id) OR s.scope_id = '00000000-0000-0000-0000-000000000000')
              AND CASE WHEN g.hourly THEN date_trunc('hour', b.executed_at, 'UTC') ELSE date_trunc('minute', b.executed_at) END = g.at
            GROUP BY 1) AS e),
        (SELECT jsonb_object_agg(k, n ORDER BY k) FROM (SELECT latency_bucket(b.duration_ms)::text AS k, count(*) AS n
            FROM delivery_attempts b
            WHERE (s.scope_id IN (b.webhook_id, b.tenant_id) OR s.scope_id = '00000000-0000-0000-0000-000000000000')
              AND CASE WHEN g.hourly THEN date_trunc('hour', b.executed_at, 'UTC') ELSE date_trunc('minute', b.executed_at) END = g.at
            GROUP BY 1) AS l),
        max(a.executed_at) FILTER (WHERE a.status_code BETWEEN 200 AND 299)) AS l
    FROM delivery_attempts a
    CROSS JOIN LATERAL (VALUES (a.webhook_id), (a.tenant_id), ('00000000-0000-0000-0000-000000000000'::uuid)) AS s (scope_id)
    CROSS JOIN LATERAL (VALUES (false, date_trunc('minute', a.executed_at)), (true, date_trunc('hour', a.executed_at, 'UTC')))
        AS g (hourly, at)
    GROUP BY s.scope_id, g.hourly, g.at) AS x`
)
