package httpapi

import (
	"context"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// seedDelivery stores an event and one delivery of it to hook in the given
// state (exhausted ones with a category, exhausted at completedAt), and
// returns the delivery id.
func (e *apiEnv) seedDelivery(tenantID, hook, eventType, status, category string, completedAt time.Time) string {
	e.t.Helper()
	var id string
	require.NoError(e.t, e.pool.QueryRow(context.Background(), `WITH ev AS (
    INSERT INTO events (id, tenant_id, event_type, idempotency_key, request_hash, priority, data)
    VALUES (uuidv7(), $1, $3, 'seed-' || gen_random_uuid(), '\x00', 'normal', '{"n": 1}')
    RETURNING id, tenant_id, created_at)
INSERT INTO deliveries (id, tenant_id, event_id, webhook_id, status, priority, attempt_count, failure_category,
    last_status_code, completed_at, created_at)
SELECT uuidv7(), tenant_id, id, $2, $4, 'normal', 1, nullif($5, ''), 500,
    CASE WHEN $4 IN ('exhausted', 'succeeded') THEN $6::timestamptz END, created_at FROM ev
RETURNING id::text`, tenantID, hook, eventType, status, category, completedAt).Scan(&id))
	return id
}

func ids(r resp) []string {
	var out []string
	for _, d := range r.Body["data"].([]any) {
		out = append(out, d.(map[string]any)["id"].(string))
	}
	return out
}

func TestDLQListFiltersAndPages(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	tenantID, key := e.tenantKey("acme")
	a := e.createWebhook(key, map[string]any{})["id"].(string)
	b := e.createWebhook(key, map[string]any{})["id"].(string)
	early := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	late := early.Add(2 * time.Hour)
	d1 := e.seedDelivery(tenantID, a, "order.created", "exhausted", "server_error", early)
	d2 := e.seedDelivery(tenantID, a, "order.paid", "exhausted", "timeout", late)
	d3 := e.seedDelivery(tenantID, b, "order.created", "exhausted", "", late) // a poison message: no category
	e.seedDelivery(tenantID, a, "order.created", "succeeded", "", late)
	e.seedDelivery(tenantID, a, "order.created", "retrying", "server_error", late)
	otherTenant, otherKey := e.tenantKey("other")
	o := e.createWebhook(otherKey, map[string]any{})["id"].(string)
	e.seedDelivery(otherTenant, o, "order.created", "exhausted", "server_error", late)
	// Created last, exhausted first: the DLQ is in the order of exhaustion.
	d0 := e.seedDelivery(tenantID, b, "order.paid", "exhausted", "timeout", early.Add(-time.Hour))

	list := func(query string) resp {
		r := e.do("GET", "/v1/dlq"+query, key, nil)
		require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
		return r
	}
	require.Equal(t, []string{d0, d1, d2, d3}, ids(list("")),
		"only the tenant's exhausted deliveries, first exhausted first, then by id")
	require.Equal(t, []string{d1, d2}, ids(list("?webhook_id="+a)))
	require.Equal(t, []string{d0, d1, d2, d3}, ids(list("?webhook_id="+a+","+b)))
	require.Equal(t, []string{d1, d3}, ids(list("?event_type=order.created")))
	require.Equal(t, []string{d0, d2}, ids(list("?failure_category=timeout")))
	require.Equal(t, []string{d1, d3}, ids(list("?failure_category=server_error&failure_category=unknown")))
	require.Equal(t, []string{d2, d3}, ids(list("?from="+url.QueryEscape(early.Add(time.Hour).Format(time.RFC3339)))))
	require.Equal(t, []string{d0, d1}, ids(list("?to="+url.QueryEscape(early.Add(time.Hour).Format(time.RFC3339)))))

	var paged []string
	cursor := ""
	for pages := 0; pages < 4; pages++ {
		page := list("?limit=1" + cursor)
		paged = append(paged, ids(page)...)
		next, _ := page.Body["next_cursor"].(string)
		if next == "" {
			break
		}
		cursor = "&cursor=" + next
	}
	require.Equal(t, []string{d0, d1, d2, d3}, paged, "pages of one follow the order of exhaustion")

	counts := e.do("GET", "/v1/dlq/counts", key, nil)
	require.Equal(t, http.StatusOK, counts.Status)
	require.Equal(t, 4.0, counts.Body["total"])
	require.Equal(t, map[string]any{"server_error": 1.0, "timeout": 2.0, "unknown": 1.0}, counts.Body["by_category"])
	counts = e.do("GET", "/v1/dlq/counts?webhook_id="+a, key, nil)
	require.Equal(t, 2.0, counts.Body["total"])

	for _, bad := range []struct{ query, field string }{
		{"?webhook_id=nope", "webhook_id"},
		{"?failure_category=meteor", "failure_categories[0]"},
		{"?event_type=bad%20type", "event_types[0]"},
		{"?from=yesterday", "from"},
		{"?from=2026-01-02T00:00:00Z&to=2026-01-01T00:00:00Z", "to"},
		{"?include_retried=maybe", "include_retried"},
		{"?limit=0", "limit"},
	} {
		r := e.do("GET", "/v1/dlq"+bad.query, key, nil)
		require.Equal(t, http.StatusBadRequest, r.Status, bad.query)
		require.Equal(t, bad.field, r.errField(), bad.query)
	}
	require.Equal(t, http.StatusUnauthorized, e.do("GET", "/v1/dlq", "", nil).Status)
}

func TestRetryDeliveryRefusals(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	tenantID, key := e.tenantKey("acme")
	hook := e.createWebhook(key, map[string]any{})["id"].(string)
	now := time.Now()
	exhausted := e.seedDelivery(tenantID, hook, "order.created", "exhausted", "server_error", now)
	pending := e.seedDelivery(tenantID, hook, "order.created", "pending", "", now)
	retry := func(hook, id string, body any) resp {
		return e.do("POST", "/v1/webhooks/"+hook+"/deliveries/"+id+"/retry", key, body)
	}

	r := retry(hook, pending, nil)
	require.Equal(t, http.StatusConflict, r.Status)
	require.Equal(t, "not_exhausted", r.errCode())
	r = retry(hook, exhausted, map[string]any{"priority": "urgent"})
	require.Equal(t, http.StatusBadRequest, r.Status)
	require.Equal(t, "priority", r.errField())
	r = retry(hook, exhausted, map[string]any{"priority": "high", "extra": 1})
	require.Equal(t, http.StatusBadRequest, r.Status)

	r = retry(hook, exhausted, nil)
	require.Equal(t, http.StatusAccepted, r.Status, string(r.Raw))
	newID := r.Body["delivery_id"].(string)
	require.Equal(t, exhausted, r.Body["retry_of"])
	require.Equal(t, 1, e.count(`SELECT count(*) FROM deliveries WHERE id = $1 AND retry_of = $2 AND status = 'pending' AND priority = 'normal'`,
		newID, exhausted))
	r = retry(hook, exhausted, nil)
	require.Equal(t, http.StatusConflict, r.Status, "a retry is in flight")
	require.Equal(t, "retry_in_flight", r.errCode())

	other := e.createWebhook(key, map[string]any{})["id"].(string)
	require.Equal(t, http.StatusNotFound, retry(other, exhausted, nil).Status, "the delivery is not this webhook's")
	_, otherKey := e.tenantKey("other")
	r = e.do("POST", "/v1/webhooks/"+hook+"/deliveries/"+exhausted+"/retry", otherKey, nil)
	require.Equal(t, http.StatusNotFound, r.Status, "nor this tenant's")

	second := e.seedDelivery(tenantID, hook, "order.created", "exhausted", "timeout", now)
	require.Equal(t, http.StatusOK, e.do("PATCH", "/v1/webhooks/"+hook, key, map[string]any{"active": false}).Status)
	r = retry(hook, second, nil)
	require.Equal(t, http.StatusConflict, r.Status)
	require.Equal(t, "webhook_inactive", r.errCode())
	require.Equal(t, http.StatusOK, e.do("PATCH", "/v1/webhooks/"+hook, key, map[string]any{"active": true}).Status)
	_, err := e.pool.Exec(context.Background(), `UPDATE events SET data = NULL WHERE id = (SELECT event_id FROM deliveries WHERE id = $1)`, second)
	require.NoError(t, err)
	r = retry(hook, second, nil)
	require.Equal(t, http.StatusConflict, r.Status)
	require.Equal(t, "payload_pruned", r.errCode())
}

func TestBatchOperationRoutes(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	_, key := e.tenantKey("acme")
	hook := e.createWebhook(key, map[string]any{})["id"].(string)
	start := func(body any) resp { return e.do("POST", "/v1/dlq/retry-batch", key, body) }
	rate := map[string]any{"requests_per_second": 50}

	for _, bad := range []struct {
		body  map[string]any
		field string
	}{
		{map[string]any{"rate_limit": rate}, "filter"},
		{map[string]any{"filter": map[string]any{}, "rate_limit": rate}, "filter"},
		{map[string]any{"filter": map[string]any{"webhook_ids": []string{hook}}}, "rate_limit.requests_per_second"},
		{map[string]any{"filter": map[string]any{"webhook_ids": []string{hook}}, "rate_limit": map[string]any{"requests_per_second": 0}}, "rate_limit.requests_per_second"},
		{map[string]any{"filter": map[string]any{"failure_categories": []string{"meteor"}}, "rate_limit": rate}, "filter.failure_categories[0]"},
		{map[string]any{"filter": map[string]any{"webhook_ids": []string{hook}}, "rate_limit": rate, "priority": "now"}, "priority"},
		{map[string]any{"filter": map[string]any{"webhook_ids": []string{hook}, "colour": "red"}, "rate_limit": rate}, "filter.colour"},
		{map[string]any{"filter": map[string]any{"webhook_ids": []string{"nope"}}, "rate_limit": rate}, ""},
	} {
		r := start(bad.body)
		require.Equal(t, http.StatusBadRequest, r.Status, "%v: %s", bad.body, r.Raw)
		if bad.field != "" {
			require.Equal(t, bad.field, r.errField(), "%v", bad.body)
		}
	}
	require.Zero(t, e.count(`SELECT count(*) FROM batch_operations`), "nothing stored for a refused batch")

	r := start(map[string]any{"filter": map[string]any{"webhook_ids": []string{hook}, "from": "2026-01-01T00:00:00Z"}, "rate_limit": rate})
	require.Equal(t, http.StatusAccepted, r.Status, string(r.Raw))
	id := r.Body["batch_operation_id"].(string)
	got := e.do("GET", "/v1/dlq/batch-operations/"+id, key, nil)
	require.Equal(t, http.StatusOK, got.Status)
	require.Equal(t, "pending", got.Body["state"])
	require.Equal(t, 50.0, got.Body["requests_per_second"])
	require.Equal(t, "normal", got.Body["priority"])
	require.Equal(t, map[string]any{"webhook_ids": []any{hook}, "from": "2026-01-01T00:00:00Z"}, got.Body["filter"])
	for _, k := range []string{"total", "processed", "succeeded", "failed", "created_at", "started_at", "finished_at"} {
		require.Contains(t, got.Body, k)
	}

	_, otherKey := e.tenantKey("other")
	require.Equal(t, http.StatusNotFound, e.do("GET", "/v1/dlq/batch-operations/"+id, otherKey, nil).Status)
	require.Equal(t, http.StatusNotFound, e.do("POST", "/v1/dlq/batch-operations/"+id+"/cancel", otherKey, nil).Status)

	list := e.do("GET", "/v1/dlq/batch-operations", key, nil)
	require.Equal(t, []string{id}, ids(list))

	c := e.do("POST", "/v1/dlq/batch-operations/"+id+"/cancel", key, nil)
	require.Equal(t, http.StatusOK, c.Status)
	require.Equal(t, "cancelled", c.Body["state"])
	require.NotNil(t, c.Body["finished_at"])
	c = e.do("POST", "/v1/dlq/batch-operations/"+id+"/cancel", key, nil)
	require.Equal(t, http.StatusConflict, c.Status)
	require.Equal(t, "batch_finished", c.errCode())
}

func TestReplayRefusals(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	tenantID, key := e.tenantKey("acme")
	hook := e.createWebhook(key, map[string]any{})["id"].(string)
	d := e.seedDelivery(tenantID, hook, "order.created", "succeeded", "", time.Now())
	var eventID string
	require.NoError(t, e.pool.QueryRow(context.Background(), `SELECT event_id::text FROM deliveries WHERE id = $1`, d).Scan(&eventID))
	replay := func(body any) resp { return e.do("POST", "/v1/events/"+eventID+"/replay", key, body) }

	r := replay(map[string]any{"webhook_id": "nope"})
	require.Equal(t, http.StatusBadRequest, r.Status)
	require.Equal(t, "webhook_id", r.errField())
	_, otherKey := e.tenantKey("other")
	otherHook := e.createWebhook(otherKey, map[string]any{})["id"].(string)
	r = replay(map[string]any{"webhook_id": otherHook})
	require.Equal(t, http.StatusBadRequest, r.Status, "another tenant's webhook is unknown here")
	require.Equal(t, http.StatusNotFound, e.do("POST", "/v1/events/"+eventID+"/replay", otherKey, nil).Status)

	require.Equal(t, http.StatusOK, e.do("PATCH", "/v1/webhooks/"+hook, key, map[string]any{"active": false}).Status)
	r = replay(map[string]any{"webhook_id": hook})
	require.Equal(t, http.StatusConflict, r.Status)
	require.Equal(t, "webhook_inactive", r.errCode())

	r = replay(nil)
	require.Equal(t, http.StatusAccepted, r.Status, "replaying to nobody subscribed is not an error")
	require.Equal(t, 0.0, r.Body["deliveries"])
	require.Equal(t, eventID, r.Body["replay_of"])

	_, err := e.pool.Exec(context.Background(), `UPDATE events SET data = NULL WHERE id = $1`, eventID)
	require.NoError(t, err)
	r = replay(nil)
	require.Equal(t, http.StatusConflict, r.Status)
	require.Equal(t, "payload_pruned", r.errCode())
	require.Equal(t, 2, e.count(`SELECT count(*) FROM events WHERE tenant_id = $1`, tenantID), "nothing half-written")
}

// Replays draw from the tenant's publish limit like publishing does: with
// a limit of 2 a second, burst 2, the third replay in a row is refused
// with Retry-After and creates nothing.
func TestReplaysCountAgainstThePublishLimit(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	r := e.do("POST", "/v1/tenants", testAdminToken, map[string]any{"name": "acme",
		"publish_rate_limit": map[string]any{"requests_per_second": 2, "burst": 2}})
	require.Equal(t, http.StatusCreated, r.Status, string(r.Raw))
	tenantID, key := r.Body["id"].(string), r.Body["api_key"].(string)
	hook := e.createWebhook(key, map[string]any{})["id"].(string)
	d := e.seedDelivery(tenantID, hook, "order.created", "succeeded", "", time.Now())
	var eventID string
	require.NoError(t, e.pool.QueryRow(context.Background(), `SELECT event_id::text FROM deliveries WHERE id = $1`, d).Scan(&eventID))
	events := e.count(`SELECT count(*) FROM events`)
	statuses := make([]int, 3)
	for i := range statuses {
		res := e.do("POST", "/v1/events/"+eventID+"/replay", key, nil)
		statuses[i] = res.Status
		if res.Status == http.StatusTooManyRequests {
			require.Equal(t, "rate_limited", res.errCode())
			require.NotEmpty(t, res.Header.Get("Retry-After"))
		}
	}
	require.Equal(t, []int{http.StatusAccepted, http.StatusAccepted, http.StatusTooManyRequests}, statuses)
	require.Equal(t, events+2, e.count(`SELECT count(*) FROM events`))
}
