package httpapi

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A webhook says why it is disabled: "manual" when its tenant paused it
// (at creation or by an update), "auto_disabled" when hookline did; enabling
// it clears the reason, the time and what counted towards disabling it.
func TestWebhookDisabledReasons(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	_, key := e.tenantKey("acme")
	w := e.createWebhook(key, map[string]any{})
	id := w["id"].(string)
	path := "/v1/webhooks/" + id
	require.Equal(t, "", w["disabled_reason"])
	require.Nil(t, w["disabled_at"])
	require.Equal(t, map[string]any{"failing_for_ms": nil}, w["auto_disable"])

	paused := e.createWebhook(key, map[string]any{"active": false})
	require.Equal(t, "manual", paused["disabled_reason"])
	require.Equal(t, paused["created_at"], paused["disabled_at"])

	r := e.do("PATCH", path, key, map[string]any{"active": false})
	require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
	require.Equal(t, false, r.Body["active"])
	require.Equal(t, "manual", r.Body["disabled_reason"])
	at, err := time.Parse(time.RFC3339Nano, r.Body["disabled_at"].(string))
	require.NoError(t, err)
	require.WithinDuration(t, time.Now(), at, time.Minute)

	// Other changes to a disabled webhook keep its reason and time.
	r = e.do("PATCH", path, key, map[string]any{"metadata": map[string]any{"team": "a"}})
	require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
	require.Equal(t, "manual", r.Body["disabled_reason"])
	require.Equal(t, at.Format(time.RFC3339Nano), r.Body["disabled_at"])

	r = e.do("PATCH", path, key, map[string]any{"active": true})
	require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
	require.Equal(t, "", r.Body["disabled_reason"])
	require.Nil(t, r.Body["disabled_at"])

	// Disabled by hookline (as the dlq's periodic job does), it says so,
	// and enabling it starts its failure count afresh.
	_, err = e.pool.Exec(context.Background(), `UPDATE webhooks SET failing_since = now() - interval '1 hour',
		circuit_reopens = 3 WHERE id = $1`, id)
	require.NoError(t, err)
	require.Equal(t, 1, e.count(`SELECT count(*) FROM disable_failing_webhooks(3, 10)`))
	r = e.do("GET", path, key, nil)
	require.Equal(t, false, r.Body["active"])
	require.Equal(t, "auto_disabled", r.Body["disabled_reason"])
	require.NotNil(t, r.Body["disabled_at"])
	list := e.do("GET", "/v1/webhooks?active=false", key, nil)
	require.Len(t, list.Body["data"], 2)

	r = e.do("PATCH", path, key, map[string]any{"active": true})
	require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
	require.Equal(t, "", r.Body["disabled_reason"])
	require.Nil(t, r.Body["disabled_at"])
	require.Equal(t, 1, e.count(`SELECT count(*) FROM webhooks WHERE id = $1 AND failing_since IS NULL AND circuit_reopens = 0`, id))

	// Each disabled period is kept, for recoveries of what it missed.
	require.Equal(t, 2, e.count(`SELECT count(*) FROM webhook_pauses WHERE webhook_id = $1 AND resumed_at IS NOT NULL`, id))
	require.Equal(t, 1, e.count(`SELECT count(*) FROM webhook_pauses WHERE webhook_id = $1`, paused["id"]))
}

// The auto-disable window of a webhook is its own (0: never), or its
// tenant's when null; the tenant's comes from the configuration at its
// creation and is changed by the admin.
func TestAutoDisableSettings(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	tenantID, key := e.tenantKey("acme")
	tn := e.do("GET", "/v1/tenants/"+tenantID, testAdminToken, nil)
	require.Equal(t, map[string]any{"failing_for_ms": 432000000.0}, tn.Body["auto_disable"], "5 days by default")
	tn = e.do("PATCH", "/v1/tenants/"+tenantID, testAdminToken, map[string]any{"auto_disable": map[string]any{"failing_for_ms": 0}})
	require.Equal(t, http.StatusOK, tn.Status, string(tn.Raw))
	require.Equal(t, map[string]any{"failing_for_ms": 0.0}, tn.Body["auto_disable"])
	tn = e.do("PATCH", "/v1/tenants/"+tenantID, testAdminToken, map[string]any{"auto_disable": map[string]any{"failing_for_ms": 10}})
	require.Equal(t, http.StatusBadRequest, tn.Status)
	require.Equal(t, "auto_disable.failing_for_ms", tn.errField())

	w := e.createWebhook(key, map[string]any{"auto_disable": map[string]any{"failing_for_ms": 3_600_000}})
	require.Equal(t, map[string]any{"failing_for_ms": 3_600_000.0}, w["auto_disable"])
	path := "/v1/webhooks/" + w["id"].(string)
	r := e.do("PATCH", path, key, map[string]any{"rate_limit": map[string]any{"burst": 5}})
	require.Equal(t, map[string]any{"failing_for_ms": 3_600_000.0}, r.Body["auto_disable"], "left out: kept")
	r = e.do("PATCH", path, key, map[string]any{"auto_disable": map[string]any{"failing_for_ms": 0}})
	require.Equal(t, map[string]any{"failing_for_ms": 0.0}, r.Body["auto_disable"])
	r = e.do("PATCH", path, key, map[string]any{"auto_disable": map[string]any{"failing_for_ms": nil}})
	require.Equal(t, map[string]any{"failing_for_ms": nil}, r.Body["auto_disable"], "null: the tenant's")
	r = e.do("PATCH", path, key, map[string]any{"auto_disable": map[string]any{"failing_for_ms": 60_000}})
	require.Equal(t, http.StatusOK, r.Status)
	r = e.do("PUT", path, key, map[string]any{"url": "https://8.8.8.8/hooks", "events": []string{"a"}})
	require.Equal(t, map[string]any{"failing_for_ms": nil}, r.Body["auto_disable"], "a replace goes back to the default")

	for _, bad := range []any{999, 90*24*3_600_000 + 1, -1, "1h", 1.5} {
		r := e.do("PATCH", path, key, map[string]any{"auto_disable": map[string]any{"failing_for_ms": bad}})
		require.Equal(t, http.StatusBadRequest, r.Status, "%v: %s", bad, r.Raw)
		require.Equal(t, "auto_disable.failing_for_ms", r.errField(), "%v", bad)
	}
	r = e.do("PATCH", path, key, map[string]any{"auto_disable": map[string]any{"after": 1}})
	require.Equal(t, http.StatusBadRequest, r.Status)
	require.Equal(t, "auto_disable.after", r.errField())
}

// POST /v1/webhooks/{id}/recover: a dry run answers the counts and starts
// nothing (also for a disabled webhook); otherwise 202 with the batch
// operation, which says what it recovers. Refusals name the field.
func TestRecoverRoute(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	_, key := e.tenantKey("acme")
	w := e.createWebhook(key, map[string]any{"active": false})
	path := "/v1/webhooks/" + w["id"].(string) + "/recover"
	from := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)

	r := e.do("POST", path, key, map[string]any{"from": from, "dry_run": true})
	require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
	require.Equal(t, true, r.Body["dry_run"])
	require.Equal(t, 0.0, r.Body["total"])
	rec := r.Body["recovery"].(map[string]any)
	require.Equal(t, []any{"failed", "missed"}, rec["include"])
	require.Equal(t, 0.0, rec["failed"])
	require.Equal(t, 0.0, rec["missed"])
	require.Zero(t, e.count(`SELECT count(*) FROM batch_operations`))

	r = e.do("POST", path, key, map[string]any{"from": from, "rate_limit": map[string]any{"requests_per_second": 5}})
	require.Equal(t, http.StatusConflict, r.Status, string(r.Raw))
	require.Equal(t, "webhook_inactive", r.errCode())
	require.Equal(t, http.StatusOK, e.do("PATCH", "/v1/webhooks/"+w["id"].(string), key, map[string]any{"active": true}).Status)

	r = e.do("POST", path, key, map[string]any{"from": from, "include": []string{"missed"},
		"rate_limit": map[string]any{"requests_per_second": 5}})
	require.Equal(t, http.StatusAccepted, r.Status, string(r.Raw))
	op := r.Body["batch_operation"].(map[string]any)
	require.Equal(t, r.Body["batch_operation_id"], op["id"])
	require.Equal(t, "recover", op["kind"])
	require.Equal(t, "pending", op["state"])
	rec = op["recovery"].(map[string]any)
	require.Equal(t, w["id"], rec["webhook_id"])
	require.Equal(t, []any{"missed"}, rec["include"])
	require.Nil(t, rec["missed"], "counted when it starts")
	got := e.do("GET", "/v1/dlq/batch-operations/"+op["id"].(string), key, nil)
	require.Equal(t, "recover", got.Body["kind"])

	for _, tc := range []struct {
		body  map[string]any
		field string
	}{
		{map[string]any{"rate_limit": map[string]any{"requests_per_second": 5}}, "from"},
		{map[string]any{"from": from, "to": "2000-01-01T00:00:00Z", "rate_limit": map[string]any{"requests_per_second": 5}}, "to"},
		{map[string]any{"from": from, "include": []string{"lost"}, "rate_limit": map[string]any{"requests_per_second": 5}}, "include[0]"},
		{map[string]any{"from": from}, "rate_limit.requests_per_second"},
		{map[string]any{"from": from, "rate_limit": map[string]any{"requests_per_second": 5}, "priority": "urgent"}, "priority"},
		{map[string]any{"from": from, "since": from}, "since"},
	} {
		r := e.do("POST", path, key, tc.body)
		require.Equal(t, http.StatusBadRequest, r.Status, "%v: %s", tc.body, r.Raw)
		require.Equal(t, tc.field, r.errField(), "%v", tc.body)
	}
	_, other := e.tenantKey("other")
	r = e.do("POST", path, other, map[string]any{"from": from, "dry_run": true})
	require.Equal(t, http.StatusNotFound, r.Status)
}
