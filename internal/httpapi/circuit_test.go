package httpapi

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/breaker"
	"github.com/hookline/hookline/internal/testwait"
)

// circuitOf returns the circuit_breaker object of an answer.
func circuitOf(t *testing.T, r resp) map[string]any {
	t.Helper()
	cb, ok := r.Body["circuit_breaker"].(map[string]any)
	require.True(t, ok, "no circuit_breaker object: %s", r.Raw)
	return cb
}

// requireUTCTimeNear checks that v is an RFC 3339 UTC time within slack of
// want.
func requireUTCTimeNear(t *testing.T, v any, want time.Time, slack time.Duration) time.Time {
	t.Helper()
	s, ok := v.(string)
	require.True(t, ok, "not a time string: %v", v)
	require.True(t, strings.HasSuffix(s, "Z"), "time %q is not UTC (docs/DESIGN.md §16: times are RFC 3339 UTC strings)", s)
	got, err := time.Parse(time.RFC3339Nano, s)
	require.NoError(t, err)
	require.WithinDuration(t, want, got, slack)
	return got
}

func TestCircuitOverrideValidation(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	_, key := e.tenantKey("owner")
	_, otherKey := e.tenantKey("other")
	id := e.createWebhook(key, map[string]any{})["id"].(string)
	path := "/v1/webhooks/" + id + "/circuit-breaker"

	for _, tc := range []struct {
		name  string
		body  any
		field string
	}{
		{"missing action", map[string]any{}, "action"},
		{"null action", map[string]any{"action": nil}, "action"},
		{"missing action with duration", map[string]any{"duration_seconds": 60}, "action"},
		{"unknown action", map[string]any{"action": "explode"}, "action"},
		{"unknown action with duration", map[string]any{"action": "half_open", "duration_seconds": 60}, "action"},
		{"duration on reset", map[string]any{"action": "reset", "duration_seconds": 60}, "duration_seconds"},
		{"duration 0", map[string]any{"action": "force_open", "duration_seconds": 0}, "duration_seconds"},
		{"negative duration", map[string]any{"action": "force_close", "duration_seconds": -1}, "duration_seconds"},
		{"duration over 30 days", map[string]any{"action": "force_open", "duration_seconds": 30*24*3600 + 1}, "duration_seconds"},
		{"unknown field", map[string]any{"action": "force_open", "until": "tomorrow"}, "until"},
	} {
		r := e.do("PATCH", path, key, tc.body)
		require.Equal(t, http.StatusBadRequest, r.Status, "%s: %s", tc.name, r.Raw)
		require.Equal(t, "invalid_request", r.errCode(), "%s: %s", tc.name, r.Raw)
		require.Equal(t, tc.field, r.errField(), "%s: %s", tc.name, r.Raw)
	}
	for _, body := range []string{`{"action": 1}`, `{"action": "force_open", "duration_seconds": "60"}`, `not json`, `[]`} {
		r := e.do("PATCH", path, key, body)
		require.Equal(t, http.StatusBadRequest, r.Status, "%s: %s", body, r.Raw)
		require.NotEmpty(t, r.errCode(), "%s: %s", body, r.Raw)
	}

	valid := map[string]any{"action": "force_open", "duration_seconds": 60}
	for _, tc := range []struct{ path, key string }{
		{path, otherKey}, // another tenant's webhook
		{"/v1/webhooks/01a2018f-e8de-721d-84c4-01870d5923f9/circuit-breaker", key}, // no such webhook
		{"/v1/webhooks/not-a-uuid/circuit-breaker", key},
	} {
		r := e.do("PATCH", tc.path, tc.key, valid)
		require.Equal(t, http.StatusNotFound, r.Status, "%s: %s", tc.path, r.Raw)
		require.Equal(t, "not_found", r.errCode())
	}
	r := e.do("PATCH", path, "", valid)
	require.Equal(t, http.StatusUnauthorized, r.Status)
	require.Zero(t, e.count(`SELECT count(*) FROM circuit_breaker_states`), "no refused request wrote an override")
}

func TestCircuitForceOpenForceCloseAndReset(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	_, key := e.tenantKey("owner")
	id := e.createWebhook(key, map[string]any{})["id"].(string)
	path := "/v1/webhooks/" + id + "/circuit-breaker"
	health := "/v1/webhooks/" + id + "/health"

	r := e.do("PATCH", path, key, map[string]any{"action": "force_open", "duration_seconds": 120})
	require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
	require.Equal(t, id, r.Body["webhook_id"])
	cb := circuitOf(t, r)
	require.Equal(t, "open", cb["forced_state"])
	require.Equal(t, "open", cb["state"], "a forced state is the effective state")
	until := requireUTCTimeNear(t, cb["forced_until"], time.Now().Add(120*time.Second), 5*time.Second)
	h := e.do("GET", health, key, nil)
	require.Equal(t, http.StatusOK, h.Status, string(h.Raw))
	hcb := circuitOf(t, h)
	require.Equal(t, "open", hcb["forced_state"])
	require.Equal(t, "open", hcb["state"])
	require.Equal(t, cb["forced_until"], hcb["forced_until"], "the PATCH answer and the health route agree")
	require.Equal(t, 1, e.count(`SELECT count(*) FROM circuit_breaker_states WHERE webhook_id = $1
		AND forced_state = 'open' AND forced_until = $2`, id, until), "the override is kept in Postgres")

	r = e.do("PATCH", path, key, map[string]any{"action": "force_close"})
	require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
	cb = circuitOf(t, r)
	require.Equal(t, "closed", cb["forced_state"])
	require.Nil(t, cb["forced_until"], "no duration: held until reset")
	require.Equal(t, "closed", cb["state"])
	hcb = circuitOf(t, e.do("GET", health, key, nil))
	require.Equal(t, "closed", hcb["forced_state"])
	require.Nil(t, hcb["forced_until"])

	r = e.do("PATCH", path, key, map[string]any{"action": "reset"})
	require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
	cb = circuitOf(t, r)
	require.Nil(t, cb["forced_state"])
	require.Nil(t, cb["forced_until"])
	require.Equal(t, "closed", cb["state"])
	hcb = circuitOf(t, e.do("GET", health, key, nil))
	require.Nil(t, hcb["forced_state"])
	require.Nil(t, hcb["forced_until"])
	require.Equal(t, 1, e.count(`SELECT count(*) FROM circuit_breaker_states WHERE webhook_id = $1
		AND forced_state IS NULL AND forced_until IS NULL AND state = 'closed'`, id))
}

func TestCircuitForcedStateExpires(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	_, key := e.tenantKey("owner")
	id := e.createWebhook(key, map[string]any{})["id"].(string)
	r := e.do("PATCH", "/v1/webhooks/"+id+"/circuit-breaker", key, map[string]any{"action": "force_open", "duration_seconds": 1})
	require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
	require.Equal(t, "open", circuitOf(t, r)["state"])
	var last map[string]any
	testwait.Eventually(t, 5*time.Second, func() bool {
		last = circuitOf(t, e.do("GET", "/v1/webhooks/"+id+"/health", key, nil))
		return last["forced_state"] == nil
	}, "the forced state to lapse after its duration")
	require.Nil(t, last["forced_until"])
	require.Equal(t, "closed", last["state"], "back to the live circuit")
}

func TestCircuitResetClearsTheLiveCircuit(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	_, key := e.tenantKey("owner")
	id := e.createWebhook(key, map[string]any{"circuit_breaker_config": map[string]any{"minimum_throughput": 4,
		"error_threshold_percentage": 50, "window_size_ms": 60000, "sleep_window_ms": 45000,
		"half_open_max_calls": 2, "half_open_success_threshold": 50}})["id"].(string)
	cfg := breaker.Config{ErrorThresholdPercentage: 50, MinimumThroughput: 4, Window: time.Minute, SleepWindow: 45 * time.Second,
		HalfOpenMaxCalls: 2, HalfOpenSuccessThreshold: 50, MaxSleepWindow: time.Hour}
	ctx := context.Background()
	openedAt := time.Now()
	require.NoError(t, record(ctx, e.srv.breaker, id, cfg, openedAt, true))
	for range 3 {
		require.NoError(t, record(ctx, e.srv.breaker, id, cfg, openedAt, false))
	}

	health := "/v1/webhooks/" + id + "/health"
	cb := circuitOf(t, e.do("GET", health, key, nil))
	require.Equal(t, "open", cb["state"], "%v", cb)
	require.Equal(t, "redis", cb["source"])
	require.EqualValues(t, 45000, cb["sleep_window_ms"])
	requireUTCTimeNear(t, cb["opened_at"], openedAt, time.Second)
	require.Equal(t, map[string]any{"successes": 1.0, "failures": 3.0}, cb["window"])
	require.Nil(t, cb["forced_state"])

	r := e.do("PATCH", "/v1/webhooks/"+id+"/circuit-breaker", key, map[string]any{"action": "reset"})
	require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
	for _, cb := range []map[string]any{circuitOf(t, r), circuitOf(t, e.do("GET", health, key, nil))} {
		require.Equal(t, "closed", cb["state"], "%v", cb)
		require.Nil(t, cb["opened_at"])
		require.Equal(t, map[string]any{"successes": 0.0, "failures": 0.0}, cb["window"])
		require.NotContains(t, cb, "half_open")
	}
}

// record feeds one outcome to the API's breaker, as a worker would.
func record(ctx context.Context, b *breaker.Breaker, id string, cfg breaker.Config, now time.Time, success bool) error {
	_, _, err := b.Record(ctx, id, cfg, now, success, false)
	return err
}

func TestWebhookHealthOfFreshWebhook(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	_, key := e.tenantKey("owner")
	_, otherKey := e.tenantKey("other")
	id := e.createWebhook(key, map[string]any{})["id"].(string)
	path := "/v1/webhooks/" + id + "/health"

	r := e.do("GET", path, key, nil)
	require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
	require.Equal(t, id, r.Body["webhook_id"])
	cb := circuitOf(t, r)
	require.Equal(t, "closed", cb["state"])
	require.Equal(t, "redis", cb["source"])
	require.Equal(t, map[string]any{"successes": 0.0, "failures": 0.0}, cb["window"])
	for _, k := range []string{"forced_state", "forced_until", "opened_at"} {
		require.Contains(t, cb, k)
		require.Nil(t, cb[k], k)
	}
	require.Contains(t, cb, "sleep_window_ms")
	require.NotContains(t, cb, "half_open")

	recent, ok := r.Body["recent"].(map[string]any)
	require.True(t, ok, string(r.Raw))
	require.EqualValues(t, 0, recent["attempts"])
	require.EqualValues(t, 0, recent["successes"])
	require.Contains(t, recent, "success_rate")
	require.Nil(t, recent["success_rate"], "no attempts: no rate")
	require.Equal(t, map[string]any{"p50": nil, "p95": nil, "p99": nil}, recent["latency_ms"])
	require.Equal(t, map[string]any{}, recent["errors_by_category"])
	require.Equal(t, map[string]any{}, recent["deliveries"])
	require.EqualValues(t, 0, recent["postponements"])
	require.Contains(t, r.Body, "last_success_at")
	require.Nil(t, r.Body["last_success_at"])
	require.NotContains(t, r.Body, "postponements", "postponements are the window's, under recent")
	require.NotContains(t, recent, "last_success_at", "the last success is not limited to the window")

	for _, tc := range []struct{ path, key string }{
		{path, otherKey},
		{"/v1/webhooks/01a2018f-e8de-721d-84c4-01870d5923f9/health", key},
		{"/v1/webhooks/not-a-uuid/health", key},
	} {
		r := e.do("GET", tc.path, tc.key, nil)
		require.Equal(t, http.StatusNotFound, r.Status, "%s: %s", tc.path, r.Raw)
		require.Equal(t, "not_found", r.errCode())
	}
	require.Equal(t, http.StatusUnauthorized, e.do("GET", path, "", nil).Status)
}
