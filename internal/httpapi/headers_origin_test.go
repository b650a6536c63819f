package httpapi

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// A custom header value is sent only to the origin it was set for: a new
// URL on another origin (scheme, host or port) clears the values not given
// again in the same request, and the answer names them; a new path on the
// same origin keeps them.
func TestHeaderValuesDoNotFollowTheURLToAnotherOrigin(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	_, key := e.tenantKey("a")
	hook := e.createWebhook(key, map[string]any{"url": "https://8.8.8.8/hooks",
		"headers": map[string]string{"X-Api-Token": "s3cret-value-1", "X-Team": "billing"}})
	path := "/v1/webhooks/" + hook["id"].(string)

	r := e.do("PATCH", path, key, map[string]any{"url": "https://8.8.8.8/other"})
	require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
	require.Len(t, r.Body["headers"], 2, "the same origin keeps the values")
	require.Nil(t, r.Body["cleared_headers"])

	for _, moved := range []string{"https://1.1.1.1/hooks", "http://1.1.1.1/hooks", "https://1.1.1.1:8443/hooks"} {
		r = e.do("PATCH", path, key, map[string]any{"headers": map[string]string{"X-Api-Token": "s3cret-value-1", "X-Team": "billing"}})
		require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
		masked := r.Body["headers"].(map[string]any)
		r = e.do("PATCH", path, key, map[string]any{"url": moved})
		require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
		require.Empty(t, r.Body["headers"], "%s: a new origin clears the values: %s", moved, r.Raw)
		require.ElementsMatch(t, []any{"X-Api-Token", "X-Team"}, r.Body["cleared_headers"], string(r.Raw))
		require.Empty(t, e.do("GET", path, key, nil).Body["headers"], "nothing stored to send to %s", moved)

		// Writing back the masked values read before is not giving them
		// again: they are the old origin's.
		e.do("PATCH", path, key, map[string]any{"url": "https://8.8.8.8/hooks", "headers": map[string]string{"X-Api-Token": "s3cret-value-1"}})
		r = e.do("PATCH", path, key, map[string]any{"url": moved, "headers": map[string]any{"X-Api-Token": masked["X-Api-Token"]}})
		require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
		require.Empty(t, r.Body["headers"], string(r.Raw))
		require.Equal(t, []any{"X-Api-Token"}, r.Body["cleared_headers"])
		e.do("PATCH", path, key, map[string]any{"url": "https://8.8.8.8/hooks"})
	}

	// Given again with the new URL, a value is kept for the new origin.
	r = e.do("PATCH", path, key, map[string]any{"url": "https://1.1.1.1/hooks", "headers": map[string]string{"X-Api-Token": "s3cret-value-2"}})
	require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
	require.Len(t, r.Body["headers"], 1)
	require.Nil(t, r.Body["cleared_headers"])
	var stored []byte
	require.NoError(t, e.pool.QueryRow(t.Context(), `SELECT headers::text FROM webhooks WHERE id = $1`, hook["id"]).Scan(&stored))
	require.NotContains(t, string(stored), "s3cret-value-1")

	// A full replacement (PUT) to another origin keeps no masked value.
	masked := r.Body["headers"].(map[string]any)
	r = e.do("PUT", path, key, map[string]any{"url": "https://8.8.4.4/hooks", "events": []string{"order.*"},
		"headers": map[string]any{"X-Api-Token": masked["X-Api-Token"]}})
	require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
	require.Empty(t, r.Body["headers"], string(r.Raw))
	require.Equal(t, []any{"X-Api-Token"}, r.Body["cleared_headers"])
}
