package console_test

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/systemtest"
)

// auditActions returns the actions and actor types of the tenant's audit
// rows about target, oldest first.
func (e *env) auditActions(tenantID, target string) (actions, actors []string) {
	e.t.Helper()
	rows, err := e.Pool.Query(e.t.Context(), `SELECT action, actor_type FROM audit_log WHERE tenant_id = $1 AND target_id = $2 ORDER BY id`,
		tenantID, target)
	require.NoError(e.t, err)
	defer rows.Close()
	for rows.Next() {
		var action, actor string
		require.NoError(e.t, rows.Scan(&action, &actor))
		actions, actors = append(actions, action), append(actors, actor)
	}
	require.NoError(e.t, rows.Err())
	return actions, actors
}

// What a portal customer does to an endpoint is audited as the portal
// session, and what a console user does as the API key signed in:
// creating, editing, pausing, resuming, testing and verifying it.
func TestWebhookChangesInThePortalAndConsoleAreAudited(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tenantID, key := e.Tenant("acme")

	for _, tc := range []struct {
		client *client
		root   string
		actor  string
	}{
		{e.portalClient(tenantID, systemtest.AdminToken), "/portal", "portal"},
		{func() *client { c := e.client(); c.signIn(key); return c }(), "/console", "api_key"},
	} {
		c := tc.client
		c.get(tc.root + "/webhooks/new")
		p := c.post(tc.root+"/webhooks", url.Values{"url": {"http://127.0.0.1:1/" + tc.actor}, "events": {"*"}})
		require.Equal(t, http.StatusCreated, p.Status, p.Body)
		var hook string
		require.NoError(t, e.Pool.QueryRow(t.Context(), `SELECT id::text FROM webhooks WHERE url = $1`, "http://127.0.0.1:1/"+tc.actor).Scan(&hook))
		base := tc.root + "/webhooks/" + hook

		c.get(base + "/edit")
		p = c.post(base+"/edit", url.Values{"url": {"http://127.0.0.1:1/" + tc.actor + "-2"}, "events": {"order.*"}})
		require.Equal(t, http.StatusSeeOther, p.Status, p.Body)
		for _, action := range []string{"/pause", "/resume", "/test", "/verify"} {
			c.get(base)
			p = c.post(base+action, nil)
			require.Equal(t, http.StatusSeeOther, p.Status, "%s: %s", action, p.Body)
		}

		actions, actors := e.auditActions(tenantID.String(), hook)
		require.Equal(t, []string{"webhook.created", "webhook.updated", "webhook.paused", "webhook.resumed", "webhook.test_sent",
			"webhook.verified"}, actions, tc.actor)
		for _, a := range actors {
			require.Equal(t, tc.actor, a)
		}
	}
}
