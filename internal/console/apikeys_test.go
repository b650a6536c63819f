package console_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/systemtest"
)

// logBuffer collects a system's logs; its parts write from their own
// goroutines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

var newKeyShown = regexp.MustCompile(`<output class="secret" id="new-key"[^>]*><code>(hk_[^<]+)</code></output>`)

// The API keys page creates a key and shows it once, lists keys without
// them, and revokes them with the REST API's rules.
func TestAPIKeysPage(t *testing.T) {
	t.Parallel()
	logs := &logBuffer{}
	e := newEnv(t, func(o *systemtest.Options) { o.Log = slog.New(slog.NewTextHandler(logs, nil)) })
	tenantID, key := e.Tenant("acme")
	_, otherKey := e.Tenant("other")
	session := e.keyID(tenantID)
	c := e.client()
	c.signIn(key)

	p := c.get("/console/api-keys")
	require.Equal(t, http.StatusOK, p.Status)
	require.Contains(t, p.Body, `<a href="/console/api-keys" aria-current="page">API keys</a>`)
	require.Contains(t, p.Body, `default <span class="badge neutral">this session</span>`)
	require.Contains(t, p.Body, `action="/console/api-keys/`+session.String()+`/revoke"`)
	require.Contains(t, p.Body, "Revoke (signs you out)")
	require.NotContains(t, p.Body, key)

	// Without the session's CSRF token nothing is created.
	p = c.post("/console/api-keys", url.Values{"name": {"forged"}, "csrf": {"x"}})
	require.Equal(t, http.StatusForbidden, p.Status)
	require.Equal(t, 1, e.Count(`SELECT count(*) FROM api_keys WHERE tenant_id = $1`, tenantID))

	expires := time.Now().UTC().Add(48 * time.Hour).Truncate(time.Minute)
	p = c.post("/console/api-keys", url.Values{"name": {"ci deploy"}, "expires_at": {expires.Format("2006-01-02T15:04")}})
	require.Equal(t, http.StatusCreated, p.Status, p.Body)
	require.Contains(t, p.Body, "it is shown this once")
	m := newKeyShown.FindStringSubmatch(p.Body)
	require.NotNil(t, m, p.Body)
	secret := m[1]
	principal, err := e.Stack.Deps.Tenants.Authenticate(context.Background(), secret)
	require.NoError(t, err, "the key shown is a working key")
	require.Equal(t, tenantID, principal.TenantID)
	var created uuid.UUID
	var name, prefix string
	var expiresAt time.Time
	require.NoError(t, e.Pool.QueryRow(context.Background(), `SELECT id, name, prefix, expires_at FROM api_keys
		WHERE tenant_id = $1 AND id <> $2`, tenantID, session).Scan(&created, &name, &prefix, &expiresAt))
	require.Equal(t, created, principal.KeyID)
	require.Equal(t, "ci deploy", name)
	require.True(t, expires.Equal(expiresAt), expiresAt)
	a := e.lastAudit("api_key.created")
	require.Equal(t, created.String(), a.TargetID)
	require.Equal(t, session, *a.KeyID, "recorded as the session's key")
	require.Contains(t, logs.String(), "api key created")
	require.NotContains(t, logs.String(), secret, "the key is never logged")

	// Listed, never shown again.
	p = c.get("/console/api-keys")
	require.NotContains(t, p.Body, secret)
	require.Contains(t, p.Body, "ci deploy")
	require.Contains(t, p.Body, "<code>"+prefix+"…</code>")

	// Refused forms say why and create nothing.
	for _, form := range []url.Values{{"name": {"  "}}, {"name": {"x"}, "expires_at": {"next week"}},
		{"name": {"x"}, "expires_at": {"2001-01-01T00:00"}}} {
		p = c.post("/console/api-keys", form)
		require.Equal(t, http.StatusBadRequest, p.Status, form)
		require.Contains(t, p.Body, `role="alert"`, form)
		require.NotRegexp(t, newKeyShown, p.Body)
	}
	require.Equal(t, 2, e.Count(`SELECT count(*) FROM api_keys WHERE tenant_id = $1`, tenantID))

	// Revoked: refused at once, by this api process's cache too.
	status, _ := e.Call("GET", "/v1/webhooks", secret, nil)
	require.Equal(t, http.StatusOK, status)
	p = c.post("/console/api-keys/"+created.String()+"/revoke", nil)
	require.Equal(t, http.StatusSeeOther, p.Status, p.Body)
	require.Equal(t, "/console/api-keys?notice=key_revoked", p.Location)
	status, _ = e.Call("GET", "/v1/webhooks", secret, nil)
	require.Equal(t, http.StatusUnauthorized, status)
	require.Equal(t, created.String(), e.lastAudit("api_key.revoked").TargetID)
	p = c.get(p.Location)
	require.Contains(t, p.Body, "API key revoked")
	require.Contains(t, p.Body, `<span class="badge bad">revoked</span>`)
	require.NotContains(t, p.Body, `action="/console/api-keys/`+created.String()+`/revoke"`)

	// The last active key stays, and the page says why.
	p = c.post("/console/api-keys/"+session.String()+"/revoke", nil)
	require.Equal(t, http.StatusConflict, p.Status)
	require.Contains(t, p.Body, "last active API key")
	require.Zero(t, e.Count(`SELECT count(*) FROM api_keys WHERE id = $1 AND revoked_at IS NOT NULL`, session))
	require.Equal(t, http.StatusOK, c.get("/console/api-keys").Status, "still signed in")

	// Another tenant's key is not found.
	otherID, err := e.Stack.Deps.Tenants.Authenticate(context.Background(), otherKey)
	require.NoError(t, err)
	require.Equal(t, http.StatusNotFound, c.post("/console/api-keys/"+otherID.KeyID.String()+"/revoke", nil).Status)
	require.Zero(t, e.Count(`SELECT count(*) FROM api_keys WHERE revoked_at IS NOT NULL AND id <> $1`, created))
}

// The portal has no API keys page.
func TestPortalHasNoAPIKeys(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tenantID, _ := e.Tenant("acme")
	c := e.portalClient(tenantID, systemtest.AdminToken)
	p := c.get("/portal/webhooks")
	require.Contains(t, p.Body, `href="/portal/search"`)
	require.NotContains(t, p.Body, "api-keys")
	require.Equal(t, http.StatusNotFound, c.get("/portal/api-keys").Status)
	require.Equal(t, http.StatusNotFound, c.post("/portal/api-keys", url.Values{"name": {"x"}}).Status)
	require.Equal(t, 1, e.Count(`SELECT count(*) FROM api_keys WHERE tenant_id = $1`, tenantID))
}
