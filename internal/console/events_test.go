package console_test

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// publish publishes an event of type order.created through the REST API
// with idempotency key idk (generated when empty) and returns its id and
// the ids of its deliveries, oldest first.
func (e *env) publish(key, idk string) (uuid.UUID, []uuid.UUID) {
	e.t.Helper()
	body := map[string]any{"event_type": "order.created", "source": "shop", "data": map[string]any{"amount": 42, "note": "first order"}}
	if idk != "" {
		body["idempotency_key"] = idk
	}
	status, out := e.call("POST", "/v1/events", key, body)
	require.Equal(e.t, http.StatusAccepted, status, out)
	id := uuid.MustParse(out["id"].(string))
	rows, err := e.Pool.Query(context.Background(), `SELECT id FROM deliveries WHERE event_id = $1 ORDER BY id`, id)
	require.NoError(e.t, err)
	var ids []uuid.UUID
	for rows.Next() {
		var d uuid.UUID
		require.NoError(e.t, rows.Scan(&d))
		ids = append(ids, d)
	}
	require.NoError(e.t, rows.Err())
	return id, ids
}

// The event page lists every delivery of an event, one per webhook it
// fanned out to, and the delivery page links back to it.
func TestEventPage(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, key := e.Tenant("alpha")
	_, otherKey := e.Tenant("beta")
	one := e.webhook(key, "http://127.0.0.1:1/one", nil)
	two := e.webhook(key, "http://127.0.0.1:1/two", nil)
	ev, deliveries := e.publish(key, "order-2002")
	require.Len(t, deliveries, 2)
	c := e.client()
	c.signIn(key)

	p := c.get("/console/events/" + ev.String())
	require.Equal(t, http.StatusOK, p.Status, p.Body)
	require.Equal(t, deliveries, deliveryIDs(p.Body))
	for _, want := range []string{"<dt>Type</dt><dd><code>order.created</code>", "<dt>Source</dt><dd><code>shop</code>",
		"<dt>Idempotency key</dt><dd><code>order-2002</code>", "<dt>Priority</dt><dd>normal</dd>",
		`<a href="/console/webhooks/` + one.String() + `">http://127.0.0.1:1/one</a>`,
		`<a href="/console/webhooks/` + two.String() + `">http://127.0.0.1:1/two</a>`,
		`<span class="badge neutral">pending</span>`,
		"&#34;amount&#34;: 42", "&#34;note&#34;: &#34;first order&#34;"} {
		require.Contains(t, p.Body, want)
	}
	require.NotContains(t, p.Body, "Replay of")

	d := c.get("/console/deliveries/" + deliveries[0].String())
	require.Contains(t, d.Body, `<dt>Event</dt><dd><a href="/console/events/`+ev.String()+`"><code>`+ev.String()+`</code></a>`)

	// A replay links its original; a deleted webhook and a pruned payload
	// are said so.
	p = c.post("/console/events/"+ev.String()+"/replay", url.Values{"target": {"all"}})
	require.Equal(t, http.StatusSeeOther, p.Status, p.Body)
	var replay uuid.UUID
	require.NoError(t, e.Pool.QueryRow(context.Background(), `SELECT id FROM events WHERE replay_of = $1`, ev).Scan(&replay))
	status, _ := e.Call("DELETE", "/v1/webhooks/"+two.String(), key, nil)
	require.Equal(t, http.StatusNoContent, status)
	_, err := e.Pool.Exec(context.Background(), `UPDATE events SET data = NULL WHERE id = $1`, replay)
	require.NoError(t, err)
	p = c.get("/console/events/" + replay.String())
	require.Equal(t, http.StatusOK, p.Status)
	require.Contains(t, p.Body, `<dt>Replay of</dt><dd><a href="/console/events/`+ev.String()+`">`)
	require.Contains(t, p.Body, "Retention removed this event's payload")
	require.Contains(t, p.Body, "deleted webhook")
	require.Contains(t, p.Body, "http://127.0.0.1:1/one")
	require.NotContains(t, p.Body, "http://127.0.0.1:1/two")

	otherEv, _ := e.publish(otherKey, "")
	for _, id := range []string{otherEv.String(), uuid.NewString(), "not-a-uuid"} {
		p := c.get("/console/events/" + id)
		require.Equal(t, http.StatusNotFound, p.Status, id)
		require.Contains(t, p.Body, "no such page")
	}
}

// An event fanned out to more webhooks than are looked up one by one still
// names every webhook.
func TestEventPageOfAWideFanOut(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, key := e.Tenant("alpha")
	hooks := map[uuid.UUID]string{}
	for i := range 25 {
		u := "http://127.0.0.1:1/hook-" + strconv.Itoa(i)
		hooks[e.webhook(key, u, nil)] = u
	}
	ev, deliveries := e.publish(key, "")
	require.Len(t, deliveries, 25)
	c := e.client()
	c.signIn(key)

	p := c.get("/console/events/" + ev.String())
	require.Equal(t, http.StatusOK, p.Status)
	require.Equal(t, deliveries, deliveryIDs(p.Body))
	for id, u := range hooks {
		require.Contains(t, p.Body, `<a href="/console/webhooks/`+id.String()+`">`+u+`</a>`)
	}
}
