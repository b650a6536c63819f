package e2e

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/systemtest"
	"github.com/hookline/hookline/internal/testwait"
)

func TestDeliveryHistoryRoutes(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	rc := newReceiver(t, func(_ int, w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Webhook-Event") == "order.failed" {
			w.Header().Set("X-Reason", "nope")
			w.WriteHeader(http.StatusGone)
			_, _ = w.Write([]byte("gone for good"))
		}
	})
	hookID, _ := s.webhook(rc.URL, nil)
	start := time.Now().UTC()
	var ids []string
	for i := range 5 {
		ids = append(ids, s.deliveryOf(s.publish("order.created", map[string]any{"i": i})).String())
	}
	failed := s.deliveryOf(s.publish("order.failed", map[string]any{}))
	s.waitStatus(failed, "exhausted", 15*time.Second)
	testwait.Eventually(t, 15*time.Second, func() bool {
		return s.Count(`SELECT count(*) FROM deliveries WHERE status = 'succeeded'`) == 5
	}, "five successes")

	var page map[string]any
	s.call("GET", "/v1/webhooks/"+hookID+"/deliveries?limit=4", s.key, nil, http.StatusOK, &page)
	require.Len(t, page["data"], 4)
	next := page["next_cursor"].(string)
	require.NotEmpty(t, next)
	var page2 map[string]any
	s.call("GET", "/v1/webhooks/"+hookID+"/deliveries?limit=4&cursor="+next, s.key, nil, http.StatusOK, &page2)
	require.Len(t, page2["data"], 2)
	require.Empty(t, page2["next_cursor"])
	var seen []string
	for _, p := range []map[string]any{page, page2} {
		for _, d := range p["data"].([]any) {
			seen = append(seen, d.(map[string]any)["id"].(string))
		}
	}
	require.Equal(t, append(ids, failed.String()), seen)

	var onlyFailed map[string]any
	s.call("GET", "/v1/webhooks/"+hookID+"/deliveries?status=exhausted", s.key, nil, http.StatusOK, &onlyFailed)
	require.Len(t, onlyFailed["data"], 1)
	s.call("GET", "/v1/webhooks/"+hookID+"/deliveries?event_type=order.created", s.key, nil, http.StatusOK, &page)
	require.Len(t, page["data"], 5)
	s.call("GET", "/v1/webhooks/"+hookID+"/deliveries?from="+time.Now().Add(time.Hour).UTC().Format(time.RFC3339), s.key, nil, http.StatusOK, &page)
	require.Empty(t, page["data"])
	s.call("GET", "/v1/webhooks/"+hookID+"/deliveries?from="+start.Add(-time.Minute).Format(time.RFC3339)+"&to="+time.Now().Add(time.Minute).UTC().Format(time.RFC3339), s.key, nil, http.StatusOK, &page)
	require.Len(t, page["data"], 6)
	for _, q := range []string{"status=done", "from=yesterday", "event_type=a%20b", "limit=0"} {
		s.call("GET", "/v1/webhooks/"+hookID+"/deliveries?"+q, s.key, nil, http.StatusBadRequest, nil)
	}

	var d map[string]any
	s.call("GET", "/v1/deliveries/"+failed.String(), s.key, nil, http.StatusOK, &d)
	require.Equal(t, "exhausted", d["status"])
	require.Equal(t, 1.0, d["attempt_count"])
	require.Equal(t, 410.0, d["last_status_code"])
	require.Equal(t, hookID, d["webhook_id"])
	require.Nil(t, d["retry_of"])
	deadAt, err := time.Parse(time.RFC3339Nano, d["dead_lettered_at"].(string))
	require.NoError(t, err, "the dlq process recorded it: %v", d["dead_lettered_at"])
	completedAt, err := time.Parse(time.RFC3339Nano, d["completed_at"].(string))
	require.NoError(t, err)
	require.False(t, deadAt.Before(completedAt), "recorded from the DLQ after it was exhausted")
	attempts := d["attempts"].([]any)
	require.Len(t, attempts, 1)
	a := attempts[0].(map[string]any)
	require.Equal(t, 1.0, a["attempt_number"])
	require.Equal(t, 410.0, a["status_code"])
	require.Equal(t, "client_error", a["failure_category"])
	require.Equal(t, "gone for good", a["response_body_sample"])
	require.Equal(t, "nope", a["response_headers"].(map[string]any)["X-Reason"])
	require.Contains(t, a, "duration_ms")
	require.Contains(t, a, "executed_at")

	// Another tenant sees none of it.
	var other map[string]any
	s.call("POST", "/v1/tenants", systemtest.AdminToken, map[string]any{"name": "other"}, http.StatusCreated, &other)
	otherKey := other["api_key"].(string)
	s.call("GET", "/v1/deliveries/"+failed.String(), otherKey, nil, http.StatusNotFound, nil)
	s.call("GET", "/v1/webhooks/"+hookID+"/deliveries", otherKey, nil, http.StatusNotFound, nil)
	s.call("GET", "/v1/deliveries/not-an-id", s.key, nil, http.StatusNotFound, nil)
}
