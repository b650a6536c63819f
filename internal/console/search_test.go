package console_test

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/systemtest"
)

// search is the search page asking for q.
func search(q string) string { return "/console/search?q=" + url.QueryEscape(q) }

// The search box finds the tenant's deliveries, events and idempotency
// keys, and nothing of another tenant's.
func TestSearch(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, key := e.Tenant("alpha")
	_, otherKey := e.Tenant("beta")
	e.webhook(key, "http://127.0.0.1:1/alpha", nil)
	e.webhook(otherKey, "http://127.0.0.1:1/beta", nil)
	ev, deliveries := e.publish(key, "order-1001")
	require.Len(t, deliveries, 1)
	// The other tenant uses the same idempotency key, and one of its own.
	otherEv, otherDeliveries := e.publish(otherKey, "order-1001")
	e.publish(otherKey, "beta-only-key")
	c := e.client()
	c.signIn(key)

	p := c.get("/console/search")
	require.Equal(t, http.StatusOK, p.Status)
	require.Contains(t, p.Body, `action="/console/search"`)
	require.Contains(t, p.Body, `<a href="/console/search" aria-current="page">Search</a>`)

	for q, want := range map[string]string{
		deliveries[0].String():           "/console/deliveries/" + deliveries[0].String(),
		ev.String():                      "/console/events/" + ev.String(),
		"order-1001":                     "/console/events/" + ev.String(),
		"  " + ev.String() + "\t":        "/console/events/" + ev.String(),
		uuid.Must(uuid.NewV7()).String(): "",
	} {
		p := c.get(search(q))
		if want == "" {
			require.Equal(t, http.StatusNotFound, p.Status, q)
			continue
		}
		require.Equal(t, http.StatusSeeOther, p.Status, q)
		require.Equal(t, want, p.Location, q)
	}

	for _, q := range []string{otherEv.String(), otherDeliveries[0].String(), "beta-only-key", "no such thing", "not printable ✓"} {
		p := c.get(search(q))
		require.Equal(t, http.StatusNotFound, p.Status, q)
		require.Contains(t, p.Body, "Nothing found for", q)
		require.Contains(t, p.Body, `name="q"`, "the form stays, to search again")
		require.NotContains(t, p.Body, "/console/events/", q)
		require.NotContains(t, p.Body, "/console/deliveries/", q)
	}
	// The query is shown back escaped.
	p = c.get(search(`<script>x</script>`))
	require.Equal(t, http.StatusNotFound, p.Status)
	require.Contains(t, p.Body, "&lt;script&gt;x&lt;/script&gt;")
	require.NotContains(t, p.Body, "<script>")
}

// The portal searches the same way, within its tenant, and its links stay
// in the portal.
func TestSearchInThePortal(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tenantID, key := e.Tenant("alpha")
	_, otherKey := e.Tenant("beta")
	e.webhook(key, "http://127.0.0.1:1/alpha", nil)
	e.webhook(otherKey, "http://127.0.0.1:1/beta", nil)
	ev, deliveries := e.publish(key, "")
	otherEv, _ := e.publish(otherKey, "")
	c := e.portalClient(tenantID, systemtest.AdminToken)

	p := c.get("/portal/search?q=" + deliveries[0].String())
	require.Equal(t, http.StatusSeeOther, p.Status, p.Body)
	require.Equal(t, "/portal/deliveries/"+deliveries[0].String(), p.Location)
	p = c.get("/portal/search?q=" + ev.String())
	require.Equal(t, http.StatusSeeOther, p.Status)
	require.Equal(t, "/portal/events/"+ev.String(), p.Location)
	require.Equal(t, http.StatusNotFound, c.get("/portal/search?q="+otherEv.String()).Status)

	p = c.get("/portal/events/" + ev.String())
	require.Equal(t, http.StatusOK, p.Status)
	require.Contains(t, p.Body, `<a href="/portal/deliveries/`+deliveries[0].String()+`">`)
	require.NotContains(t, p.Body, `href="/console/`)
	require.Equal(t, http.StatusNotFound, c.get("/portal/events/"+otherEv.String()).Status)
	require.Contains(t, c.get("/portal/deliveries/"+deliveries[0].String()).Body, `<a href="/portal/events/`+ev.String()+`">`)
}
