package console_test

import (
	"bytes"
	"context"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/history"
)

// A tenant sees only its own objects: another tenant's webhook, delivery,
// event and batch are 404 pages, to look at or to act on, and nothing of
// them shows on its lists.
func TestTenantIsolation(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	aID, aKey := e.Tenant("alpha")
	_, bKey := e.Tenant("beta")
	aHook := e.webhook(aKey, "http://127.0.0.1:1/alpha-only", nil)
	aDead := e.seed(aID, aHook, 1, "order.created", "exhausted")[0]
	var aEvent uuid.UUID
	require.NoError(t, e.Pool.QueryRow(context.Background(), `SELECT event_id FROM deliveries WHERE id = $1`, aDead).Scan(&aEvent))
	status, batch := e.call("POST", "/v1/dlq/retry-batch", aKey, map[string]any{
		"filter": map[string]any{"webhook_ids": []string{aHook.String()}}, "rate_limit": map[string]any{"requests_per_second": 1}})
	require.Equal(t, http.StatusAccepted, status, batch)
	aBatch := batch["batch_operation_id"].(string)

	b := e.client()
	b.signIn(bKey)
	for _, path := range []string{"/console/webhooks/" + aHook.String(), "/console/deliveries/" + aDead.String(),
		"/console/webhooks/not-a-uuid", "/console/deliveries/" + uuid.NewString()} {
		p := b.get(path)
		require.Equal(t, http.StatusNotFound, p.Status, path)
		require.Contains(t, p.Body, "no such page")
		require.NotContains(t, p.Body, "alpha-only")
	}
	posts := map[string]url.Values{
		"/console/deliveries/" + aDead.String() + "/retry":         {},
		"/console/webhooks/" + aHook.String() + "/circuit-breaker": {"action": {"force_open"}},
		"/console/events/" + aEvent.String() + "/replay":           {},
		"/console/dlq/batches/" + aBatch + "/cancel":               {},
	}
	for path, form := range posts {
		require.Equal(t, http.StatusNotFound, b.post(path, form).Status, path)
	}
	// Naming A's webhook in B's replay or batch does not reach it either.
	var bEvent string
	bHook := e.webhook(bKey, "http://127.0.0.1:1/beta", nil)
	status, pub := e.call("POST", "/v1/events", bKey, map[string]any{"event_type": "order.created", "data": map[string]any{}})
	require.Equal(t, http.StatusAccepted, status, pub)
	bEvent = pub["id"].(string)
	require.Equal(t, http.StatusNotFound, b.post("/console/events/"+bEvent+"/replay", url.Values{"webhook_id": {aHook.String()}}).Status)
	p := b.post("/console/dlq/batches", url.Values{"webhook_id": {aHook.String()}, "requests_per_second": {"5"}})
	require.Equal(t, http.StatusSeeOther, p.Status, p.Body)

	require.Zero(t, e.Count(`SELECT count(*) FROM deliveries WHERE retry_of IS NOT NULL`))
	require.Zero(t, e.Count(`SELECT count(*) FROM circuit_breaker_states`))
	require.Equal(t, 1, e.Count(`SELECT count(*) FROM events WHERE replay_of IS NOT NULL OR tenant_id = $1`, aID))
	require.Equal(t, "pending", batchState(e, aBatch))

	for _, path := range []string{"/console/webhooks", "/console/dlq", "/console/audit"} {
		p := b.get(path)
		require.Equal(t, http.StatusOK, p.Status, path)
		require.NotContains(t, p.Body, "alpha-only", path)
		require.NotContains(t, p.Body, aDead.String(), path)
		require.NotContains(t, p.Body, aBatch, path)
	}
	require.Contains(t, b.get("/console/webhooks").Body, bHook.String())
}

func batchState(e *env, id string) string {
	var s string
	require.NoError(e.t, e.Pool.QueryRow(context.Background(), `SELECT state FROM batch_operations WHERE id = $1`, id).Scan(&s))
	return s
}

var deliveryLink = regexp.MustCompile(`<td[^>]*><a href="/console/deliveries/([0-9a-f-]{36})"`)

func deliveryIDs(body string) []uuid.UUID {
	var out []uuid.UUID
	for _, m := range deliveryLink.FindAllStringSubmatch(body, -1) {
		out = append(out, uuid.MustParse(m[1]))
	}
	return out
}

var olderLink = regexp.MustCompile(`<a href="([^"]+)">Older</a>`)

// The history pages through a webhook's deliveries newest first, 50 at a
// time, with a cursor; filters narrow it and the cursor keeps them.
func TestHistoryPagination(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tenantID, key := e.Tenant("acme")
	hook := e.webhook(key, "http://127.0.0.1:1/hook", nil)
	// The 30 oldest a day ago, for the time filters.
	all := e.seedAt(tenantID, hook, 30, "order.created", "succeeded", -24*time.Hour)
	for i := 0; i < 3; i++ {
		all = append(all, e.seed(tenantID, hook, 25, "order.created", "succeeded")...)
		all = append(all, e.seed(tenantID, hook, 5, "invoice.paid", "exhausted")...)
	}
	slices.SortFunc(all, func(a, b uuid.UUID) int { return bytes.Compare(b[:], a[:]) }) // newest first
	c := e.client()
	c.signIn(key)

	var seen []uuid.UUID
	path := "/console/webhooks/" + hook.String()
	for pages := 0; path != ""; pages++ {
		require.Less(t, pages, 3)
		p := c.get(path)
		require.Equal(t, http.StatusOK, p.Status, p.Body)
		ids := deliveryIDs(p.Body)
		require.LessOrEqual(t, len(ids), 50)
		seen = append(seen, ids...)
		path = ""
		if m := olderLink.FindStringSubmatch(p.Body); m != nil {
			path = strings.ReplaceAll(m[1], "&amp;", "&")
			require.Len(t, ids, 50)
		}
	}
	require.Equal(t, all, seen)

	// Filtered by state and event type, across pages.
	p := c.get("/console/webhooks/" + hook.String() + "?state=exhausted")
	ids := deliveryIDs(p.Body)
	require.Len(t, ids, 15)
	require.NotContains(t, p.Body, "Older")
	require.Equal(t, 15, e.Count(`SELECT count(*) FROM deliveries WHERE id = ANY($1) AND status = 'exhausted'`, ids))
	p = c.get("/console/webhooks/" + hook.String() + "?event_type=order.created")
	require.Len(t, deliveryIDs(p.Body), 50)
	m := olderLink.FindStringSubmatch(p.Body)
	require.NotNil(t, m)
	require.Contains(t, m[1], "event_type=order.created")
	p = c.get(strings.ReplaceAll(m[1], "&amp;", "&"))
	require.Len(t, deliveryIDs(p.Body), 50)
	require.Equal(t, 0, e.Count(`SELECT count(*) FROM deliveries d JOIN events e ON e.id = d.event_id
		WHERE d.id = ANY($1) AND e.event_type <> 'order.created'`, deliveryIDs(p.Body)))

	// Time filters.
	cut := time.Now().UTC().Add(-12 * time.Hour).Format("2006-01-02T15:04")
	require.Len(t, deliveryIDs(c.get("/console/webhooks/"+hook.String()+"?from="+cut).Body), 50)
	require.Len(t, deliveryIDs(c.get("/console/webhooks/"+hook.String()+"?to="+cut).Body), 30)

	// Bad filters are explained, not ignored.
	for _, q := range []string{"state=lost", "event_type=" + url.QueryEscape("no spaces"), "from=yesterday", "from=" + cut + "&to=" + cut} {
		p := c.get("/console/webhooks/" + hook.String() + "?" + q)
		require.Equal(t, http.StatusBadRequest, p.Status, q)
		require.Contains(t, p.Body, `role="alert"`, q)
	}
	require.Equal(t, http.StatusNotFound, c.get("/console/webhooks/"+hook.String()+"?before=xyz").Status)

	// Retrying deliveries of two days ago are read by id, behind the head
	// of the webhook's unfinished span (history.Reader.UnfinishedSpan):
	// listed newest first, across pages.
	old := e.seedAt(tenantID, hook, 60, "order.created", "retrying", -48*time.Hour)
	slices.SortFunc(old, func(a, b uuid.UUID) int { return bytes.Compare(b[:], a[:]) })
	seen = nil
	for path := "/console/webhooks/" + hook.String() + "?state=retrying"; path != ""; {
		p := c.get(path)
		require.Equal(t, http.StatusOK, p.Status, p.Body)
		seen = append(seen, deliveryIDs(p.Body)...)
		path = ""
		if m := olderLink.FindStringSubmatch(p.Body); m != nil {
			path = strings.ReplaceAll(m[1], "&amp;", "&")
		}
	}
	require.Equal(t, old, seen)

	// Pending deliveries are read from the head of the span: listed, and
	// none once the floor is ahead of them.
	pending := e.seed(tenantID, hook, 3, "order.created", "pending")
	require.ElementsMatch(t, pending, deliveryIDs(c.get("/console/webhooks/"+hook.String()+"?state=pending").Body))
	_, err := e.Pool.Exec(context.Background(), `UPDATE webhook_unfinished_floors SET floor = $2 WHERE webhook_id = $1`,
		hook, history.IDAt(time.Now().Add(time.Hour)))
	require.NoError(t, err)
	require.Empty(t, deliveryIDs(c.get("/console/webhooks/"+hook.String()+"?state=pending").Body))
}

// The webhooks page shows each webhook's circuit, last attempt and 24-hour
// success rate, and a banner linking to the webhooks whose deliveries were
// exhausted in the last 24 hours and not retried.
func TestWebhooksPage(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tenantID, key := e.Tenant("acme")
	healthy := e.webhook(key, "http://127.0.0.1:1/healthy", nil)
	failing := e.webhook(key, "http://127.0.0.1:1/failing", nil)
	e.seed(tenantID, healthy, 3, "order.created", "succeeded")
	e.seed(tenantID, failing, 1, "order.created", "succeeded")
	dead := e.seed(tenantID, failing, 3, "order.created", "exhausted")
	old := e.seed(tenantID, healthy, 1, "order.created", "exhausted")
	_, err := e.Pool.Exec(context.Background(), `UPDATE deliveries SET completed_at = now() - interval '2 days' WHERE id = $1`, old[0])
	require.NoError(t, err)
	c := e.client()
	c.signIn(key)

	p := c.get("/console/webhooks")
	require.Equal(t, http.StatusOK, p.Status)
	require.Contains(t, p.Body, "3 deliveries exhausted in the last 24 hours")
	require.Contains(t, p.Body, `<a href="/console/webhooks/`+failing.String()+`?state=exhausted">http://127.0.0.1:1/failing</a>: 3 exhausted`)
	require.NotContains(t, p.Body, healthy.String()+`?state=exhausted`, "exhausted two days ago")
	require.Contains(t, p.Body, "25.0 %")
	require.Contains(t, p.Body, "75.0 %")
	require.Contains(t, p.Body, `<span class="badge bad">502</span>`)
	require.Contains(t, p.Body, `<span class="badge ok">closed</span>`)

	// Once retried, they no longer call for attention.
	for _, id := range dead {
		status, body := e.call("POST", "/v1/webhooks/"+failing.String()+"/deliveries/"+id.String()+"/retry", key, nil)
		require.Equal(t, http.StatusAccepted, status, body)
	}
	require.NotContains(t, c.get("/console/webhooks").Body, "exhausted in the last 24 hours")
}

// The delivery page shows the payload, every attempt with its response,
// and the actions that apply.
func TestDeliveryPage(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tenantID, key := e.Tenant("acme")
	hook := e.webhook(key, "http://127.0.0.1:1/hook", nil)
	dead := e.seed(tenantID, hook, 1, "order.created", "exhausted")[0]
	ok := e.seed(tenantID, hook, 1, "order.created", "succeeded")[0]
	c := e.client()
	c.signIn(key)

	p := c.get("/console/deliveries/" + dead.String())
	require.Equal(t, http.StatusOK, p.Status)
	require.Contains(t, p.Body, "&#34;note&#34;: &#34;seeded&#34;")
	require.Contains(t, p.Body, "Attempt 1")
	require.Contains(t, p.Body, "<dt>Content-Type</dt><dd>text/plain</dd>")
	require.Contains(t, p.Body, "bad gateway")
	require.Contains(t, p.Body, "<code>server_error</code>")
	require.Contains(t, p.Body, ">Retry</button>")
	require.Contains(t, p.Body, ">Replay event</button>")
	require.NotContains(t, p.Body, `http-equiv="refresh"`)

	p = c.get("/console/deliveries/" + ok.String())
	require.NotContains(t, p.Body, ">Retry</button>")
	require.Contains(t, p.Body, ">Replay event</button>")
}
