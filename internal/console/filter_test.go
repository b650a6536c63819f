package console_test

import (
	"context"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"
)

// The webhook page shows the webhook's payload filter; a retry or a replay
// to it that the filter refuses is shown on the delivery page, not made.
func TestWebhookFilterInTheConsole(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tenantID, key := e.Tenant("acme")
	hook := e.webhook(key, "http://127.0.0.1:1/filtered", map[string]any{"filter": `data.amount > 100 && "vip" in data.tags`})
	plain := e.webhook(key, "http://127.0.0.1:1/plain", nil)
	c := e.client()
	c.signIn(key)

	p := c.get("/console/webhooks/" + hook.String())
	require.Equal(t, http.StatusOK, p.Status)
	require.Contains(t, p.Body, `filter <code class="filter">data.amount &gt; 100 &amp;&amp; &#34;vip&#34; in data.tags</code>`)
	require.NotContains(t, c.get("/console/webhooks/"+plain.String()).Body, `class="filter"`)

	dead := e.seed(tenantID, hook, 1, "order.created", "exhausted")[0] // its event's data has no amount
	p = c.post("/console/deliveries/"+dead.String()+"/retry", url.Values{})
	require.Equal(t, http.StatusConflict, p.Status)
	require.Contains(t, p.Body, "Not retried: the webhook&#39;s filter does not match the event")
	var eventID string
	require.NoError(t, e.Pool.QueryRow(context.Background(), `SELECT event_id::text FROM deliveries WHERE id = $1`, dead).Scan(&eventID))
	p = c.post("/console/events/"+eventID+"/replay", url.Values{"webhook_id": {hook.String()}, "delivery_id": {dead.String()}})
	require.Equal(t, http.StatusConflict, p.Status)
	require.Contains(t, p.Body, "Not replayed: the webhook&#39;s filter does not match the event")
	require.Equal(t, 1, e.Count(`SELECT count(*) FROM deliveries WHERE webhook_id = $1`, hook), "nothing made")
}
