package httpapi

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestAuthRefusals(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	_, key := e.tenantKey("acme")

	cases := []struct {
		name, method, path, header string
	}{
		{"tenant route without header", "GET", "/v1/webhooks", ""},
		{"tenant route with wrong key", "GET", "/v1/webhooks", "Bearer hk_wrong"},
		{"tenant route with a non-hk token", "GET", "/v1/webhooks", "Bearer nope"},
		{"tenant route with basic auth", "GET", "/v1/webhooks", "Basic " + key},
		{"tenant route with empty bearer", "GET", "/v1/webhooks", "Bearer "},
		{"tenant route with the admin token", "GET", "/v1/webhooks", "Bearer " + testAdminToken},
		{"admin route without header", "POST", "/v1/tenants", ""},
		{"admin route with a tenant key", "POST", "/v1/tenants", "Bearer " + key},
		{"admin route with a wrong token", "POST", "/v1/tenants", "Bearer " + testAdminToken + "x"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(tc.method, e.http.URL+tc.path, nil)
			require.NoError(t, err)
			if tc.header != "" {
				req.Header.Set("Authorization", tc.header)
			}
			res, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			defer res.Body.Close()
			require.Equal(t, http.StatusUnauthorized, res.StatusCode)
			require.Equal(t, "application/json; charset=utf-8", res.Header.Get("Content-Type"))
		})
	}

	ok := e.do("GET", "/v1/webhooks", key, nil)
	require.Equal(t, http.StatusOK, ok.Status)
	bad := e.do("GET", "/v1/webhooks", "hk_wrong", nil)
	require.Equal(t, "unauthorized", bad.errCode())
}

func TestAPIKeyStoredHashed(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	_, key := e.tenantKey("acme")
	require.Equal(t, 0, e.count(`SELECT count(*) FROM api_keys WHERE encode(key_hash, 'escape') LIKE '%' || $1 || '%'`, key[3:]))
	require.Equal(t, 1, e.count(`SELECT count(*) FROM api_keys WHERE key_hash = sha256($1::bytea)`, []byte(key)))
	require.NotContains(t, e.logBuf.String(), key)
}

func TestTenantAdministration(t *testing.T) {
	t.Parallel()
	e := newAPI(t)

	r := e.do("POST", "/v1/tenants", testAdminToken, map[string]any{"name": "acme"})
	require.Equal(t, http.StatusCreated, r.Status)
	require.Equal(t, map[string]any{"requests_per_minute": 1000.0, "burst": 100.0}, r.Body["rate_limit"])
	require.Equal(t, map[string]any{"requests_per_second": 1000.0, "burst": 2000.0}, r.Body["publish_rate_limit"])
	require.Regexp(t, `^hk_[A-Za-z0-9_-]{43}$`, r.Body["api_key"])
	require.NotEmpty(t, r.Body["created_at"])
	id := r.Body["id"].(string)

	r = e.do("POST", "/v1/tenants", testAdminToken, map[string]any{"name": "big",
		"rate_limit": map[string]any{"requests_per_minute": 60000, "burst": 500}, "publish_rate_limit": map[string]any{"requests_per_second": 5000}})
	require.Equal(t, http.StatusCreated, r.Status)
	require.Equal(t, map[string]any{"requests_per_minute": 60000.0, "burst": 500.0}, r.Body["rate_limit"])
	require.Equal(t, map[string]any{"requests_per_second": 5000.0, "burst": 2000.0}, r.Body["publish_rate_limit"])

	got := e.do("GET", "/v1/tenants/"+id, testAdminToken, nil)
	require.Equal(t, http.StatusOK, got.Status)
	require.NotContains(t, got.Body, "api_key")

	patched := e.do("PATCH", "/v1/tenants/"+id, testAdminToken, map[string]any{"rate_limit": map[string]any{"burst": 7}})
	require.Equal(t, http.StatusOK, patched.Status)
	require.Equal(t, map[string]any{"requests_per_minute": 1000.0, "burst": 7.0}, patched.Body["rate_limit"])
	require.Equal(t, "acme", patched.Body["name"])

	for _, tc := range []struct {
		body  any
		field string
	}{
		{map[string]any{}, "name"},
		{map[string]any{"name": "  "}, "name"},
		{map[string]any{"name": string(make([]byte, 201))}, "name"},
		{map[string]any{"name": "x", "rate_limit": map[string]any{"requests_per_minute": 0}}, "rate_limit.requests_per_minute"},
		{map[string]any{"name": "x", "rate_limit": map[string]any{"burst": -1}}, "rate_limit.burst"},
		{map[string]any{"name": "x", "publish_rate_limit": map[string]any{"requests_per_second": 0}}, "publish_rate_limit.requests_per_second"},
		{map[string]any{"name": "x", "publish_rate_limit": map[string]any{"burst": 0}}, "publish_rate_limit.burst"},
		{map[string]any{"name": 5}, "name"},
		{map[string]any{"name": "x", "plan": "gold"}, "plan"},
	} {
		r := e.do("POST", "/v1/tenants", testAdminToken, tc.body)
		require.Equal(t, http.StatusBadRequest, r.Status, "%v: %s", tc.body, r.Raw)
		require.Equal(t, tc.field, r.errField(), "%v", tc.body)
	}
	require.Equal(t, 2, e.count(`SELECT count(*) FROM tenants`), "refused creates store nothing")

	require.Equal(t, http.StatusNotFound, e.do("GET", "/v1/tenants/01900000-0000-7000-8000-000000000000", testAdminToken, nil).Status)
	require.Equal(t, http.StatusNotFound, e.do("PATCH", "/v1/tenants/not-a-uuid", testAdminToken, map[string]any{"name": "x"}).Status)
}
