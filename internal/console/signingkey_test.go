package console_test

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/console"
	"github.com/hookline/hookline/internal/db/dbtest"
	"github.com/hookline/hookline/internal/httpapi"
	"github.com/hookline/hookline/internal/secret"
	"github.com/hookline/hookline/internal/systemtest"
	"github.com/hookline/hookline/internal/testlog"
)

// legacyKey is the key earlier versions derived from the admin token when
// none was configured.
func legacyKey(adminToken string) []byte {
	m := hmac.New(sha256.New, []byte(adminToken))
	m.Write([]byte("hookline console session key v1"))
	return m.Sum(nil)
}

func legacyMAC(key []byte, label string, data []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(label))
	m.Write(data)
	return m.Sum(nil)
}

// legacyCookie is a console session cookie of keyID as earlier versions
// signed it with the key derived from the admin token.
func legacyCookie(keyID, tenantID uuid.UUID, expires time.Time) string {
	b := []byte{1}
	b = append(b, keyID[:]...)
	b = append(b, tenantID[:]...)
	b = binary.BigEndian.AppendUint64(b, uint64(expires.Unix())) //nolint:gosec // a time after 1970
	nonce := make([]byte, 16)
	_, _ = rand.Read(nonce)
	b = append(b, nonce...)
	b = append(b, legacyMAC(legacyKey(systemtest.AdminToken), "session", b)...)
	return base64.RawURLEncoding.EncodeToString(b)
}

// cookie returns the value of the cookie name the client holds for path.
func (c *client) cookie(path, name string) string {
	c.t.Helper()
	u, err := url.Parse(c.base + path)
	require.NoError(c.t, err)
	for _, ck := range c.http.Jar.Cookies(u) {
		if ck.Name == name {
			return ck.Value
		}
	}
	return ""
}

// Nothing the console sends can be checked against a guess of the admin
// token: the sign-in form's token (handed out without authentication) and
// a session's cookie and CSRF token are not MACs under the key earlier
// versions derived from it. A session signed with that key is ended, not
// accepted, and the operator is told once in the log.
func TestNothingSentIsCheckableAgainstTheAdminToken(t *testing.T) {
	t.Parallel()
	logs := &testlog.Buffer{}
	e := newEnv(t, func(o *systemtest.Options) { o.Log = slog.New(slog.NewJSONHandler(logs, nil)) })
	tenantID, key := e.Tenant("acme")
	legacy := legacyKey(systemtest.AdminToken)

	c := e.client()
	require.Equal(t, http.StatusOK, c.get("/console/sign-in").Status, logs.String())
	nonce, err := base64.RawURLEncoding.DecodeString(c.cookie("/console/sign-in", "hookline_console_signin"))
	require.NoError(t, err)
	require.NotEqual(t, base64.RawURLEncoding.EncodeToString(legacyMAC(legacy, "sign-in", nonce)), c.csrf,
		"the sign-in form's token is a MAC under the key derived from the admin token")
	require.NotContains(t, c.csrf, base64.RawURLEncoding.EncodeToString(legacyMAC(legacy, "sign-in", nonce)))

	c.signIn(key)
	raw, err := base64.RawURLEncoding.DecodeString(c.cookie("/console/webhooks", "hookline_console"))
	require.NoError(t, err)
	require.Greater(t, len(raw), sha256.Size)
	payload, sum := raw[:len(raw)-sha256.Size], raw[len(raw)-sha256.Size:]
	require.NotEqual(t, legacyMAC(legacy, "session", payload), sum, "the session cookie is signed with the key derived from the admin token")

	// A cookie signed the old way is ended, not accepted.
	var keyID uuid.UUID
	require.NoError(t, e.Pool.QueryRow(context.Background(), `SELECT id FROM api_keys WHERE tenant_id = $1`, tenantID).Scan(&keyID))
	old := e.client()
	u, err := url.Parse(e.URL + "/console")
	require.NoError(t, err)
	for range 2 {
		old.http.Jar.SetCookies(u, []*http.Cookie{{Name: "hookline_console", Value: legacyCookie(keyID, tenantID, time.Now().Add(time.Hour)), Path: "/console"}})
		p := old.get("/console/webhooks")
		require.Equal(t, http.StatusSeeOther, p.Status, "a session signed with the admin token's key is refused")
		require.Contains(t, p.Location, "ended=1")
	}
	require.Equal(t, 1, strings.Count(logs.String(), "console signing key created"), logs.String())
	require.NotContains(t, logs.String(), systemtest.AdminToken)
}

// onServer is a client holding c's cookies that talks to the api at base.
func (c *client) onServer(base string) *client {
	return &client{t: c.t, base: base, http: c.http}
}

// newServer starts another api process on e's database and stores.
func (e *env) newServer() string {
	e.t.Helper()
	srv, err := httpapi.New(e.Stack.Deps)
	require.NoError(e.t, err)
	hs := httptest.NewServer(srv.Handler())
	e.t.Cleanup(hs.Close)
	return hs.URL
}

// The signing key is shared by every api process, and rotating it signs
// nobody out: sessions signed with the key it replaces keep working
// everywhere, a process meeting a cookie of a newer key than it knows
// loads it, and only a second rotation ends the sessions of the first key.
func TestSigningKeyIsSharedAndRotatesWithoutSigningOut(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	_, key := e.Tenant("acme")
	first := e.client()
	first.signIn(key)
	other := e.newServer()
	require.Equal(t, http.StatusOK, first.onServer(other).get("/console/webhooks").Status, "another process accepts the session")

	id, err := console.RotateSigningKey(ctx, e.Pool, nil)
	require.NoError(t, err)
	require.EqualValues(t, 2, id)
	third := e.newServer()
	second := e.client().onServer(third)
	second.signIn(key)
	require.Equal(t, http.StatusOK, second.onServer(e.URL).get("/console/webhooks").Status, "a process loads a key newer than it knew")
	require.Equal(t, http.StatusOK, second.onServer(other).get("/console/webhooks").Status)
	for _, base := range []string{e.URL, other, third} {
		p := first.onServer(base).get("/console/webhooks")
		require.Equal(t, http.StatusOK, p.Status, "the replaced key still verifies on %s", base)
	}
	p := first.post("/console/webhooks/"+uuid.NewString()+"/pause", nil)
	require.Equal(t, http.StatusNotFound, p.Status, "the CSRF token of the first key's session still holds: %s", p.Body)

	_, err = console.RotateSigningKey(ctx, e.Pool, nil)
	require.NoError(t, err)
	require.Equal(t, 2, e.Count(`SELECT count(*) FROM console_signing_keys`), "the key replaced before the last one is deleted")
	fresh := e.newServer()
	p = first.onServer(fresh).get("/console/webhooks")
	require.Equal(t, http.StatusSeeOther, p.Status, "a session of a deleted key has ended")
	require.Contains(t, p.Location, "ended=1")
	require.Equal(t, http.StatusOK, second.onServer(fresh).get("/console/webhooks").Status)
}

// Signing keys are sealed with the secret keyring, and "api
// rotate-secret-key" seals them again under the current key.
func TestSigningKeysAreSealedAndResealed(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := context.Background()
	oldKeys, err := secret.ParseKeys([]string{"old:" + base64.StdEncoding.EncodeToString(make([]byte, 32))})
	require.NoError(t, err)
	_, err = console.RotateSigningKey(ctx, pool, oldKeys)
	require.NoError(t, err)
	var sealed string
	require.NoError(t, pool.QueryRow(ctx, `SELECT sealed_key FROM console_signing_keys`).Scan(&sealed))
	require.True(t, strings.HasPrefix(sealed, "enc:v1:old:"), sealed)

	both, err := secret.ParseKeys([]string{"new:" + base64.StdEncoding.EncodeToString([]byte(strings.Repeat("n", 32))),
		"old:" + base64.StdEncoding.EncodeToString(make([]byte, 32))})
	require.NoError(t, err)
	n, err := console.ResealSigningKeys(ctx, pool, both)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.NoError(t, pool.QueryRow(ctx, `SELECT sealed_key FROM console_signing_keys`).Scan(&sealed))
	require.True(t, strings.HasPrefix(sealed, "enc:v1:new:"), sealed)
}
