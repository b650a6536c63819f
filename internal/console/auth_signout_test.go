package console_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Signing out ends the session on the server: its cookie, replayed from a
// copy the browser no longer holds, is no longer a session on any api
// process. Another session of the same key goes on.
func TestSignOutEndsTheSessionServerSide(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, key := e.Tenant("acme")
	c := e.client()
	c.signIn(key)
	other := e.client()
	other.signIn(key)

	u, err := url.Parse(e.URL + "/console/")
	require.NoError(t, err)
	cookies := c.http.Jar.Cookies(u)
	require.Len(t, cookies, 1)
	stolen := cookies[0].Value

	p := c.post("/console/sign-out", nil)
	require.Equal(t, http.StatusSeeOther, p.Status)

	replay := e.client()
	replay.http.Jar.SetCookies(u, []*http.Cookie{{Name: "hookline_console", Value: stolen, Path: "/console"}})
	p = replay.get("/console/webhooks")
	require.Equal(t, http.StatusSeeOther, p.Status, "the copied cookie is no session")
	require.True(t, strings.HasPrefix(p.Location, "/console/sign-in"), p.Location)

	require.Equal(t, http.StatusOK, other.get("/console/webhooks").Status, "only the session that signed out ended")
	require.Equal(t, 1, e.Count(`SELECT count(*) FROM console_sessions_ended`))

	// Signing in again starts a new session.
	c.signIn(key)
}
