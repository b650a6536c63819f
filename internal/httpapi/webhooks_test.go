package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/webhook"
)

func TestWebhookCreateFillsDefaults(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	_, key := e.tenantKey("acme")
	w := e.createWebhook(key, map[string]any{"events": []string{"order.*", "user.created", "order.*"}})

	require.Equal(t, []any{"order.*", "user.created"}, w["events"], "duplicates removed")
	require.Equal(t, true, w["active"])
	require.Equal(t, "none", w["ordering_guarantee"])
	require.Equal(t, true, w["trace_propagation"])
	require.Equal(t, map[string]any{"max_attempts": 5.0, "base_delay_ms": 1000.0, "max_delay_ms": 300000.0,
		"backoff_multiplier": 2.0, "timeout_ms": 30000.0, "timeout_growth_factor": 1.5, "schedule_ms": []any{}}, w["retry_config"])
	require.Equal(t, map[string]any{"enabled": true, "error_threshold_percentage": 60.0, "minimum_throughput": 20.0,
		"window_size_ms": 60000.0, "sleep_window_ms": 30000.0, "half_open_max_calls": 5.0, "half_open_success_threshold": 60.0},
		w["circuit_breaker_config"])
	require.Equal(t, map[string]any{"requests_per_minute": 100.0, "burst": 20.0}, w["rate_limit"])
	require.Equal(t, map[string]any{}, w["headers"])
	require.Equal(t, map[string]any{}, w["metadata"])
	secret := w["secret"].(string)
	key2, err := webhook.DecodeSecret(secret)
	require.NoError(t, err)
	require.Len(t, key2, 32)
	_, err = time.Parse(time.RFC3339, w["created_at"].(string))
	require.NoError(t, err)

	got := e.do("GET", "/v1/webhooks/"+w["id"].(string), key, nil)
	require.Equal(t, http.StatusOK, got.Status)
	require.NotContains(t, got.Body, "secret")
	require.NotContains(t, string(got.Raw), secret)
	require.NotContains(t, string(e.do("GET", "/v1/webhooks", key, nil).Raw), secret)
	require.NotContains(t, e.logBuf.String(), secret)
}

func TestWebhookCreateKeepsGivenValues(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	_, key := e.tenantKey("acme")
	w := e.createWebhook(key, map[string]any{
		"url":                    "https://8.8.8.8:8443/in?x=1",
		"events":                 []string{"*"},
		"secret":                 "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
		"active":                 false,
		"retry_config":           map[string]any{"max_attempts": 3, "schedule_ms": []int{500, 1500}},
		"circuit_breaker_config": map[string]any{"enabled": false},
		"rate_limit":             map[string]any{"requests_per_minute": 600},
		"ordering_guarantee":     "strict",
		"trace_propagation":      false,
		"headers":                map[string]string{"x-team": "payments"},
		"metadata":               map[string]any{"owner": "ops", "n": 3},
	})
	require.Equal(t, "https://8.8.8.8:8443/in?x=1", w["url"])
	require.Equal(t, "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", w["secret"])
	require.Equal(t, false, w["active"])
	rc := w["retry_config"].(map[string]any)
	require.Equal(t, 3.0, rc["max_attempts"])
	require.Equal(t, 1000.0, rc["base_delay_ms"], "unspecified fields keep defaults")
	require.Equal(t, []any{500.0, 1500.0}, rc["schedule_ms"])
	require.Equal(t, false, w["circuit_breaker_config"].(map[string]any)["enabled"])
	require.Equal(t, map[string]any{"requests_per_minute": 600.0, "burst": 20.0}, w["rate_limit"])
	require.Equal(t, "strict", w["ordering_guarantee"])
	require.Equal(t, false, w["trace_propagation"])
	stored := e.do("GET", "/v1/webhooks/"+w["id"].(string), key, nil)
	require.Equal(t, false, stored.Body["trace_propagation"], "stored")
	patched := e.do("PATCH", "/v1/webhooks/"+w["id"].(string), key, map[string]any{"trace_propagation": true})
	require.Equal(t, true, patched.Body["trace_propagation"])
	require.Equal(t, map[string]any{"X-Team": "****"}, w["headers"], "header values are credentials: masked")
	require.Equal(t, map[string]any{"owner": "ops", "n": 3.0}, w["metadata"])
}

func TestWebhookValidationRefusals(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	_, key := e.tenantKey("acme")
	base := func(extra map[string]any) map[string]any {
		b := map[string]any{"url": "https://8.8.8.8/h", "events": []string{"a.b"}}
		for k, v := range extra {
			b[k] = v
		}
		return b
	}
	retry := func(k string, v any) map[string]any {
		return base(map[string]any{"retry_config": map[string]any{k: v}})
	}
	cb := func(k string, v any) map[string]any {
		return base(map[string]any{"circuit_breaker_config": map[string]any{k: v}})
	}
	headers := map[string]string{}
	for i := range 21 {
		headers[fmt.Sprintf("X-H%d", i)] = "v"
	}
	cases := []struct {
		name  string
		body  map[string]any
		field string
	}{
		{"url missing", map[string]any{"events": []string{"a"}}, "url"},
		{"url empty", base(map[string]any{"url": ""}), "url"},
		{"url too long", base(map[string]any{"url": "https://8.8.8.8/" + strings.Repeat("a", 2040)}), "url"},
		{"url ftp", base(map[string]any{"url": "ftp://8.8.8.8/x"}), "url"},
		{"url no scheme", base(map[string]any{"url": "8.8.8.8/x"}), "url"},
		{"url no host", base(map[string]any{"url": "https:///x"}), "url"},
		{"url credentials", base(map[string]any{"url": "https://u:p@8.8.8.8/x"}), "url"},
		{"url loopback", base(map[string]any{"url": "http://127.0.0.1:9000/x"}), "url"},
		{"url localhost", base(map[string]any{"url": "http://localhost/x"}), "url"},
		{"url private", base(map[string]any{"url": "http://10.1.2.3/x"}), "url"},
		{"url metadata", base(map[string]any{"url": "http://169.254.169.254/latest"}), "url"},
		{"url mapped loopback", base(map[string]any{"url": "http://[::ffff:127.0.0.1]/x"}), "url"},
		{"url ipv6 loopback", base(map[string]any{"url": "http://[::1]/x"}), "url"},
		{"url not a string", base(map[string]any{"url": 5}), "url"},
		{"events missing", map[string]any{"url": "https://8.8.8.8/h"}, "events"},
		{"events empty", base(map[string]any{"events": []string{}}), "events"},
		{"events bad char", base(map[string]any{"events": []string{"a b"}}), "events"},
		{"events empty segment", base(map[string]any{"events": []string{"a..b"}}), "events"},
		{"events not a list", base(map[string]any{"events": "a"}), "events"},
		{"secret malformed", base(map[string]any{"secret": "hunter2"}), "secret"},
		{"secret too short", base(map[string]any{"secret": "whsec_c2hvcnQ="}), "secret"},
		{"verify_url not a boolean", base(map[string]any{"verify_url": "yes"}), "verify_url"},
		{"ordering", base(map[string]any{"ordering_guarantee": "fifo"}), "ordering_guarantee"},
		{"too many headers", base(map[string]any{"headers": headers}), "headers"},
		{"header CRLF", base(map[string]any{"headers": map[string]string{"X-A": "v\r\nX-Evil: 1"}}), "headers.X-A"},
		{"header bad name", base(map[string]any{"headers": map[string]string{"X A": "v"}}), "headers.X A"},
		{"header reserved", base(map[string]any{"headers": map[string]string{"x-webhook-signature": "v"}}), "headers.x-webhook-signature"},
		{"header content-type", base(map[string]any{"headers": map[string]string{"Content-Type": "text/plain"}}), "headers.Content-Type"},
		{"metadata array", base(map[string]any{"metadata": []int{1}}), "metadata"},
		{"unknown field", base(map[string]any{"callback": "x"}), "callback"},
		{"max_attempts 0", retry("max_attempts", 0), "retry_config.max_attempts"},
		{"max_attempts 51", retry("max_attempts", 51), "retry_config.max_attempts"},
		{"base_delay_ms 99", retry("base_delay_ms", 99), "retry_config.base_delay_ms"},
		{"max_delay_ms huge", retry("max_delay_ms", 86400001), "retry_config.max_delay_ms"},
		{"max below base", base(map[string]any{"retry_config": map[string]any{"base_delay_ms": 5000, "max_delay_ms": 1000}}), "retry_config.max_delay_ms"},
		{"multiplier 0.5", retry("backoff_multiplier", 0.5), "retry_config.backoff_multiplier"},
		{"timeout 50", retry("timeout_ms", 50), "retry_config.timeout_ms"},
		{"timeout growth 4", retry("timeout_growth_factor", 4), "retry_config.timeout_growth_factor"},
		{"schedule negative", retry("schedule_ms", []int{1000, -1}), "retry_config.schedule_ms"},
		{"retry unknown", retry("jitter", 1), "retry_config.jitter"},
		{"threshold 0", cb("error_threshold_percentage", 0), "circuit_breaker_config.error_threshold_percentage"},
		{"threshold 101", cb("error_threshold_percentage", 101), "circuit_breaker_config.error_threshold_percentage"},
		{"throughput 0", cb("minimum_throughput", 0), "circuit_breaker_config.minimum_throughput"},
		{"window 999", cb("window_size_ms", 999), "circuit_breaker_config.window_size_ms"},
		{"sleep window 0", cb("sleep_window_ms", 0), "circuit_breaker_config.sleep_window_ms"},
		{"half open calls 0", cb("half_open_max_calls", 0), "circuit_breaker_config.half_open_max_calls"},
		{"half open threshold 0", cb("half_open_success_threshold", 0), "circuit_breaker_config.half_open_success_threshold"},
		{"rpm 0", base(map[string]any{"rate_limit": map[string]any{"requests_per_minute": 0}}), "rate_limit.requests_per_minute"},
		{"burst 0", base(map[string]any{"rate_limit": map[string]any{"burst": 0}}), "rate_limit.burst"},
	}
	for _, tc := range cases {
		r := e.do("POST", "/v1/webhooks", key, tc.body)
		require.Equal(t, http.StatusBadRequest, r.Status, "%s: %s", tc.name, r.Raw)
		require.Equal(t, tc.field, r.errField(), "%s: %s", tc.name, r.Raw)
		require.NotEmpty(t, r.errCode(), tc.name)
		msg := r.Body["error"].(map[string]any)["message"].(string)
		require.True(t, strings.HasPrefix(msg, tc.field), "%s: message %q names the field", tc.name, msg)
	}
	require.Equal(t, 0, e.count(`SELECT count(*) FROM webhooks`), "refused creates store nothing")
}

func TestWebhookHTTPSRequiredWhenConfigured(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	e.srv.rules.RequireHTTPS = true
	_, key := e.tenantKey("acme")
	r := e.do("POST", "/v1/webhooks", key, map[string]any{"url": "http://8.8.8.8/h", "events": []string{"a"}})
	require.Equal(t, http.StatusBadRequest, r.Status)
	require.Equal(t, "url", r.errField())
	e.createWebhook(key, map[string]any{"url": "https://8.8.8.8/h"})
}

func TestWebhookPrivateNetworksAllowedWhenConfigured(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	e.srv.rules.Network.AllowPrivate = true
	_, key := e.tenantKey("acme")
	w := e.createWebhook(key, map[string]any{"url": "http://127.0.0.1:9000/x"})
	require.Equal(t, "http://127.0.0.1:9000/x", w["url"])
}

func TestWebhookListPaginationAndFilters(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	_, key := e.tenantKey("acme")
	var ids []string
	for i := range 7 {
		body := map[string]any{"events": []string{fmt.Sprintf("kind%d.created", i%2)}}
		if i == 6 {
			body["active"] = false
			body["events"] = []string{"user_signup.*"}
		}
		ids = append(ids, e.createWebhook(key, body)["id"].(string))
	}

	var seen []string
	cursor := ""
	pages := 0
	for {
		r := e.do("GET", "/v1/webhooks?limit=3&cursor="+cursor, key, nil)
		require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
		for _, d := range r.Body["data"].([]any) {
			seen = append(seen, d.(map[string]any)["id"].(string))
		}
		pages++
		cursor = r.Body["next_cursor"].(string)
		if cursor == "" {
			break
		}
	}
	require.Equal(t, ids, seen, "every webhook once, in creation order")
	require.Equal(t, 3, pages)

	listIDs := func(query string) []string {
		r := e.do("GET", "/v1/webhooks?"+query, key, nil)
		require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
		var out []string
		for _, d := range r.Body["data"].([]any) {
			out = append(out, d.(map[string]any)["id"].(string))
		}
		return out
	}
	require.Equal(t, ids[:6], listIDs("active=true"))
	require.Equal(t, ids[6:], listIDs("active=false"))
	require.Equal(t, []string{ids[1], ids[3], ids[5]}, listIDs("event_type=kind1.created"))
	require.Equal(t, []string{ids[6]}, listIDs("event_type=user_signup.done"))
	require.Empty(t, listIDs("event_type=usersignup.done"), "_ in a filter is a literal, not a LIKE wildcard")
	require.Empty(t, listIDs("event_type=kind1"))

	for _, q := range []string{"limit=0", "limit=501", "limit=x", "cursor=%21%21", "active=maybe", "event_type=a%20b"} {
		r := e.do("GET", "/v1/webhooks?"+q, key, nil)
		require.Equal(t, http.StatusBadRequest, r.Status, q)
		require.NotEmpty(t, r.errField(), q)
	}
}

// The SQL filter used by list agrees with webhook.Match on the same cases.
func TestWebhookListFilterAgreesWithMatch(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	_, key := e.tenantKey("acme")
	patterns := []string{"*", "order.*", "*.created", "order.item_added", "a*b*c", "order"}
	byPattern := map[string]string{}
	for _, p := range patterns {
		byPattern[e.createWebhook(key, map[string]any{"events": []string{p}})["id"].(string)] = p
	}
	for _, et := range []string{"order", "order.created", "order.item_added", "orderXitem_added", "a.b.c", "abc", "user.created", "ac"} {
		r := e.do("GET", "/v1/webhooks?event_type="+et, key, nil)
		require.Equal(t, http.StatusOK, r.Status)
		got := map[string]bool{}
		for _, d := range r.Body["data"].([]any) {
			got[byPattern[d.(map[string]any)["id"].(string)]] = true
		}
		for _, p := range patterns {
			require.Equal(t, webhook.Match(p, et), got[p], "pattern %q, event %q", p, et)
		}
	}
}

func TestWebhookPatchAndPut(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	_, key := e.tenantKey("acme")
	w := e.createWebhook(key, map[string]any{"headers": map[string]string{"X-A": "1"}, "metadata": map[string]any{"k": "v"}})
	id := w["id"].(string)
	path := "/v1/webhooks/" + id

	p := e.do("PATCH", path, key, map[string]any{"active": false, "retry_config": map[string]any{"max_attempts": 8}})
	require.Equal(t, http.StatusOK, p.Status, string(p.Raw))
	require.Equal(t, false, p.Body["active"])
	require.Equal(t, w["url"], p.Body["url"])
	require.Equal(t, w["events"], p.Body["events"])
	rc := p.Body["retry_config"].(map[string]any)
	require.Equal(t, 8.0, rc["max_attempts"])
	require.Equal(t, 1000.0, rc["base_delay_ms"], "nested fields not given are kept")
	require.Equal(t, map[string]any{"X-A": "****"}, p.Body["headers"])
	require.Equal(t, w["created_at"], p.Body["created_at"])
	require.NotEqual(t, w["updated_at"], p.Body["updated_at"])
	require.NotContains(t, p.Body, "secret")

	bad := e.do("PATCH", path, key, map[string]any{"retry_config": map[string]any{"max_attempts": 0}, "active": true})
	require.Equal(t, http.StatusBadRequest, bad.Status)
	got := e.do("GET", path, key, nil)
	require.Equal(t, false, got.Body["active"], "a refused patch changes nothing")
	require.Equal(t, 8.0, got.Body["retry_config"].(map[string]any)["max_attempts"])

	require.Equal(t, "secret", e.do("PATCH", path, key, map[string]any{"secret": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}).errField())
	require.Equal(t, "url", e.do("PATCH", path, key, map[string]any{"url": "http://192.168.1.1/"}).errField())

	put := e.do("PUT", path, key, map[string]any{"url": "https://1.1.1.1/new", "events": []string{"x.y"}})
	require.Equal(t, http.StatusOK, put.Status, string(put.Raw))
	require.Equal(t, "https://1.1.1.1/new", put.Body["url"])
	require.Equal(t, true, put.Body["active"], "PUT resets omitted fields to defaults")
	require.Equal(t, 5.0, put.Body["retry_config"].(map[string]any)["max_attempts"])
	require.Equal(t, map[string]any{}, put.Body["headers"])
	require.Equal(t, "events", e.do("PUT", path, key, map[string]any{"url": "https://1.1.1.1/new"}).errField())

	var secret string
	require.NoError(t, e.pool.QueryRow(context.Background(), `SELECT secret FROM webhooks WHERE id = $1`, id).Scan(&secret))
	require.Equal(t, w["secret"], secret, "updates keep the secret")
}

func TestWebhookDeleteCancelsPendingKeepsHistory(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	tenantID, key := e.tenantKey("acme")
	w := e.createWebhook(key, map[string]any{})
	id := w["id"].(string)

	ctx := context.Background()
	eventID := uuid.New()
	_, err := e.pool.Exec(ctx, `INSERT INTO events (id, tenant_id, event_type, idempotency_key, request_hash, priority, data)
		VALUES ($1, $2, 'order.created', 'k1', '\x00', 'normal', '{}')`, eventID, tenantID)
	require.NoError(t, err)
	for _, status := range []string{"pending", "retrying", "succeeded", "exhausted"} {
		_, err := e.pool.Exec(ctx, `INSERT INTO deliveries (id, tenant_id, event_id, webhook_id, priority, status)
			VALUES ($1, $2, $3, $4, 'normal', $5)`, uuid.New(), tenantID, eventID, id, status)
		require.NoError(t, err)
	}

	r := e.do("DELETE", "/v1/webhooks/"+id, key, nil)
	require.Equal(t, http.StatusNoContent, r.Status)
	require.Empty(t, r.Raw)
	require.Equal(t, http.StatusNotFound, e.do("GET", "/v1/webhooks/"+id, key, nil).Status)
	require.Equal(t, http.StatusNotFound, e.do("DELETE", "/v1/webhooks/"+id, key, nil).Status)
	require.Equal(t, http.StatusNotFound, e.do("PATCH", "/v1/webhooks/"+id, key, map[string]any{"active": true}).Status)
	require.Empty(t, e.do("GET", "/v1/webhooks", key, nil).Body["data"])

	require.Equal(t, 2, e.count(`SELECT count(*) FROM deliveries WHERE webhook_id = $1 AND status = 'cancelled'`, id))
	require.Equal(t, 1, e.count(`SELECT count(*) FROM deliveries WHERE webhook_id = $1 AND status = 'succeeded'`, id))
	require.Equal(t, 1, e.count(`SELECT count(*) FROM deliveries WHERE webhook_id = $1 AND status = 'exhausted'`, id))
	require.Equal(t, 1, e.count(`SELECT count(*) FROM webhooks WHERE id = $1 AND deleted_at IS NOT NULL`, id), "kept for history")
}

func TestWebhookSecretRotation(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	_, key := e.tenantKey("acme")
	w := e.createWebhook(key, map[string]any{})
	id := w["id"].(string)
	old := w["secret"].(string)

	before := time.Now()
	r := e.do("POST", "/v1/webhooks/"+id+"/secret/rotate", key, nil)
	require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
	fresh := r.Body["secret"].(string)
	require.NotEqual(t, old, fresh)
	_, err := webhook.DecodeSecret(fresh)
	require.NoError(t, err)
	until, err := time.Parse(time.RFC3339, r.Body["previous_secret_expires_at"].(string))
	require.NoError(t, err)
	require.WithinDuration(t, before.Add(24*time.Hour), until, 5*time.Second)

	_, err = webhook.NewStore(e.pool).Get(context.Background(), uuid.New(), uuid.MustParse(id))
	require.ErrorIs(t, err, webhook.ErrNotFound, "another tenant id cannot load it")
	var tenantID uuid.UUID
	require.NoError(t, e.pool.QueryRow(context.Background(), `SELECT tenant_id FROM webhooks WHERE id = $1`, id).Scan(&tenantID))
	stored, err := webhook.NewStore(e.pool).Get(context.Background(), tenantID, uuid.MustParse(id))
	require.NoError(t, err)
	require.Equal(t, []string{fresh, old}, stored.ActiveSecrets(time.Now()), "both sign during the grace period")
	require.Equal(t, []string{fresh}, stored.ActiveSecrets(until.Add(time.Second)), "only the new one after it")

	given := "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	r = e.do("POST", "/v1/webhooks/"+id+"/secret/rotate", key, map[string]any{"secret": given, "grace_period_seconds": 60})
	require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
	require.Equal(t, given, r.Body["secret"])
	until, err = time.Parse(time.RFC3339, r.Body["previous_secret_expires_at"].(string))
	require.NoError(t, err)
	require.WithinDuration(t, time.Now().Add(time.Minute), until, 5*time.Second)

	require.Equal(t, "secret", e.do("POST", "/v1/webhooks/"+id+"/secret/rotate", key, map[string]any{"secret": "nope"}).errField())
	require.Equal(t, "grace_period_seconds", e.do("POST", "/v1/webhooks/"+id+"/secret/rotate", key, map[string]any{"grace_period_seconds": -1}).errField())
	require.NotContains(t, e.logBuf.String(), fresh)
	require.NotContains(t, e.logBuf.String(), given)
}

func TestTenantIsolation(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	_, keyA := e.tenantKey("a")
	_, keyB := e.tenantKey("b")
	w := e.createWebhook(keyA, map[string]any{})
	path := "/v1/webhooks/" + w["id"].(string)

	for _, tc := range []struct {
		method, path string
		body         any
	}{
		{"GET", path, nil},
		{"PATCH", path, map[string]any{"active": false}},
		{"PUT", path, map[string]any{"url": "https://8.8.8.8/b", "events": []string{"b"}}},
		{"DELETE", path, nil},
		{"POST", path + "/secret/rotate", nil},
	} {
		r := e.do(tc.method, tc.path, keyB, tc.body)
		require.Equal(t, http.StatusNotFound, r.Status, "%s %s", tc.method, tc.path)
		require.Equal(t, "not_found", r.errCode())
	}
	require.Empty(t, e.do("GET", "/v1/webhooks", keyB, nil).Body["data"])
	got := e.do("GET", path, keyA, nil)
	require.Equal(t, http.StatusOK, got.Status)
	require.Equal(t, true, got.Body["active"], "B's attempts changed nothing")
}
