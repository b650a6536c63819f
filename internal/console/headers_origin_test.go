package console_test

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"
)

// The edit form of an endpoint with custom headers says, before saving,
// that a URL on another origin clears their values; saving one clears
// them and says so. A new path on the same origin keeps them.
func TestEditFormSaysANewOriginClearsHeaderValues(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, key := e.Tenant("acme")
	hook := e.webhook(key, "http://127.0.0.1:1/a", map[string]any{"headers": map[string]string{"X-Api-Token": "s3cret-value-1"}})
	c := e.client()
	c.signIn(key)
	edit := "/console/webhooks/" + hook.String() + "/edit"

	p := c.get(edit)
	require.Equal(t, http.StatusOK, p.Status)
	require.Contains(t, p.Body, "X-Api-Token")
	require.Contains(t, p.Body, "another origin")

	p = c.post(edit, url.Values{"url": {"http://127.0.0.1:1/b"}, "events": {"*"}})
	require.Equal(t, http.StatusSeeOther, p.Status, p.Body)
	require.Equal(t, 1, e.Count(`SELECT count(*) FROM webhooks WHERE id = $1 AND headers ? 'X-Api-Token'`, hook), "the same origin keeps them")

	c.get(edit)
	p = c.post(edit, url.Values{"url": {"http://127.0.0.1:2/b"}, "events": {"*"}})
	require.Equal(t, http.StatusSeeOther, p.Status, p.Body)
	require.Zero(t, e.Count(`SELECT count(*) FROM webhooks WHERE id = $1 AND headers ? 'X-Api-Token'`, hook), "another origin clears them")
	p = c.get(p.Location)
	require.Equal(t, http.StatusOK, p.Status)
	require.Contains(t, p.Body, "custom headers were cleared")
}
