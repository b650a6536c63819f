package httpapi

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// seedStatsDelivery adds a delivery created at created in the given
// status, with one attempt per entry of durations (ms, a 2xx when ok),
// executed at executed.
func (e *apiEnv) seedStatsDelivery(tenantID, hook, status string, created, executed time.Time, attempts ...statsAttempt) {
	e.t.Helper()
	var id string
	require.NoError(e.t, e.pool.QueryRow(context.Background(), `WITH ev AS (
    INSERT INTO events (id, tenant_id, event_type, idempotency_key, request_hash, priority, data, created_at)
    VALUES (uuidv7(), $1, 'order.created', 'seed-' || gen_random_uuid(), '\x00', 'normal', '{}', $4)
    RETURNING id)
INSERT INTO deliveries (id, tenant_id, event_id, webhook_id, status, priority, attempt_count, created_at, completed_at)
SELECT uuidv7(), $1, id, $2, $3, 'normal', 1, $4, CASE WHEN $3 IN ('succeeded', 'exhausted') THEN $4::timestamptz END FROM ev
RETURNING id::text`, tenantID, hook, status, created).Scan(&id))
	for i, a := range attempts {
		code := 500
		if a.ok {
			code = 200
		}
		_, err := e.pool.Exec(context.Background(), `INSERT INTO delivery_attempts (delivery_id, delivery_created_at,
    attempt_number, tenant_id, webhook_id, status_code, duration_ms, scheduled_at, executed_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8)`, id, created, i+1, tenantID, hook, code, a.ms, executed)
		require.NoError(e.t, err)
	}
}

// latencyNear checks each percentile of got is within 10 % of want.
func latencyNear(t *testing.T, want map[string]float64, got any) {
	t.Helper()
	m, ok := got.(map[string]any)
	require.True(t, ok, "latency_ms is an object: %v", got)
	require.Len(t, m, len(want))
	for k, v := range want {
		require.InDelta(t, v, m[k], v*0.1, "%s of %v", k, m)
	}
}

type statsAttempt struct {
	ms int
	ok bool
}

func window(t *testing.T, r resp, name string) map[string]any {
	t.Helper()
	w, ok := r.Body[name].(map[string]any)
	require.True(t, ok, "%s in %s", name, r.Raw)
	return w
}

func TestStatsCountTheTenantsLastHourAndDay(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	a, keyA := e.tenantKey("a")
	b, keyB := e.tenantKey("b")
	hookA := e.createWebhook(keyA, map[string]any{})["id"].(string)
	hookB := e.createWebhook(keyB, map[string]any{})["id"].(string)

	now := time.Now()
	recent, earlier, old := now.Add(-10*time.Minute), now.Add(-5*time.Hour), now.Add(-48*time.Hour)
	e.seedStatsDelivery(a, hookA, "succeeded", recent, recent, statsAttempt{10, true})
	e.seedStatsDelivery(a, hookA, "succeeded", recent, recent, statsAttempt{30, false}, statsAttempt{20, true})
	e.seedStatsDelivery(a, hookA, "exhausted", recent, recent)
	e.seedStatsDelivery(a, hookA, "pending", earlier, earlier, statsAttempt{100, true})
	e.seedStatsDelivery(a, hookA, "succeeded", old, old, statsAttempt{5000, true}) // outside both windows
	e.seedStatsDelivery(b, hookB, "succeeded", recent, recent, statsAttempt{1000, true})
	e.seedStatsDelivery(b, hookB, "exhausted", recent, recent)

	r := e.do("GET", "/v1/stats", keyA, nil)
	require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
	require.Equal(t, a, r.Body["tenant_id"])
	require.EqualValues(t, 1, r.Body["dlq_size"])
	hour, day := window(t, r, "last_hour"), window(t, r, "last_day")
	require.EqualValues(t, 3600, hour["window_seconds"])
	require.Equal(t, map[string]any{"pending": 0.0, "retrying": 0.0, "succeeded": 2.0, "exhausted": 1.0, "cancelled": 0.0},
		hour["deliveries"])
	require.EqualValues(t, 3, hour["attempts"])
	require.EqualValues(t, 2, hour["successes"])
	require.InDelta(t, 2.0/3, hour["success_rate"], 1e-9)
	// Percentiles come from histograms whose buckets are about 9 % wide:
	// each estimate is within a bucket of the exact 20, 29 and 29.8 ms.
	latencyNear(t, map[string]float64{"p50": 20, "p95": 29, "p99": 29.8}, hour["latency_ms"])
	require.Equal(t, map[string]any{"pending": 1.0, "retrying": 0.0, "succeeded": 2.0, "exhausted": 1.0, "cancelled": 0.0},
		day["deliveries"])
	require.EqualValues(t, 4, day["attempts"])
	require.EqualValues(t, 3, day["successes"])
	require.InDelta(t, 25.0, day["latency_ms"].(map[string]any)["p50"], 2.5)

	all := e.do("GET", "/v1/stats", testAdminToken, nil)
	require.Equal(t, http.StatusOK, all.Status, string(all.Raw))
	require.Nil(t, all.Body["tenant_id"], "the admin sees every tenant together")
	require.EqualValues(t, 2, all.Body["dlq_size"])
	require.EqualValues(t, 4, window(t, all, "last_hour")["attempts"])

	one := e.do("GET", "/v1/tenants/"+b+"/stats", testAdminToken, nil)
	require.Equal(t, http.StatusOK, one.Status, string(one.Raw))
	require.Equal(t, b, one.Body["tenant_id"])
	require.EqualValues(t, 1, window(t, one, "last_day")["attempts"])
	require.InDelta(t, 1000.0, window(t, one, "last_day")["latency_ms"].(map[string]any)["p99"], 100)

	require.Equal(t, http.StatusUnauthorized, e.do("GET", "/v1/stats", "", nil).Status)
	require.Equal(t, http.StatusUnauthorized, e.do("GET", "/v1/stats", "hk_not-a-key", nil).Status)
	require.Equal(t, http.StatusUnauthorized, e.do("GET", "/v1/tenants/"+b+"/stats", keyA, nil).Status,
		"a tenant cannot read another tenant's stats")
	require.Equal(t, http.StatusNotFound, e.do("GET", "/v1/tenants/01a2018f-e8de-721d-84c4-01870d5923f9/stats", testAdminToken, nil).Status)
}

// A tenant without any traffic gets zeros and nulls, not an error.
func TestStatsOfAQuietTenant(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	_, key := e.tenantKey("quiet")
	r := e.do("GET", "/v1/stats", key, nil)
	require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
	hour := window(t, r, "last_hour")
	require.EqualValues(t, 0, hour["attempts"])
	require.Nil(t, hour["success_rate"])
	require.Equal(t, map[string]any{"p50": nil, "p95": nil, "p99": nil}, hour["latency_ms"])
	require.EqualValues(t, 0, r.Body["dlq_size"])
}
