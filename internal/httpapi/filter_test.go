package httpapi

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// A webhook's filter is set on create, replaced by PUT (and cleared when
// PUT leaves it out), changed by PATCH only when given, and shown by every
// answer that shows the webhook.
func TestWebhookFilterLifecycle(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	_, key := e.tenantKey("acme")

	plain := e.createWebhook(key, map[string]any{})
	require.Equal(t, "", plain["filter"])

	const expr = `data.amount > 100 && data.currency == "EUR"`
	w := e.createWebhook(key, map[string]any{"filter": "  " + expr + "\n"})
	require.Equal(t, expr, w["filter"], "surrounding spaces are dropped")
	path := "/v1/webhooks/" + w["id"].(string)

	r := e.do("GET", path, key, nil)
	require.Equal(t, http.StatusOK, r.Status)
	require.Equal(t, expr, r.Body["filter"])
	r = e.do("GET", "/v1/webhooks", key, nil)
	require.Equal(t, http.StatusOK, r.Status)
	filters := map[string]any{}
	for _, item := range r.Body["data"].([]any) {
		filters[item.(map[string]any)["id"].(string)] = item.(map[string]any)["filter"]
	}
	require.Equal(t, map[string]any{plain["id"].(string): "", w["id"].(string): expr}, filters)

	r = e.do("PATCH", path, key, map[string]any{"active": true})
	require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
	require.Equal(t, expr, r.Body["filter"], "a patch without filter keeps it")

	r = e.do("PATCH", path, key, map[string]any{"filter": `"vip" in data.tags`})
	require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
	require.Equal(t, `"vip" in data.tags`, r.Body["filter"])

	r = e.do("PATCH", path, key, map[string]any{"filter": `data.amount >`})
	require.Equal(t, http.StatusBadRequest, r.Status)
	r = e.do("GET", path, key, nil)
	require.Equal(t, `"vip" in data.tags`, r.Body["filter"], "a refused patch changes nothing")

	r = e.do("PATCH", path, key, map[string]any{"filter": ""})
	require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
	require.Equal(t, "", r.Body["filter"], "an empty filter removes it")

	r = e.do("PUT", path, key, map[string]any{"url": "https://8.8.8.8/hooks", "events": []string{"order.*"}, "filter": `has(data.customer)`})
	require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
	require.Equal(t, `has(data.customer)`, r.Body["filter"])
	r = e.do("PUT", path, key, map[string]any{"url": "https://8.8.8.8/hooks", "events": []string{"order.*"}})
	require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
	require.Equal(t, "", r.Body["filter"], "a replacement without filter has none")
}

// A filter that does not compile, is not a bool, names an unknown
// variable, is too long or too costly is refused with a 400 naming the
// field, and, where the problem has a place, its line and column.
func TestWebhookFilterRefused(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	_, key := e.tenantKey("acme")
	w := e.createWebhook(key, map[string]any{})
	path := "/v1/webhooks/" + w["id"].(string)

	tests := []struct {
		name, filter, message string
	}{
		{"syntax error", `data.amount >`, "filter: at 1:14: Syntax error"},
		{"syntax error on the second line", "data.a == 1 &&\n  (data.b == 2", "filter: at 2:15: Syntax error"},
		{"unknown variable", `amount > 100`, "filter: at 1:1: undeclared reference to 'amount'"},
		{"not a bool", `data.amount + 1.0`, "filter: at 1:1: must be a boolean expression, but has type double"},
		{"wrong types", `source > 1`, "filter: at 1:8: found no matching overload for '_>_' applied to '(string, int)'"},
		{"too long", `data.a == "` + strings.Repeat("x", 4100) + `"`, "filter: must be at most 4096 bytes"},
		{"too costly", `data.a.all(x, data.b.all(y, x != y))`, "filter: is too costly"},
		{"NUL", "data.a == \"\x00\"", "filter: must not contain NUL"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := e.forTest(t)
			for _, r := range []resp{
				e.do("POST", "/v1/webhooks", key, map[string]any{"url": "https://8.8.8.8/hooks", "events": []string{"*"}, "filter": tc.filter}),
				e.do("PUT", path, key, map[string]any{"url": "https://8.8.8.8/hooks", "events": []string{"*"}, "filter": tc.filter}),
				e.do("PATCH", path, key, map[string]any{"filter": tc.filter}),
			} {
				require.Equal(t, http.StatusBadRequest, r.Status, string(r.Raw))
				require.Equal(t, "invalid_request", r.errCode())
				require.Equal(t, "filter", r.errField())
				msg := r.Body["error"].(map[string]any)["message"].(string)
				require.True(t, strings.HasPrefix(msg, tc.message), msg)
			}
		})
	}
	r := e.do("POST", "/v1/webhooks", key, map[string]any{"url": "https://8.8.8.8/hooks", "events": []string{"*"}, "filter": 5})
	require.Equal(t, http.StatusBadRequest, r.Status)
	require.Equal(t, "filter", r.errField())
	require.Equal(t, 1, e.count(`SELECT count(*) FROM webhooks`), "nothing refused was stored")
}

// The answer of a publish counts only the webhooks whose filter matched;
// a filter failing on the event does not fail the publish; a filter
// changed by PATCH applies from the next publish.
func TestPublishCountsOnlyMatchingWebhooks(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	_, key := e.tenantKey("acme")
	e.createWebhook(key, map[string]any{"events": []string{"order.*"}})
	amount := e.createWebhook(key, map[string]any{"events": []string{"order.*"}, "filter": `data.amount > 100 && data.currency == "EUR"`})
	e.createWebhook(key, map[string]any{"events": []string{"order.*"}, "filter": `data.customer.tier == "gold"`})
	publish := func(data string, deliveries float64) {
		t.Helper()
		r := e.do("POST", "/v1/events", key, `{"event_type": "order.created", "data": `+data+`}`)
		require.Equal(t, http.StatusAccepted, r.Status, string(r.Raw))
		require.Equal(t, deliveries, r.Body["deliveries"], data)
		require.Equal(t, int(deliveries), e.count(`SELECT count(*) FROM deliveries WHERE event_id = $1`, r.Body["id"]))
	}
	publish(`{"amount": 150, "currency": "EUR", "customer": {"tier": "gold"}}`, 3)
	publish(`{"amount": 150, "currency": "EUR"}`, 2)
	publish(`{"amount": 15, "currency": "EUR", "customer": {"tier": "silver"}}`, 1)

	// A PATCH applies from the next publish.
	r := e.do("PATCH", "/v1/webhooks/"+amount["id"].(string), key, map[string]any{"filter": `data.amount < 100`})
	require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
	publish(`{"amount": 15, "currency": "EUR", "customer": {"tier": "silver"}}`, 2)
	publish(`{"amount": 150, "currency": "EUR"}`, 1)
}

// seedExhausted stores an event with data and an exhausted delivery of it
// to hook, and returns the delivery id.
func (e *apiEnv) seedExhausted(tenantID, hook, data string) string {
	e.t.Helper()
	var id string
	require.NoError(e.t, e.pool.QueryRow(context.Background(), `WITH ev AS (
    INSERT INTO events (id, tenant_id, event_type, idempotency_key, request_hash, priority, data)
    VALUES (uuidv7(), $1, 'order.created', 'seed-' || gen_random_uuid(), '\x00', 'normal', $3::json)
    RETURNING id, tenant_id, created_at)
INSERT INTO deliveries (id, tenant_id, event_id, webhook_id, status, priority, attempt_count, failure_category,
    last_status_code, completed_at, created_at)
SELECT uuidv7(), tenant_id, id, $2, 'exhausted', 'normal', 5, 'server_error', 500, now(), created_at FROM ev
RETURNING id::text`, tenantID, hook, data).Scan(&id))
	return id
}

// A single retry goes by the webhook's filter as it is now: one that no
// longer lets the event through (false, or failing on it) is refused with
// 409 filtered_out and creates nothing; once the filter matches again, the
// retry is made.
func TestRetryHonoursTheCurrentFilter(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	tenantID, key := e.tenantKey("acme")
	hook := e.createWebhook(key, map[string]any{})["id"].(string)
	d := e.seedExhausted(tenantID, hook, `{"amount": 5, "currency": "EUR"}`)
	retry := func() resp { return e.do("POST", "/v1/webhooks/"+hook+"/deliveries/"+d+"/retry", key, nil) }
	patch := func(filter string) {
		r := e.do("PATCH", "/v1/webhooks/"+hook, key, map[string]any{"filter": filter})
		require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
	}

	for _, refusing := range []string{`data.amount > 100`, `data.customer.tier == "gold"`, `data.currency > 1`} {
		patch(refusing)
		r := retry()
		require.Equal(t, http.StatusConflict, r.Status, "%s: %s", refusing, r.Raw)
		require.Equal(t, "filtered_out", r.errCode())
	}
	require.Equal(t, 1, e.count(`SELECT count(*) FROM deliveries WHERE webhook_id = $1`, hook), "nothing created")

	patch(`data.amount < 100 && data.currency == "EUR"`)
	r := retry()
	require.Equal(t, http.StatusAccepted, r.Status, string(r.Raw))
	require.Equal(t, d, r.Body["retry_of"])
}

// A replay fans out like a publish, by the filters as they are now; a
// replay to one webhook ignores its event types but not its filter.
func TestReplayHonoursTheCurrentFilters(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	_, key := e.tenantKey("acme")
	hook := func(events []string, filter string) string {
		return e.createWebhook(key, map[string]any{"events": events, "filter": filter})["id"].(string)
	}
	all := hook([]string{"order.*"}, "")
	big := hook([]string{"order.*"}, `data.amount > 100`)
	small := hook([]string{"order.*"}, `data.amount < 100`)
	invoices := hook([]string{"invoice.*"}, `data.amount > 100`)

	r := e.do("POST", "/v1/events", key, map[string]any{"event_type": "order.created", "data": map[string]any{"amount": 500}})
	require.Equal(t, http.StatusAccepted, r.Status, string(r.Raw))
	eventID := r.Body["id"].(string)
	require.ElementsMatch(t, []string{all, big}, e.receivers(eventID))

	for h, filter := range map[string]string{big: `data.amount < 100`, small: `data.amount > 100`} {
		require.Equal(t, http.StatusOK, e.do("PATCH", "/v1/webhooks/"+h, key, map[string]any{"filter": filter}).Status)
	}
	r = e.do("POST", "/v1/events/"+eventID+"/replay", key, nil)
	require.Equal(t, http.StatusAccepted, r.Status, string(r.Raw))
	require.Equal(t, 2.0, r.Body["deliveries"])
	require.ElementsMatch(t, []string{all, small}, e.receivers(r.Body["id"].(string)))

	r = e.do("POST", "/v1/events/"+eventID+"/replay", key, map[string]any{"webhook_id": big})
	require.Equal(t, http.StatusConflict, r.Status, string(r.Raw))
	require.Equal(t, "filtered_out", r.errCode())
	r = e.do("POST", "/v1/events/"+eventID+"/replay", key, map[string]any{"webhook_id": invoices})
	require.Equal(t, http.StatusAccepted, r.Status, string(r.Raw))
	require.ElementsMatch(t, []string{invoices}, e.receivers(r.Body["id"].(string)), "event types do not decide a targeted replay")
}

// receivers returns the webhooks the event has deliveries to.
func (e *apiEnv) receivers(eventID string) []string {
	e.t.Helper()
	rows, err := e.pool.Query(context.Background(), `SELECT webhook_id::text FROM deliveries WHERE event_id = $1`, eventID)
	require.NoError(e.t, err)
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(e.t, err)
	return out
}
