package console_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Every page but sign-in sends a browser without a session to sign-in, and
// a form post without one does nothing.
func TestNoSessionRedirectsToSignIn(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tenantID, key := e.Tenant("acme")
	hook := e.webhook(key, "http://127.0.0.1:1/hook", nil)
	dead := e.seed(tenantID, hook, 1, "order.created", "exhausted")[0]
	c := e.client()

	for _, path := range []string{"/console", "/console/webhooks", "/console/webhooks/" + hook.String(),
		"/console/deliveries/" + dead.String(), "/console/dlq", "/console/audit"} {
		p := c.get(path)
		require.Equal(t, http.StatusSeeOther, p.Status, path)
		require.Equal(t, "/console/sign-in?next="+url.QueryEscape(path), p.Location, path)
	}
	p := c.post("/console/deliveries/"+dead.String()+"/retry", url.Values{"csrf": {"x"}})
	require.Equal(t, http.StatusSeeOther, p.Status)
	require.Equal(t, "/console/sign-in", p.Location)
	require.Zero(t, e.Count(`SELECT count(*) FROM deliveries WHERE retry_of = $1`, dead))

	// After signing in, the browser goes where it was sent from.
	c.get("/console/sign-in?next=" + url.QueryEscape("/console/dlq"))
	p = c.post("/console/sign-in", url.Values{"api_key": {key}, "next": {"/console/dlq"}})
	require.Equal(t, http.StatusSeeOther, p.Status, p.Body)
	require.Equal(t, "/console/dlq", p.Location)
	// ... but only to a console page.
	c2 := e.client()
	c2.get("/console/sign-in")
	p = c2.post("/console/sign-in", url.Values{"api_key": {key}, "next": {"//evil.example/console/"}})
	require.Equal(t, "/console/webhooks", p.Location)
}

func TestSignInRefusesWrongKeys(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, key := e.Tenant("acme")
	c := e.client()
	c.get("/console/sign-in")
	for _, bad := range []string{"", "hk_nope", key + "x", "Bearer " + key} {
		p := c.post("/console/sign-in", url.Values{"api_key": {bad}})
		require.Equal(t, http.StatusUnauthorized, p.Status, bad)
		require.Contains(t, p.Body, "That API key is not valid")
		require.Empty(t, p.Header.Values("Set-Cookie"), bad)
	}
	require.Equal(t, http.StatusSeeOther, c.get("/console/webhooks").Status)
}

// The session cookie is HttpOnly and SameSite=Strict, scoped to the
// console; Secure when the request came over TLS (here, said so by a
// proxy), not over plain HTTP where the browser would drop it.
func TestSessionCookieAttributes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, key := e.Tenant("acme")
	for _, overTLS := range []bool{false, true} {
		c := e.client()
		c.get("/console/sign-in")
		form := url.Values{"api_key": {key}, "csrf": {c.csrf}}
		req, err := http.NewRequest("POST", e.URL+"/console/sign-in", strings.NewReader(form.Encode()))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if overTLS {
			req.Header.Set("X-Forwarded-Proto", "https")
		}
		p := c.do(req)
		require.Equal(t, http.StatusSeeOther, p.Status, p.Body)
		var session *http.Cookie
		for _, ck := range (&http.Response{Header: p.Header}).Cookies() {
			if ck.Name == "hookline_console" {
				session = ck
			}
		}
		require.NotNil(t, session)
		require.True(t, session.HttpOnly)
		require.Equal(t, http.SameSiteStrictMode, session.SameSite)
		require.Equal(t, "/console", session.Path)
		require.Equal(t, overTLS, session.Secure)
		require.NotContains(t, session.Value, key[3:12], "the cookie must not carry the key")
		require.Positive(t, session.MaxAge)
	}
}

// A form whose sign-in token does not match the browser's sign-in cookie
// is refused before the key is even looked at.
func TestSignInFormNeedsItsToken(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, key := e.Tenant("acme")
	c := e.client()
	p := c.post("/console/sign-in", url.Values{"api_key": {key}, "csrf": {"forged"}})
	require.Equal(t, http.StatusForbidden, p.Status)
	c.get("/console/sign-in")
	p = c.post("/console/sign-in", url.Values{"api_key": {key}, "csrf": {"forged"}})
	require.Equal(t, http.StatusForbidden, p.Status)
	require.Equal(t, http.StatusSeeOther, c.get("/console/webhooks").Status)
}

// Revoking the key ends its console sessions at the next request; a
// tampered cookie is no session; signing out forgets the session.
func TestSessionEnds(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, key := e.Tenant("acme")
	status, second := e.call("POST", "/v1/api-keys", key, map[string]any{"name": "operator"})
	require.Equal(t, http.StatusCreated, status, second)
	c := e.client()
	c.signIn(second["api_key"].(string))
	home := c.get("/console/webhooks")
	require.Contains(t, home.Body, "acme")
	require.Contains(t, home.Body, second["prefix"].(string))

	status, _ = e.call("DELETE", "/v1/api-keys/"+second["id"].(string), key, nil)
	require.Equal(t, http.StatusNoContent, status)
	p := c.get("/console/webhooks")
	require.Equal(t, http.StatusSeeOther, p.Status)
	require.True(t, strings.HasPrefix(p.Location, "/console/sign-in"), p.Location)

	c = e.client()
	c.signIn(key)
	u, err := url.Parse(e.URL + "/console/")
	require.NoError(t, err)
	cookies := c.http.Jar.Cookies(u)
	require.Len(t, cookies, 1)
	v := []byte(cookies[0].Value)
	v[10] ^= 1
	tampered := e.client()
	tampered.http.Jar.SetCookies(u, []*http.Cookie{{Name: "hookline_console", Value: string(v), Path: "/console"}})
	require.Equal(t, http.StatusSeeOther, tampered.get("/console/webhooks").Status)

	p = c.post("/console/sign-out", nil)
	require.Equal(t, http.StatusSeeOther, p.Status)
	require.Equal(t, http.StatusSeeOther, c.get("/console/webhooks").Status)
}

// Every form post needs the CSRF token of its own session: a missing,
// wrong or another session's token is 403 and nothing happens.
func TestCSRFRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tenantID, key := e.Tenant("acme")
	hook := e.webhook(key, "http://127.0.0.1:1/hook", nil)
	dead := e.seed(tenantID, hook, 1, "order.created", "exhausted")[0]
	other := e.client()
	other.signIn(key)
	c := e.client()
	c.signIn(key)
	require.NotEqual(t, other.csrf, c.csrf, "each session has its own token")

	posts := map[string]url.Values{
		"/console/deliveries/" + dead.String() + "/retry":         {},
		"/console/webhooks/" + hook.String() + "/circuit-breaker": {"action": {"force_open"}},
		"/console/dlq/batches":                                    {"webhook_id": {hook.String()}, "requests_per_second": {"5"}},
		"/console/sign-out":                                       {},
	}
	for path, form := range posts {
		for _, token := range []string{"", "nope", other.csrf} {
			f := url.Values{"csrf": {token}}
			for k, v := range form {
				f[k] = v
			}
			p := c.post(path, f)
			require.Equal(t, http.StatusForbidden, p.Status, "%s with %q", path, token)
		}
	}
	require.Zero(t, e.Count(`SELECT count(*) FROM deliveries WHERE retry_of IS NOT NULL`))
	require.Zero(t, e.Count(`SELECT count(*) FROM circuit_breaker_states`))
	require.Zero(t, e.Count(`SELECT count(*) FROM batch_operations`))
	require.Equal(t, http.StatusOK, c.get("/console/webhooks").Status, "still signed in")
}
