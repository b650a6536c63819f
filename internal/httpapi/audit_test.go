package httpapi

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Every security-relevant action leaves one audit row, visible to its
// tenant only, newest first.
func TestAuditLogRecordsEachAction(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	tenantID, key := e.tenantKey("acme")
	_, otherKey := e.tenantKey("other")
	hook := e.createWebhook(key, map[string]any{})["id"].(string)
	doomed := e.createWebhook(key, map[string]any{})["id"].(string)

	ok := func(r resp, status int) {
		t.Helper()
		require.Equal(t, status, r.Status, string(r.Raw))
	}
	r := e.do("POST", "/v1/api-keys", key, map[string]any{"name": "ci"})
	ok(r, http.StatusCreated)
	keyID := r.Body["id"].(string)
	ok(e.do("DELETE", "/v1/api-keys/"+keyID, key, nil), http.StatusNoContent)
	ok(e.do("POST", "/v1/webhooks/"+hook+"/secret/rotate", key, nil), http.StatusOK)
	ok(e.do("DELETE", "/v1/webhooks/"+doomed, key, nil), http.StatusNoContent)
	ok(e.do("PATCH", "/v1/webhooks/"+hook+"/circuit-breaker", key, map[string]any{"action": "force_open", "duration_seconds": 60}), http.StatusOK)
	d := e.seedDelivery(tenantID, hook, "order.created", "exhausted", "server_error", time.Now())
	ok(e.do("POST", "/v1/webhooks/"+hook+"/deliveries/"+d+"/retry", key, nil), http.StatusAccepted)
	r = e.do("POST", "/v1/dlq/retry-batch", key, map[string]any{"filter": map[string]any{"webhook_ids": []string{hook}},
		"rate_limit": map[string]any{"requests_per_second": 5}})
	ok(r, http.StatusAccepted)
	batch := r.Body["batch_operation_id"].(string)
	ok(e.do("POST", "/v1/dlq/batch-operations/"+batch+"/cancel", key, nil), http.StatusOK)
	var eventID string
	require.NoError(t, e.pool.QueryRow(context.Background(), `SELECT event_id::text FROM deliveries WHERE id = $1`, d).Scan(&eventID))
	ok(e.do("POST", "/v1/events/"+eventID+"/replay", key, nil), http.StatusAccepted)
	// Refused actions leave no row.
	ok(e.do("DELETE", "/v1/webhooks/"+doomed, key, nil), http.StatusNotFound)
	ok(e.do("DELETE", "/v1/webhooks/"+hook, otherKey, nil), http.StatusNotFound)

	r = e.do("GET", "/v1/audit", key, nil)
	ok(r, http.StatusOK)
	var actions, targets []string
	for _, row := range r.Body["data"].([]any) {
		m := row.(map[string]any)
		actions = append(actions, m["action"].(string))
		targets = append(targets, m["target_id"].(string))
		require.Equal(t, "127.0.0.1", m["remote_addr"])
		if m["action"] == "tenant.created" {
			require.Nil(t, m["actor_key_id"], "the admin token has no key id")
		} else {
			require.NotNil(t, m["actor_key_id"])
		}
	}
	require.Equal(t, []string{"event.replayed", "dlq.batch_retry_cancelled", "dlq.batch_retry_created", "delivery.retried",
		"webhook.circuit_breaker_overridden", "webhook.deleted", "webhook.secret_rotated", "api_key.revoked",
		"api_key.created", "webhook.created", "webhook.created", "tenant.created"}, actions)
	require.Equal(t, []string{eventID, batch, batch, d, hook, doomed, hook, keyID, keyID, doomed, hook, tenantID}, targets)

	page := e.do("GET", "/v1/audit?limit=4", key, nil)
	require.Len(t, page.Body["data"], 4)
	next := e.do("GET", "/v1/audit?limit=4&cursor="+page.Body["next_cursor"].(string), key, nil)
	require.Equal(t, "webhook.circuit_breaker_overridden", next.Body["data"].([]any)[0].(map[string]any)["action"])

	other := e.do("GET", "/v1/audit", otherKey, nil)
	ok(other, http.StatusOK)
	require.Len(t, other.Body["data"], 1, "the other tenant sees only its own creation")
	require.Equal(t, "tenant.created", other.Body["data"].([]any)[0].(map[string]any)["action"])
	require.Equal(t, http.StatusUnauthorized, e.do("GET", "/v1/audit", "", nil).Status)
}
