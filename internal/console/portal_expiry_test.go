package console_test

import (
	"context"
	"net/http"
	"net/url"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/systemtest"
)

// portalLink asks for a portal link of tenantID with token and returns its
// path, unused.
func (e *env) portalLink(tenantID uuid.UUID, token string) string {
	e.t.Helper()
	status, out := e.call("POST", "/v1/tenants/"+tenantID.String()+"/portal-sessions", token, nil)
	require.Equal(e.t, http.StatusCreated, status, out)
	link, err := url.Parse(out["url"].(string))
	require.NoError(e.t, err)
	return link.RequestURI()
}

// The expiry of the service key that opened a portal session ends it, and
// the links it made that nobody used yet, as revoking the key does.
func TestAnExpiredServiceKeyEndsItsPortals(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tenantID, _ := e.Tenant("acme")
	status, out := e.call("POST", "/v1/service-keys", systemtest.AdminToken, map[string]any{"name": "platform"})
	require.Equal(t, http.StatusCreated, status, out)
	key, keyID := out["service_key"].(string), out["id"].(string)
	open := e.portalClient(tenantID, key)
	unused := e.portalLink(tenantID, key)

	_, err := e.Pool.Exec(context.Background(), `UPDATE service_keys SET expires_at = now() - interval '1 second' WHERE id = $1`, keyID)
	require.NoError(t, err)
	p := open.get("/portal/webhooks")
	require.Equal(t, http.StatusUnauthorized, p.Status, "the session of an expired key has ended")
	require.Contains(t, p.Body, "Your session has ended")
	p = e.client().get(unused)
	require.Equal(t, http.StatusUnauthorized, p.Status, "a link of an expired key starts no session")
	require.Empty(t, p.Header.Values("Set-Cookie"))
}

// Turning a tenant's portal off ends its sessions and links, for good,
// and refuses new links; turned on again, new links work.
func TestTurningThePortalOffEndsItsSessions(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tenantID, _ := e.Tenant("acme")
	open := e.portalClient(tenantID, systemtest.AdminToken)
	unused := e.portalLink(tenantID, systemtest.AdminToken)
	status, out := e.call("GET", "/v1/tenants/"+tenantID.String(), systemtest.AdminToken, nil)
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, true, out["portal"].(map[string]any)["enabled"], "a tenant's portal is on by default")

	status, out = e.call("PATCH", "/v1/tenants/"+tenantID.String(), systemtest.AdminToken, map[string]any{"portal": map[string]any{"enabled": false}})
	require.Equal(t, http.StatusOK, status, out)
	require.Equal(t, false, out["portal"].(map[string]any)["enabled"])
	require.Equal(t, http.StatusUnauthorized, open.get("/portal/webhooks").Status, "the open session has ended")
	require.Equal(t, http.StatusUnauthorized, e.client().get(unused).Status, "the unused link starts nothing")
	status, out = e.call("POST", "/v1/tenants/"+tenantID.String()+"/portal-sessions", systemtest.AdminToken, nil)
	require.Equal(t, http.StatusConflict, status, out)
	require.Equal(t, "portal_disabled", out["error"].(map[string]any)["code"])

	status, out = e.call("PATCH", "/v1/tenants/"+tenantID.String(), systemtest.AdminToken, map[string]any{"portal": map[string]any{"enabled": true}})
	require.Equal(t, http.StatusOK, status, out)
	require.Equal(t, http.StatusUnauthorized, open.get("/portal/webhooks").Status, "a session ended stays ended")
	e.portalClient(tenantID, systemtest.AdminToken)
}
