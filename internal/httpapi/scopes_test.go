package httpapi

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A service key with manage but not read cannot have stored payloads sent
// anywhere: recovering, replaying and retrying (one delivery or a batch)
// need read as well, as reading the event does. The attack of a webhook
// for every event type pointing at the caller, then a recovery of what it
// "missed", starts nothing.
func TestSendingStoredPayloadsNeedsReadAsWellAsManage(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	a, key := e.tenantKey("a")
	from := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	pub := e.do("POST", "/v1/events", key, map[string]any{"event_type": "order.created", "data": map[string]any{"card": "4111"}})
	require.Equal(t, http.StatusAccepted, pub.Status, string(pub.Raw))
	eventID := pub.Body["id"].(string)
	_, manager := e.serviceKey(map[string]any{"scopes": []string{"manage"}, "tenant_ids": []string{a}})
	_, both := e.serviceKey(map[string]any{"scopes": []string{"manage", "read"}, "tenant_ids": []string{a}})

	r := e.do("GET", "/v1/events/"+eventID, manager, nil, TenantHeader, a)
	require.Equal(t, http.StatusForbidden, r.Status, "reading the event needs read")
	r = e.do("POST", "/v1/webhooks", manager, map[string]any{"url": "https://8.8.8.8/mine", "events": []string{"*"}}, TenantHeader, a)
	require.Equal(t, http.StatusCreated, r.Status, string(r.Raw))
	hook := r.Body["id"].(string)
	unknown := "0190d5f2-0000-7000-8000-000000000000"

	calls := []struct {
		method, path string
		body         any
	}{
		{"POST", "/v1/webhooks/" + hook + "/recover", map[string]any{"from": from, "include": []string{"missed"},
			"rate_limit": map[string]any{"requests_per_second": 5}}},
		{"POST", "/v1/events/" + eventID + "/replay", map[string]any{"webhook_id": hook}},
		{"POST", "/v1/webhooks/" + hook + "/deliveries/" + unknown + "/retry", nil},
		{"POST", "/v1/dlq/retry-batch", map[string]any{"filter": map[string]any{"webhook_ids": []string{hook}}, "rate_limit": map[string]any{"requests_per_second": 5}}},
	}
	for _, call := range calls {
		got := e.do(call.method, call.path, manager, call.body, TenantHeader, a)
		require.Equal(t, http.StatusForbidden, got.Status, "%s %s: %s", call.method, call.path, got.Raw)
		require.Equal(t, "insufficient_scope", got.errCode())
		require.Contains(t, got.Body["error"].(map[string]any)["message"], "read")
	}
	require.Zero(t, e.count(`SELECT count(*) FROM deliveries WHERE webhook_id = $1`, hook), "nothing was sent to the new webhook")
	require.Zero(t, e.count(`SELECT count(*) FROM batch_operations`), "nothing was started")
	for _, call := range calls {
		got := e.do(call.method, call.path, both, call.body, TenantHeader, a)
		require.NotEqual(t, http.StatusForbidden, got.Status, "%s %s with manage and read: %s", call.method, call.path, got.Raw)
	}
}

// Recovering missed events covers the events published while the webhook
// existed (and was disabled), never those from before it was created.
func TestRecoveringMissedEventsSkipsThoseFromBeforeTheWebhook(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	_, key := e.tenantKey("a")
	from := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	pub := e.do("POST", "/v1/events", key, map[string]any{"event_type": "order.created", "data": map[string]any{"n": 1}})
	require.Equal(t, http.StatusAccepted, pub.Status, string(pub.Raw))
	hook := e.createWebhook(key, map[string]any{"events": []string{"*"}})["id"].(string)

	r := e.do("POST", "/v1/webhooks/"+hook+"/recover", key, map[string]any{"from": from, "include": []string{"missed"}, "dry_run": true})
	require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
	require.Equal(t, 0.0, r.Body["recovery"].(map[string]any)["missed"], "the event came before the webhook: %s", r.Raw)
}
