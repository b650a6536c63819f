package httpapi

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestAPIKeyRoutes(t *testing.T) {
	t.Parallel()
	e := newAPI(t) // the default configuration caches authentications for 5 s
	_, first := e.tenantKey("acme")
	_, otherKey := e.tenantKey("other")

	r := e.do("POST", "/v1/api-keys", first, map[string]any{"name": "ci"})
	require.Equal(t, http.StatusCreated, r.Status, string(r.Raw))
	second := r.Body["api_key"].(string)
	secondID := r.Body["id"].(string)
	require.True(t, strings.HasPrefix(second, r.Body["prefix"].(string)))
	require.Equal(t, "ci", r.Body["name"])
	require.Nil(t, r.Body["revoked_at"])

	list := e.do("GET", "/v1/api-keys", second, nil)
	require.Equal(t, http.StatusOK, list.Status)
	require.Len(t, list.Body["data"], 2)
	require.NotContains(t, string(list.Raw), second, "a list never shows a key")
	require.NotContains(t, string(list.Raw), first)
	require.NotContains(t, string(list.Raw), "api_key\"")
	page := e.do("GET", "/v1/api-keys?limit=1", second, nil)
	require.Len(t, page.Body["data"], 1)
	require.NotEmpty(t, page.Body["next_cursor"])

	require.Equal(t, http.StatusNotFound, e.do("DELETE", "/v1/api-keys/"+secondID, otherKey, nil).Status,
		"another tenant's key is 404")
	require.Equal(t, http.StatusOK, e.do("GET", "/v1/webhooks", second, nil).Status, "the key is now cached")
	require.Equal(t, http.StatusNoContent, e.do("DELETE", "/v1/api-keys/"+secondID, first, nil).Status)
	r = e.do("GET", "/v1/webhooks", second, nil)
	require.Equal(t, http.StatusUnauthorized, r.Status, "a revoked key is refused at once, cache or not")

	firstID := ""
	for _, k := range e.do("GET", "/v1/api-keys", first, nil).Body["data"].([]any) {
		if m := k.(map[string]any); m["revoked_at"] == nil {
			firstID = m["id"].(string)
		}
	}
	r = e.do("DELETE", "/v1/api-keys/"+firstID, first, nil)
	require.Equal(t, http.StatusConflict, r.Status)
	require.Equal(t, "last_active_key", r.errCode())

	r = e.do("POST", "/v1/api-keys", first, map[string]any{"expires_at": "2001-01-01T00:00:00Z"})
	require.Equal(t, http.StatusBadRequest, r.Status)
	require.Equal(t, "expires_at", r.errField())
	r = e.do("POST", "/v1/api-keys", first, map[string]any{"scope": "all"})
	require.Equal(t, http.StatusBadRequest, r.Status)
}

// A key stops working when it expires, even while the authentication cache
// holds it.
func TestExpiredKeyIsRefused(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	_, key := e.tenantKey("acme")
	expires := time.Now().Add(1500 * time.Millisecond)
	r := e.do("POST", "/v1/api-keys", key, map[string]any{"expires_at": expires.UTC().Format(time.RFC3339Nano)})
	require.Equal(t, http.StatusCreated, r.Status, string(r.Raw))
	short := r.Body["api_key"].(string)
	require.Equal(t, http.StatusOK, e.do("GET", "/v1/webhooks", short, nil).Status)
	require.Eventually(t, func() bool {
		return e.do("GET", "/v1/webhooks", short, nil).Status == http.StatusUnauthorized
	}, 5*time.Second, 50*time.Millisecond)
	require.False(t, time.Now().Before(expires), "refused only once expired")
	require.Equal(t, http.StatusOK, e.do("GET", "/v1/webhooks", key, nil).Status)
}
