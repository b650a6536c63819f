package console_test

import (
	"context"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/systemtest"
)

// secureJar keeps cookies as a browser does for http://127.0.0.1, which
// browsers treat as a secure context: Go's jar would never send a Secure
// cookie over plain HTTP.
type secureJar struct{ *cookiejar.Jar }

func asHTTPS(u *url.URL) *url.URL {
	c := *u
	c.Scheme = "https"
	return &c
}

func (j secureJar) SetCookies(u *url.URL, cookies []*http.Cookie) {
	j.Jar.SetCookies(asHTTPS(u), cookies)
}
func (j secureJar) Cookies(u *url.URL) []*http.Cookie { return j.Jar.Cookies(asHTTPS(u)) }

// portalClient opens a portal session of tenantID with token (the admin
// token or a service key) and returns a client signed into it.
func (e *env) portalClient(tenantID uuid.UUID, token string) *client {
	e.t.Helper()
	status, out := e.call("POST", "/v1/tenants/"+tenantID.String()+"/portal-sessions", token, nil)
	require.Equal(e.t, http.StatusCreated, status, out)
	link, err := url.Parse(out["url"].(string))
	require.NoError(e.t, err)
	c := e.client()
	jar, err := cookiejar.New(nil)
	require.NoError(e.t, err)
	c.http.Jar = secureJar{jar}
	p := c.get(link.RequestURI())
	require.Equal(e.t, http.StatusSeeOther, p.Status, p.Body)
	require.Equal(e.t, "/portal/webhooks", p.Location)
	set := p.Header.Get("Set-Cookie")
	for _, attr := range []string{"hookline_portal=", "Path=/portal", "HttpOnly", "Secure", "SameSite=None", "Partitioned"} {
		require.Contains(e.t, set, attr, "the session cookie works inside a frame on another site")
	}
	require.Equal(e.t, http.StatusOK, c.get("/portal/webhooks").Status)
	return c
}

func TestPortalLinkIsUsableOnceAndBriefly(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tenantID, _ := e.Tenant("acme")
	status, out := e.call("POST", "/v1/tenants/"+tenantID.String()+"/portal-sessions", systemtest.AdminToken, nil)
	require.Equal(t, http.StatusCreated, status)
	link, err := url.Parse(out["url"].(string))
	require.NoError(t, err)

	first := e.client()
	first.http.Jar = secureJar{first.http.Jar.(*cookiejar.Jar)}
	require.Equal(t, http.StatusSeeOther, first.get(link.RequestURI()).Status)
	second := e.client()
	p := second.get(link.RequestURI())
	require.Equal(t, http.StatusUnauthorized, p.Status, "a link works once")
	require.Contains(t, p.Body, "expired or was already used")
	require.Equal(t, http.StatusUnauthorized, second.get("/portal/webhooks").Status, "no session without the link")
	require.Equal(t, http.StatusUnauthorized, second.get("/portal/start").Status)

	status, out = e.call("POST", "/v1/tenants/"+tenantID.String()+"/portal-sessions", systemtest.AdminToken, nil)
	require.Equal(t, http.StatusCreated, status)
	late, err := url.Parse(out["url"].(string))
	require.NoError(t, err)
	_, err = e.Pool.Exec(context.Background(), `UPDATE portal_sessions SET link_expires_at = now() - interval '1 second' WHERE used_at IS NULL`)
	require.NoError(t, err)
	require.Equal(t, http.StatusUnauthorized, e.client().get(late.RequestURI()).Status, "an expired link does not work")

	// A console session's cookie is no portal session, and the other way round.
	_, key := e.Tenant("other")
	console := e.client()
	console.signIn(key)
	require.Equal(t, http.StatusUnauthorized, console.get("/portal/webhooks").Status)
	require.Equal(t, http.StatusSeeOther, first.get("/console/webhooks").Status, "the portal's cookie does not sign into the console")
}

func TestPortalShowsOneTenantAndNoOperatorPages(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a, keyA := e.Tenant("acme")
	b, keyB := e.Tenant("globex")
	hookA := e.webhook(keyA, "http://127.0.0.1:1/a", nil)
	hookB := e.webhook(keyB, "http://127.0.0.1:1/b", nil)
	deadB := e.seed(b, hookB, 1, "order.created", "exhausted")[0]
	status, out := e.call("POST", "/v1/service-keys", systemtest.AdminToken, map[string]any{"name": "platform", "scopes": []string{"manage", "read"},
		"tenant_ids": []string{a.String()}})
	require.Equal(t, http.StatusCreated, status, out)
	serviceKey, serviceKeyID := out["service_key"].(string), out["id"].(string)
	status, _ = e.call("PATCH", "/v1/tenants/"+a.String(), systemtest.AdminToken, map[string]any{"portal": map[string]any{
		"name": "Acme Webhooks", "accent_color": "#aa3300", "logo_url": "https://cdn.example.com/acme.png",
		"frame_origins": []string{"https://app.acme.example", "http://localhost:3000"}}})
	require.Equal(t, http.StatusOK, status)

	p := e.portalClient(a, serviceKey)
	page := p.get("/portal/webhooks")
	require.Equal(t, http.StatusOK, page.Status)
	require.Contains(t, page.Body, "http://127.0.0.1:1/a")
	require.NotContains(t, page.Body, "http://127.0.0.1:1/b")
	require.Contains(t, page.Body, "Acme Webhooks")
	require.Contains(t, page.Body, `src="https://cdn.example.com/acme.png"`)
	require.NotContains(t, page.Body, "/audit", "no audit log in the portal")
	require.NotContains(t, page.Body, "api-keys", "no API keys in the portal")
	require.NotContains(t, page.Body, "/console/", "every link stays in the portal")
	csp := page.Header.Get("Content-Security-Policy")
	require.Contains(t, csp, "frame-ancestors 'self' https://app.acme.example http://localhost:3000")
	require.Contains(t, csp, "img-src 'self' data: https://cdn.example.com")
	require.Empty(t, page.Header.Get("X-Frame-Options"))
	require.Equal(t, ":root { --accent: #aa3300; }\n", p.get("/portal/static/theme.css").Body)

	// Nothing of B, and no operator page.
	for _, path := range []string{"/portal/webhooks/" + hookB.String(), "/portal/deliveries/" + deadB.String(),
		"/portal/audit", "/portal/api-keys"} {
		require.Equal(t, http.StatusNotFound, p.get(path).Status, path)
	}
	require.Equal(t, http.StatusNotFound, p.post("/portal/deliveries/"+deadB.String()+"/retry", nil).Status)
	require.Equal(t, http.StatusNotFound, p.post("/portal/webhooks/"+hookA.String()+"/circuit-breaker", url.Values{"action": {"reset"}}).Status,
		"breaker overrides are the operator's")
	require.Equal(t, 0, e.Count(`SELECT count(*) FROM deliveries WHERE retry_of = $1`, deadB))

	// What the customer does is audited as the portal session, opened by
	// the service key.
	page = p.get("/portal/webhooks/" + hookA.String())
	require.NotContains(t, page.Body, "Force open")
	require.Equal(t, http.StatusOK, p.post("/portal/webhooks/"+hookA.String()+"/secret/rotate", nil).Status)
	var actorType string
	var actorService *uuid.UUID
	require.NoError(t, e.Pool.QueryRow(context.Background(), `SELECT actor_type, actor_service_key_id FROM audit_log
		WHERE action = 'webhook.secret_rotated' AND tenant_id = $1`, a).Scan(&actorType, &actorService))
	require.Equal(t, "portal", actorType)
	require.Equal(t, serviceKeyID, actorService.String())

	// A session of B, opened by the admin, keeps its default frame policy.
	pb := e.portalClient(b, systemtest.AdminToken)
	page = pb.get("/portal/webhooks")
	require.Contains(t, page.Header.Get("Content-Security-Policy"), "frame-ancestors 'none'")
	require.Contains(t, page.Body, "http://127.0.0.1:1/b")
	require.Equal(t, http.StatusNotFound, pb.get("/portal/webhooks/"+hookA.String()).Status)

	// Signing out ends the session everywhere.
	out2 := pb.post("/portal/sign-out", nil)
	require.Equal(t, http.StatusOK, out2.Status)
	require.Equal(t, http.StatusUnauthorized, pb.get("/portal/webhooks").Status)
	require.True(t, strings.Contains(out2.Header.Get("Set-Cookie"), "Max-Age=0"))
}

// Revoking the service key that opened portal sessions ends them, and the
// links it made and nobody used yet; the page saying so still shows in
// the tenant's frame.
func TestRevokingAServiceKeyEndsItsPortals(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tenantID, _ := e.Tenant("acme")
	status, _ := e.call("PATCH", "/v1/tenants/"+tenantID.String(), systemtest.AdminToken, map[string]any{"portal": map[string]any{
		"frame_origins": []string{"https://app.acme.example"}}})
	require.Equal(t, http.StatusOK, status)
	status, out := e.call("POST", "/v1/service-keys", systemtest.AdminToken, map[string]any{"name": "platform"})
	require.Equal(t, http.StatusCreated, status, out)
	key, keyID := out["service_key"].(string), out["id"].(string)

	open := e.portalClient(tenantID, key)
	status, out = e.call("POST", "/v1/tenants/"+tenantID.String()+"/portal-sessions", key, nil)
	require.Equal(t, http.StatusCreated, status, out)
	unused, err := url.Parse(out["url"].(string))
	require.NoError(t, err)

	require.Equal(t, http.StatusNoContent, func() int { s, _ := e.call("DELETE", "/v1/service-keys/"+keyID, systemtest.AdminToken, nil); return s }())
	p := open.get("/portal/webhooks")
	require.Equal(t, http.StatusUnauthorized, p.Status, "the session it opened has ended")
	require.Contains(t, p.Header.Get("Content-Security-Policy"), "frame-ancestors 'self' https://app.acme.example",
		"the page saying so shows inside the tenant's frame")
	p = e.client().get(unused.RequestURI())
	require.Equal(t, http.StatusUnauthorized, p.Status, "and so has the link nobody used")
	require.Contains(t, p.Header.Get("Content-Security-Policy"), "frame-ancestors 'self' https://app.acme.example")
}

// Test events, retries and replays from the portal take from the tenant's
// publish limit, as they do through the REST API.
func TestPortalActionsTakeFromThePublishLimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tenantID, key := e.Tenant("acme")
	status, _ := e.call("PATCH", "/v1/tenants/"+tenantID.String(), systemtest.AdminToken, map[string]any{
		"publish_rate_limit": map[string]any{"requests_per_second": 1, "burst": 1}})
	require.Equal(t, http.StatusOK, status)
	hook := e.webhook(key, "http://127.0.0.1:1/a", nil)
	p := e.portalClient(tenantID, systemtest.AdminToken)
	p.get("/portal/webhooks/" + hook.String())

	codes := map[int]int{}
	for range 5 {
		codes[p.post("/portal/webhooks/"+hook.String()+"/test", nil).Status]++
	}
	require.Equal(t, map[int]int{http.StatusSeeOther: 1, http.StatusTooManyRequests: 4}, codes)
	require.Equal(t, 1, e.Count(`SELECT count(*) FROM deliveries WHERE webhook_id = $1`, hook))
	page := p.post("/portal/webhooks/"+hook.String()+"/test", nil)
	require.Contains(t, page.Body, "publish rate limit is used up")
}
