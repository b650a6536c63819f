package httpapi

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// items returns the results of a batch answer, one per event.
func (r resp) items(t *testing.T) []map[string]any {
	t.Helper()
	raw, ok := r.Body["data"].([]any)
	require.True(t, ok, string(r.Raw))
	out := make([]map[string]any, len(raw))
	for i, v := range raw {
		out[i] = v.(map[string]any)
	}
	return out
}

// One request with an accepted event, a replay of an earlier one, a
// conflicting key, an invalid event, one over the payload limit, and a key
// repeated inside the batch: each is answered alone, in order, and the
// accepted ones are stored with their deliveries.
func TestPublishBatchAnswersEachEventInOrder(t *testing.T) {
	t.Parallel()
	e := newAPI(t, func(o *apiOptions) { o.cfg.API.MaxPayloadBytes = 1024 })
	tenantID, key := e.tenantKey("batch")
	e.createWebhook(key, map[string]any{"events": []string{"order.*"}})
	first := e.publish(key, map[string]any{"event_type": "order.created", "data": map[string]any{"n": 0}, "idempotency_key": "k0"})
	require.Equal(t, http.StatusAccepted, first.Status, string(first.Raw))

	big := strings.Repeat("x", 2000)
	r := e.do("POST", "/v1/events/batch", key, map[string]any{"events": []any{
		map[string]any{"event_type": "order.created", "data": map[string]any{"n": 1}, "idempotency_key": "k1"},
		map[string]any{"event_type": "order.created", "data": map[string]any{"n": 0}, "idempotency_key": "k0"},
		map[string]any{"event_type": "order.created", "data": map[string]any{"n": 99}, "idempotency_key": "k0"},
		map[string]any{"data": map[string]any{"n": 3}},
		map[string]any{"event_type": "order.created", "data": map[string]any{"big": big}},
		map[string]any{"event_type": "order.paid", "data": map[string]any{"n": 5}, "idempotency_key": "k5", "priority": "high"},
		map[string]any{"event_type": "order.paid", "data": map[string]any{"n": 5}, "idempotency_key": "k5", "priority": "high"},
		map[string]any{"event_type": "user.created", "data": map[string]any{"n": 7}},
	}})
	require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
	items := r.items(t)
	require.Len(t, items, 8)

	status := make([]int, len(items))
	for i, it := range items {
		status[i] = int(it["status"].(float64))
	}
	require.Equal(t, []int{202, 200, 422, 400, 413, 202, 200, 202}, status, string(r.Raw))

	ev := func(i int) map[string]any { return items[i]["event"].(map[string]any) }
	errCode := func(i int) string { return items[i]["error"].(map[string]any)["code"].(string) }
	require.Equal(t, "k1", ev(0)["idempotency_key"])
	require.EqualValues(t, 1, ev(0)["deliveries"])
	require.Equal(t, first.Body["id"], ev(1)["id"], "the replay answers the original event")
	require.Equal(t, "idempotency_conflict", errCode(2))
	require.Equal(t, "invalid_request", errCode(3))
	require.Equal(t, "event_type", items[3]["error"].(map[string]any)["field"])
	require.Equal(t, "payload_too_large", errCode(4))
	require.Equal(t, "high", ev(5)["priority"])
	require.Equal(t, ev(5)["id"], ev(6)["id"], "a key repeated within the batch is one event")
	require.EqualValues(t, 0, ev(7)["deliveries"], "no webhook takes user.*")
	for _, i := range []int{0, 1, 5, 7} {
		require.NotContains(t, items[i], "error")
	}
	for _, i := range []int{2, 3, 4} {
		require.NotContains(t, items[i], "event")
	}

	require.Equal(t, 4, e.count(`SELECT count(*) FROM events WHERE tenant_id = $1`, tenantID), "k0, k1, k5 and the keyless one")
	require.Equal(t, 3, e.count(`SELECT count(*) FROM deliveries WHERE tenant_id = $1`, tenantID))
	var inOne int
	require.NoError(t, e.pool.QueryRow(t.Context(),
		`SELECT count(DISTINCT xmin::text) FROM events WHERE tenant_id = $1 AND idempotency_key <> 'k0'`, tenantID).Scan(&inOne))
	require.Equal(t, 1, inOne, "the accepted events of one batch are committed by one transaction")
}

// A batch over 500 events or over 5 MiB is refused whole with 413, and a
// body that is not a batch with 400; none stores anything.
func TestPublishBatchLimits(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	tenantID, key := e.tenantKey("limits")
	event := `{"event_type":"order.created","data":{"n":1}}`

	many := `{"events":[` + strings.TrimSuffix(strings.Repeat(event+",", 501), ",") + `]}`
	r := e.do("POST", "/v1/events/batch", key, many)
	require.Equal(t, http.StatusRequestEntityTooLarge, r.Status, string(r.Raw))
	require.Equal(t, "payload_too_large", r.errCode())
	require.Contains(t, r.Body["error"].(map[string]any)["message"], "500")

	// 24 events of 220 KiB each: every one under the payload limit, the
	// whole over 5 MiB.
	fat := fmt.Sprintf(`{"event_type":"order.created","data":{"pad":%q}}`, strings.Repeat("p", 220<<10))
	huge := `{"events":[` + strings.TrimSuffix(strings.Repeat(fat+",", 24), ",") + `]}`
	require.Greater(t, len(huge), 5<<20)
	r = e.do("POST", "/v1/events/batch", key, huge)
	require.Equal(t, http.StatusRequestEntityTooLarge, r.Status, string(r.Raw))
	require.Equal(t, "payload_too_large", r.errCode())

	for _, body := range []string{`{"events":[]}`, `{}`, `[]`, `{"events":[` + event + `],"extra":1}`, `{"events":{}}`} {
		r = e.do("POST", "/v1/events/batch", key, body)
		require.Equal(t, http.StatusBadRequest, r.Status, body+": "+string(r.Raw))
	}
	r = e.do("POST", "/v1/events/batch", key, `{"events":[`+event+`]}`, "Idempotency-Key", "whole")
	require.Equal(t, http.StatusBadRequest, r.Status, string(r.Raw))

	require.Equal(t, 0, e.count(`SELECT count(*) FROM events WHERE tenant_id = $1`, tenantID))

	// 500 events exactly, just under the limit, are taken.
	full := `{"events":[` + strings.TrimSuffix(strings.Repeat(event+",", 500), ",") + `]}`
	r = e.do("POST", "/v1/events/batch", key, full)
	require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
	require.Len(t, r.items(t), 500)
	require.Equal(t, 500, e.count(`SELECT count(*) FROM events WHERE tenant_id = $1`, tenantID))
}

// The batch route takes the publish scope of a service key, like
// POST /v1/events, and another tenant's key is refused before anything
// is read.
func TestPublishBatchAuthentication(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	body := `{"events":[{"event_type":"order.created","data":{}}]}`
	r := e.do("POST", "/v1/events/batch", "", body)
	require.Equal(t, http.StatusUnauthorized, r.Status)
	tenantID, _ := e.tenantKey("svc")
	_, svc := e.serviceKey(map[string]any{"scopes": []string{"publish"}})
	_, reader := e.serviceKey(map[string]any{"scopes": []string{"read"}})
	r = e.do("POST", "/v1/events/batch", reader, body, TenantHeader, tenantID)
	require.Equal(t, http.StatusForbidden, r.Status, string(r.Raw))
	r = e.do("POST", "/v1/events/batch", svc, body, TenantHeader, tenantID)
	require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
	require.EqualValues(t, 202, r.items(t)[0]["status"])
}
