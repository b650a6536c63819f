package console_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/testwait"
)

// secretShown is the secret a secret page shows.
func secretShown(t *testing.T, p page) string {
	t.Helper()
	_, rest, ok := strings.Cut(p.Body, `<output class="secret" id="secret" aria-label="Signing secret"><code>`)
	require.True(t, ok, p.Body)
	secret, _, _ := strings.Cut(rest, "</code>")
	require.True(t, strings.HasPrefix(secret, "whsec_"), secret)
	return secret
}

func TestManageAnEndpointFromTheConsole(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tenantID, key := e.Tenant("acme")
	_, otherKey := e.Tenant("other")
	c := e.client()
	c.signIn(key)

	require.Contains(t, c.get("/console/webhooks/new").Body, `action="/console/webhooks"`)
	bad := c.post("/console/webhooks", url.Values{"url": {"ftp://example.com"}, "events": {"order.*"}})
	require.Equal(t, http.StatusBadRequest, bad.Status)
	require.Contains(t, bad.Body, "url")
	require.Contains(t, bad.Body, `value="ftp://example.com"`, "the form keeps what was typed")
	bad = c.post("/console/webhooks", url.Values{"url": {"http://127.0.0.1:1/a"}, "events": {"order.*"}, "filter": {"data.amount >"}})
	require.Equal(t, http.StatusBadRequest, bad.Status)
	require.Contains(t, bad.Body, "filter")

	p := c.post("/console/webhooks", url.Values{"url": {"http://127.0.0.1:1/a"}, "events": {"order.created, invoice.*"}})
	require.Equal(t, http.StatusCreated, p.Status, p.Body)
	secret := secretShown(t, p)
	var hook uuid.UUID
	var events []string
	require.NoError(t, e.Pool.QueryRow(context.Background(), `SELECT id, events FROM webhooks WHERE tenant_id = $1`, tenantID).
		Scan(&hook, &events))
	require.Equal(t, []string{"order.created", "invoice.*"}, events)
	page := c.get("/console/webhooks/" + hook.String())
	require.NotContains(t, page.Body, secret, "the secret is shown only when asked for")

	p = c.post("/console/webhooks/"+hook.String()+"/secret/reveal", nil)
	require.Equal(t, http.StatusOK, p.Status)
	require.Equal(t, secret, secretShown(t, p))
	require.Equal(t, "webhook", e.lastAudit("webhook.secret_revealed").TargetType)

	p = c.post("/console/webhooks/"+hook.String()+"/secret/rotate", nil)
	require.Equal(t, http.StatusOK, p.Status)
	rotated := secretShown(t, p)
	require.NotEqual(t, secret, rotated)
	require.Contains(t, p.Body, "both the new and the previous secret")
	require.Equal(t, hook.String(), e.lastAudit("webhook.secret_rotated").TargetID)

	c.get("/console/webhooks/" + hook.String() + "/edit")
	p = c.post("/console/webhooks/"+hook.String()+"/edit", url.Values{"url": {"http://127.0.0.1:1/b"}, "events": {"order.*"},
		"filter": {"data.amount > 100"}})
	require.Equal(t, http.StatusSeeOther, p.Status, p.Body)
	var u, filter string
	require.NoError(t, e.Pool.QueryRow(context.Background(), `SELECT url, filter FROM webhooks WHERE id = $1`, hook).Scan(&u, &filter))
	require.Equal(t, "http://127.0.0.1:1/b", u)
	require.Equal(t, "data.amount > 100", filter)

	c.get("/console/webhooks/" + hook.String())
	require.Equal(t, http.StatusSeeOther, c.post("/console/webhooks/"+hook.String()+"/pause", nil).Status)
	require.Equal(t, 0, e.Count(`SELECT count(*) FROM webhooks WHERE id = $1 AND active`, hook))
	p = c.post("/console/webhooks/"+hook.String()+"/test", nil)
	require.Equal(t, http.StatusConflict, p.Status)
	require.Contains(t, p.Body, "paused")
	require.Equal(t, http.StatusSeeOther, c.post("/console/webhooks/"+hook.String()+"/resume", nil).Status)
	p = c.post("/console/webhooks/"+hook.String()+"/test", nil)
	require.Equal(t, http.StatusSeeOther, p.Status, p.Body)
	require.Equal(t, 1, e.Count(`SELECT count(*) FROM deliveries d JOIN events ev ON ev.id = d.event_id
		WHERE d.webhook_id = $1 AND ev.event_type = 'hookline.test'`, hook), "the test event ignores the filter")

	// Another tenant's session cannot touch it.
	other := e.client()
	other.signIn(otherKey)
	require.Equal(t, http.StatusNotFound, other.post("/console/webhooks/"+hook.String()+"/secret/reveal", nil).Status)
	require.Equal(t, http.StatusNotFound, other.post("/console/webhooks/"+hook.String()+"/delete", url.Values{"confirm": {u}}).Status)

	p = c.post("/console/webhooks/"+hook.String()+"/delete", url.Values{"confirm": {"wrong"}})
	require.Equal(t, http.StatusBadRequest, p.Status)
	require.Equal(t, 0, e.Count(`SELECT count(*) FROM webhooks WHERE id = $1 AND deleted_at IS NOT NULL`, hook))
	p = c.post("/console/webhooks/"+hook.String()+"/delete", url.Values{"confirm": {u}})
	require.Equal(t, http.StatusSeeOther, p.Status, p.Body)
	require.Equal(t, 1, e.Count(`SELECT count(*) FROM webhooks WHERE id = $1 AND deleted_at IS NOT NULL`, hook))

	p = c.post("/console/webhooks/"+hook.String()+"/secret/rotate", url.Values{"csrf": {"forged"}})
	require.Equal(t, http.StatusForbidden, p.Status, "every action needs the session's CSRF token")
}

func TestChartsAndADisabledBreaker(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tenantID, key := e.Tenant("acme")
	hook := e.webhook(key, "http://127.0.0.1:1/a", map[string]any{"circuit_breaker_config": map[string]any{"enabled": false}})
	e.seed(tenantID, hook, 3, "order.created", "succeeded")
	c := e.client()
	c.signIn(key)

	p := c.get("/console/webhooks/" + hook.String())
	require.Equal(t, http.StatusOK, p.Status)
	require.Contains(t, p.Body, "The breaker is disabled for this webhook")
	require.NotContains(t, p.Body, "Force open", "no override is offered for a breaker that is off")
	require.NotContains(t, p.Body, ">closed<")
	for _, title := range []string{"Attempts, last hour", "Success rate, last hour", "Latency, last hour", "Attempts, last day"} {
		require.Contains(t, p.Body, "<title>"+title, title)
	}
	require.Contains(t, p.Body, "succeeded: 3 in all", "the chart counts the webhook's attempts")

	list := c.get("/console/webhooks")
	require.Contains(t, list.Body, `<span class="badge neutral">off</span>`)
	require.Contains(t, list.Body, "succeeded: 3 in all", "the tenant's charts")
}

// A verified endpoint whose URL is changed from the console is checked
// again at once, as a change through the REST API is; the page shows the
// outcome and offers to verify again.
func TestEditingAVerifiedEndpointVerifiesItAgain(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tenantID, key := e.Tenant("acme")
	hook := e.webhook(key, "http://127.0.0.1:1/a", nil)
	_, err := e.Pool.Exec(context.Background(), `UPDATE webhooks SET verification = '{"state": "verified", "verified_at": "2026-01-01T00:00:00Z", "last_error": null}'
		WHERE id = $1 AND tenant_id = $2`, hook, tenantID)
	require.NoError(t, err)
	c := e.client()
	c.signIn(key)
	c.get("/console/webhooks/" + hook.String() + "/edit")
	p := c.post("/console/webhooks/"+hook.String()+"/edit", url.Values{"url": {"http://127.0.0.1:1/b"}, "events": {"*"}})
	require.Equal(t, http.StatusSeeOther, p.Status, p.Body)
	require.Contains(t, p.Location, "notice=verification_failed")
	var state string
	require.NoError(t, e.Pool.QueryRow(context.Background(), `SELECT verification->>'state' FROM webhooks WHERE id = $1`, hook).Scan(&state))
	require.Equal(t, "failed", state, "the new URL was checked, and nothing there echoed the challenge")
	page := c.get(p.Location)
	require.Contains(t, page.Body, "verification failed")
	require.Contains(t, page.Body, "did not echo the challenge")
	require.Contains(t, page.Body, `action="/console/webhooks/`+hook.String()+`/verify"`)
	p = c.post("/console/webhooks/"+hook.String()+"/verify", nil)
	require.Equal(t, http.StatusSeeOther, p.Status)
	require.Contains(t, p.Location, "notice=verification_failed")
}

// A page reloaded in a loop draws its charts from the database at most
// once per few seconds (chartTTL): a tenant's customer reloading the
// portal cannot load Postgres for the others.
func TestChartsAreDrawnAgainOnlyAfterAFewSeconds(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tenantID, key := e.Tenant("acme")
	hook := e.webhook(key, "http://127.0.0.1:1/a", nil)
	e.seed(tenantID, hook, 2, "order.created", "succeeded")
	c := e.client()
	c.signIn(key)
	require.Contains(t, c.get("/console/webhooks/"+hook.String()).Body, "succeeded: 2 in all")

	e.seed(tenantID, hook, 3, "order.created", "succeeded")
	require.Contains(t, c.get("/console/webhooks/"+hook.String()).Body, "succeeded: 2 in all", "drawn a moment ago")
	testwait.Eventually(t, 15*time.Second, func() bool {
		return strings.Contains(c.get("/console/webhooks/"+hook.String()).Body, "succeeded: 5 in all")
	}, "the charts to be drawn again")
}
