package httpapi

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/tenant"
)

// serviceKey creates a service key with the admin token and returns its id
// and key.
func (e *apiEnv) serviceKey(body map[string]any) (string, string) {
	e.t.Helper()
	r := e.do("POST", "/v1/service-keys", testAdminToken, body)
	require.Equal(e.t, http.StatusCreated, r.Status, string(r.Raw))
	key := r.Body["service_key"].(string)
	require.True(e.t, strings.HasPrefix(key, tenant.ServiceKeyPrefix))
	require.True(e.t, strings.HasPrefix(key, r.Body["prefix"].(string)))
	return r.Body["id"].(string), key
}

func TestServiceKeyActsOnlyForTheTenantsOfItsSet(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	a, keyA := e.tenantKey("a")
	b, _ := e.tenantKey("b")
	c, keyC := e.tenantKey("c")
	_, sk := e.serviceKey(map[string]any{"name": "backend", "tenant_ids": []string{a, b}})

	for _, tenantID := range []string{a, b} {
		r := e.do("POST", "/v1/webhooks", sk, map[string]any{"url": "https://8.8.8.8/" + tenantID, "events": []string{"order.*"}},
			TenantHeader, tenantID)
		require.Equal(t, http.StatusCreated, r.Status, string(r.Raw))
		r = e.do("POST", "/v1/events", sk, map[string]any{"event_type": "order.created", "data": map[string]any{"n": 1}},
			TenantHeader, tenantID)
		require.Equal(t, http.StatusAccepted, r.Status, string(r.Raw))
		require.EqualValues(t, 1, r.Body["deliveries"], "the event reaches the webhook of the tenant named")
	}
	require.Equal(t, 1, e.count(`SELECT count(*) FROM events WHERE tenant_id = $1`, a))
	require.Equal(t, 1, e.count(`SELECT count(*) FROM events WHERE tenant_id = $1`, b))

	// A tenant outside the set is the same 404 as one that does not exist.
	for _, path := range []string{"/v1/webhooks", "/v1/stats", "/v1/dlq"} {
		r := e.do("GET", path, sk, nil, TenantHeader, c)
		require.Equal(t, http.StatusNotFound, r.Status, path)
		require.Equal(t, "not_found", r.errCode())
		require.Equal(t, http.StatusNotFound, e.do("GET", path, sk, nil, TenantHeader, "0190d5f2-0000-7000-8000-000000000000").Status)
	}
	r := e.do("POST", "/v1/events", sk, map[string]any{"event_type": "order.created", "data": map[string]any{}}, TenantHeader, c)
	require.Equal(t, http.StatusNotFound, r.Status)
	require.Equal(t, 0, e.count(`SELECT count(*) FROM events WHERE tenant_id = $1`, c))
	cHook := e.createWebhook(keyC, map[string]any{})
	require.Equal(t, http.StatusNotFound, e.do("GET", "/v1/webhooks/"+cHook["id"].(string), sk, nil, TenantHeader, a).Status,
		"acting for A, C's webhook does not exist")

	// A wrong key is 401 whatever the tenant named, or none.
	for _, h := range []string{"", "not-a-uuid", a} {
		r := e.do("GET", "/v1/webhooks", "hks_"+strings.Repeat("x", 43), nil, TenantHeader, h)
		require.Equal(t, http.StatusUnauthorized, r.Status, "header %q", h)
	}

	// The tenant must be named, and a tenant's own key cannot name another.
	r = e.do("GET", "/v1/webhooks", sk, nil)
	require.Equal(t, http.StatusBadRequest, r.Status)
	require.Equal(t, "tenant_required", r.errCode())
	require.Equal(t, http.StatusNotFound, e.do("GET", "/v1/webhooks", sk, nil, TenantHeader, "not-a-uuid").Status)
	require.Equal(t, http.StatusNotFound, e.do("GET", "/v1/webhooks", keyA, nil, TenantHeader, b).Status)
	require.Equal(t, http.StatusOK, e.do("GET", "/v1/webhooks", keyA, nil, TenantHeader, a).Status)
	require.Equal(t, http.StatusOK, e.do("GET", "/v1/webhooks", keyA, nil, TenantHeader, strings.ToUpper(a)).Status,
		"a tenant id is a UUID in any case")

	// Service keys do not manage a tenant's API keys, and are no admin.
	r = e.do("GET", "/v1/api-keys", sk, nil, TenantHeader, a)
	require.Equal(t, http.StatusForbidden, r.Status)
	require.Equal(t, "forbidden_for_service_keys", r.errCode())
	require.Equal(t, http.StatusUnauthorized, e.do("GET", "/v1/tenants", sk, nil).Status)
	require.Equal(t, http.StatusUnauthorized, e.do("POST", "/v1/service-keys", sk, map[string]any{}).Status)
	require.NotContains(t, e.logBuf.String(), sk, "a service key is never logged")
}

func TestServiceKeyScopes(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	a, keyA := e.tenantKey("a")
	hook := e.createWebhook(keyA, map[string]any{})["id"].(string)
	_, reader := e.serviceKey(map[string]any{"scopes": []string{"read"}})
	_, publisher := e.serviceKey(map[string]any{"scopes": []string{"publish"}})
	managerID, manager := e.serviceKey(map[string]any{"scopes": []string{"manage"}, "tenant_ids": []string{a}})
	event := map[string]any{"event_type": "order.created", "data": map[string]any{}}

	r := e.do("POST", "/v1/events", reader, event, TenantHeader, a)
	require.Equal(t, http.StatusForbidden, r.Status, "a read-scoped key cannot publish")
	require.Equal(t, "insufficient_scope", r.errCode())
	require.Contains(t, r.Body["error"].(map[string]any)["message"], "publish")
	require.Equal(t, http.StatusOK, e.do("GET", "/v1/webhooks/"+hook, reader, nil, TenantHeader, a).Status)
	require.Equal(t, http.StatusOK, e.do("GET", "/v1/stats", reader, nil, TenantHeader, a).Status)
	require.Equal(t, http.StatusForbidden, e.do("PATCH", "/v1/webhooks/"+hook, reader, map[string]any{"active": false}, TenantHeader, a).Status)

	require.Equal(t, http.StatusAccepted, e.do("POST", "/v1/events", publisher, event, TenantHeader, a).Status)
	require.Equal(t, http.StatusForbidden, e.do("GET", "/v1/webhooks", publisher, nil, TenantHeader, a).Status)
	require.Equal(t, http.StatusForbidden, e.do("DELETE", "/v1/webhooks/"+hook, publisher, nil, TenantHeader, a).Status)

	require.Equal(t, http.StatusForbidden, e.do("POST", "/v1/events", manager, event, TenantHeader, a).Status)
	r = e.do("PATCH", "/v1/webhooks/"+hook, manager, map[string]any{"active": false}, TenantHeader, a)
	require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
	require.Equal(t, false, r.Body["active"])
	r = e.do("POST", "/v1/webhooks/"+hook+"/secret/rotate", manager, nil, TenantHeader, a)
	require.Equal(t, http.StatusOK, r.Status, string(r.Raw))

	// The audit log says which service key acted for the tenant.
	rows := e.do("GET", "/v1/audit", keyA, nil).Body["data"].([]any)
	require.NotEmpty(t, rows)
	var actions []string
	for _, row := range rows {
		m := row.(map[string]any)
		if m["actor_type"] == "service_key" {
			require.Nil(t, m["actor_key_id"])
			require.Equal(t, managerID, m["actor_service_key_id"])
			actions = append(actions, m["action"].(string))
		}
	}
	require.Equal(t, []string{"webhook.secret_rotated", "webhook.paused"}, actions,
		"the pause and the rotation were audited as the service key's: %v", rows)
}

// Every tenant route, called with a service key lacking a scope it needs,
// is refused with 403 before its handler runs; with exactly the scopes it
// needs it is not (whatever its handler then answers). Its method says
// which, except that a route sending stored payloads needs read as well
// as manage.
func TestEveryTenantRouteNeedsTheScopeItsMethodSays(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	a, _ := e.tenantKey("a")
	keys := map[string]string{}
	for _, scopes := range [][]string{{tenant.ScopePublish}, {tenant.ScopeRead}, {tenant.ScopeManage}, {tenant.ScopeManage, tenant.ScopeRead}} {
		_, keys[strings.Join(scopes, "+")] = e.serviceKey(map[string]any{"scopes": scopes})
	}
	sendsPayloads := map[string]bool{"/v1/webhooks/:id/recover": true, "/v1/webhooks/:id/deliveries/:delivery_id/retry": true,
		"/v1/events/:id/replay": true, "/v1/dlq/retry-batch": true}
	id := "0190d5f2-0000-7000-8000-000000000000"
	seen := 0
	for _, r := range e.srv.Handler().(*gin.Engine).Routes() {
		if !strings.HasPrefix(r.Path, "/v1/") || strings.HasPrefix(r.Path, "/v1/tenants") || strings.HasPrefix(r.Path, "/v1/service-keys") {
			continue
		}
		seen++
		want := tenant.ScopeManage
		switch {
		case strings.HasPrefix(r.Path, "/v1/api-keys"):
			want = scopeNone
		case r.Method == http.MethodGet:
			want = tenant.ScopeRead
		case r.Method == http.MethodPost && (r.Path == "/v1/events" || r.Path == "/v1/events/batch"):
			want = tenant.ScopePublish
		case sendsPayloads[r.Path]:
			want = tenant.ScopeManage + "+" + tenant.ScopeRead
		}
		path := strings.NewReplacer(":id", id, ":delivery_id", id).Replace(r.Path)
		for scopes, key := range keys {
			got := e.do(r.Method, path, key, nil, TenantHeader, a)
			if scopes == want {
				require.NotEqual(t, http.StatusForbidden, got.Status, "%s %s with %s: %s", r.Method, r.Path, scopes, got.Raw)
				continue
			}
			if want != scopeNone && strings.Contains(scopes, "+") && !strings.Contains(want, "+") && strings.Contains(scopes, want) {
				continue // more scopes than the route needs
			}
			require.Equal(t, http.StatusForbidden, got.Status, "%s %s with %s", r.Method, r.Path, scopes)
			code := "insufficient_scope"
			if want == scopeNone {
				code = "forbidden_for_service_keys"
			}
			require.Equal(t, code, got.errCode(), "%s %s with %s", r.Method, r.Path, scopes)
		}
	}
	require.Greater(t, seen, 25)
	require.Equal(t, sendsStoredPayloads, sendsPayloads, "the routes sending stored payloads are the ones docs/API.md lists")
}

func TestServiceKeyRevocationAndValidation(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	a, _ := e.tenantKey("a")
	id, sk := e.serviceKey(map[string]any{"name": "ci"})
	require.Equal(t, http.StatusOK, e.do("GET", "/v1/webhooks", sk, nil, TenantHeader, a).Status, "every tenant by default")

	got := e.do("GET", "/v1/service-keys/"+id, testAdminToken, nil)
	require.Equal(t, http.StatusOK, got.Status)
	require.Equal(t, []any{"publish", "read", "manage"}, got.Body["scopes"])
	require.Nil(t, got.Body["tenant_ids"], "null is every tenant")
	require.NotNil(t, got.Body["last_used_at"])
	list := e.do("GET", "/v1/service-keys", testAdminToken, nil)
	require.Equal(t, http.StatusOK, list.Status)
	require.Len(t, list.Body["data"], 1)
	require.NotContains(t, string(list.Raw), sk, "a list never shows a key")

	require.Equal(t, http.StatusNoContent, e.do("DELETE", "/v1/service-keys/"+id, testAdminToken, nil).Status)
	require.Equal(t, http.StatusUnauthorized, e.do("GET", "/v1/webhooks", sk, nil, TenantHeader, a).Status,
		"refused at once, cached or not")
	require.Equal(t, http.StatusNoContent, e.do("DELETE", "/v1/service-keys/"+id, testAdminToken, nil).Status, "revoking again")
	require.Equal(t, http.StatusNotFound, e.do("DELETE", "/v1/service-keys/0190d5f2-0000-7000-8000-000000000000", testAdminToken, nil).Status)

	for _, bad := range []struct {
		body  map[string]any
		field string
	}{
		{map[string]any{"scopes": []string{"admin"}}, "scopes"},
		{map[string]any{"scopes": []string{}}, "scopes"},
		{map[string]any{"tenant_ids": []string{}}, "tenant_ids"},
		{map[string]any{"tenant_ids": []string{"nope"}}, "tenant_ids[0]"},
		{map[string]any{"tenant_ids": []string{"0190d5f2-0000-7000-8000-000000000000"}}, "tenant_ids"},
		{map[string]any{"expires_at": "2001-01-01T00:00:00Z"}, "expires_at"},
	} {
		r := e.do("POST", "/v1/service-keys", testAdminToken, bad.body)
		require.Equal(t, http.StatusBadRequest, r.Status, "%v", bad.body)
		require.Equal(t, bad.field, r.errField(), "%v", bad.body)
	}
	require.Equal(t, 1, e.count(`SELECT count(*) FROM service_keys`))
}

func TestAdminListsTenantsAndIssuesTheirKeys(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	acme, lost := e.tenantKey("Acme 100% Corp")
	e.tenantKey("Globex")
	e.tenantKey("acme_subsidiary")

	all := e.do("GET", "/v1/tenants?limit=2", testAdminToken, nil)
	require.Equal(t, http.StatusOK, all.Status)
	require.Len(t, all.Body["data"], 2)
	next := e.do("GET", "/v1/tenants?limit=2&cursor="+all.Body["next_cursor"].(string), testAdminToken, nil)
	require.Len(t, next.Body["data"], 1)
	require.Empty(t, next.Body["next_cursor"])

	names := func(q string) []string {
		r := e.do("GET", "/v1/tenants?q="+url.QueryEscape(q), testAdminToken, nil)
		require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
		var out []string
		for _, t := range r.Body["data"].([]any) {
			out = append(out, t.(map[string]any)["name"].(string))
		}
		return out
	}
	require.ElementsMatch(t, []string{"Acme 100% Corp", "acme_subsidiary"}, names("ACME"))
	require.Equal(t, []string{"Acme 100% Corp"}, names("100%"), "% is matched literally")
	require.Equal(t, []string{"acme_subsidiary"}, names("e_s"), "_ is matched literally")
	require.Equal(t, []string{"Acme 100% Corp"}, names(acme))
	require.Empty(t, names("initech"))

	// A tenant whose key was lost gets a new one from the admin.
	r := e.do("POST", "/v1/tenants/"+acme+"/api-keys", testAdminToken, map[string]any{"name": "replacement"})
	require.Equal(t, http.StatusCreated, r.Status, string(r.Raw))
	fresh := r.Body["api_key"].(string)
	require.Equal(t, http.StatusOK, e.do("GET", "/v1/webhooks", fresh, nil).Status)
	keys := e.do("GET", "/v1/tenants/"+acme+"/api-keys", testAdminToken, nil)
	require.Len(t, keys.Body["data"], 2)
	var lostID string
	for _, k := range keys.Body["data"].([]any) {
		if m := k.(map[string]any); m["name"] == "default" {
			lostID = m["id"].(string)
		}
	}
	require.Equal(t, http.StatusNoContent, e.do("DELETE", "/v1/tenants/"+acme+"/api-keys/"+lostID, testAdminToken, nil).Status)
	require.Equal(t, http.StatusUnauthorized, e.do("GET", "/v1/webhooks", lost, nil).Status)
	other, _ := e.tenantKey("other")
	require.Equal(t, http.StatusNotFound, e.do("DELETE", "/v1/tenants/"+other+"/api-keys/"+lostID, testAdminToken, nil).Status,
		"a key is revoked only through its own tenant")
	require.Equal(t, http.StatusNotFound, e.do("POST", "/v1/tenants/0190d5f2-0000-7000-8000-000000000000/api-keys", testAdminToken, map[string]any{}).Status)
	require.Equal(t, http.StatusUnauthorized, e.do("GET", "/v1/tenants", fresh, nil).Status, "tenants are listed by the admin only")

	rows := e.do("GET", "/v1/audit", fresh, nil).Body["data"].([]any)
	var actions []string
	for _, row := range rows {
		m := row.(map[string]any)
		if m["actor_type"] == "admin" {
			actions = append(actions, m["action"].(string))
		}
	}
	require.Contains(t, actions, "api_key.created")
	require.Contains(t, actions, "api_key.revoked")
}

func TestPortalSessionsAreOpenedForTenantsInTheSet(t *testing.T) {
	t.Parallel()
	e := newAPI(t, withConsole)
	a, _ := e.tenantKey("a")
	b, _ := e.tenantKey("b")
	_, manager := e.serviceKey(map[string]any{"scopes": []string{"manage", "read"}, "tenant_ids": []string{a}})
	_, reader := e.serviceKey(map[string]any{"scopes": []string{"read"}, "tenant_ids": []string{a}})
	_, writer := e.serviceKey(map[string]any{"scopes": []string{"manage"}, "tenant_ids": []string{a}})

	r := e.do("POST", "/v1/tenants/"+a+"/portal-sessions", manager, nil)
	require.Equal(t, http.StatusCreated, r.Status, string(r.Raw))
	link, err := url.Parse(r.Body["url"].(string))
	require.NoError(t, err)
	require.Equal(t, "/portal/start", link.Path)
	require.Len(t, link.Query().Get("token"), 43)
	require.Equal(t, e.http.URL, link.Scheme+"://"+link.Host, "the link points at the api the caller reached")
	require.NotEmpty(t, r.Body["expires_at"])
	require.NotContains(t, e.logBuf.String(), link.Query().Get("token"), "the token is never logged")

	require.Equal(t, http.StatusNotFound, e.do("POST", "/v1/tenants/"+b+"/portal-sessions", manager, nil).Status)
	require.Equal(t, http.StatusForbidden, e.do("POST", "/v1/tenants/"+a+"/portal-sessions", reader, nil).Status)
	require.Equal(t, http.StatusForbidden, e.do("POST", "/v1/tenants/"+a+"/portal-sessions", writer, nil).Status,
		"the portal shows payloads and secrets: it takes read as well as manage")
	require.Equal(t, http.StatusCreated, e.do("POST", "/v1/tenants/"+b+"/portal-sessions", testAdminToken, nil).Status)
	require.Equal(t, http.StatusNotFound, e.do("POST", "/v1/tenants/0190d5f2-0000-7000-8000-000000000000/portal-sessions", testAdminToken, nil).Status)
	require.Equal(t, http.StatusUnauthorized, e.do("POST", "/v1/tenants/"+a+"/portal-sessions", "hk_wrong", nil).Status)
	require.Equal(t, http.StatusUnauthorized, e.do("POST", "/v1/tenants/nope/portal-sessions", "hks_wrong", nil).Status,
		"a wrong key is 401 whatever the tenant")
	require.Equal(t, 2, e.count(`SELECT count(*) FROM portal_sessions`))
	require.Equal(t, 1, e.count(`SELECT count(*) FROM portal_sessions WHERE created_by_service_key IS NOT NULL`))
}

func TestTestEventReachesOneWebhookWhateverItsTypes(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	_, key := e.tenantKey("a")
	_, other := e.tenantKey("b")
	hook := e.createWebhook(key, map[string]any{"events": []string{"invoice.paid"}, "filter": "data.amount > 100"})["id"].(string)
	e.createWebhook(key, map[string]any{"events": []string{"*"}})

	r := e.do("POST", "/v1/webhooks/"+hook+"/test", key, nil)
	require.Equal(t, http.StatusAccepted, r.Status, string(r.Raw))
	require.Equal(t, "hookline.test", r.Body["event_type"])
	require.EqualValues(t, 1, r.Body["deliveries"])
	require.Equal(t, 1, e.count(`SELECT count(*) FROM deliveries WHERE event_id = $1 AND webhook_id = $2`, r.Body["id"], hook),
		"only to this webhook, not to the one subscribed to everything")
	require.Equal(t, 1, e.count(`SELECT count(*) FROM deliveries WHERE event_id = $1`, r.Body["id"]))

	require.Equal(t, http.StatusNotFound, e.do("POST", "/v1/webhooks/"+hook+"/test", other, nil).Status)
	require.Equal(t, http.StatusOK, e.do("PATCH", "/v1/webhooks/"+hook, key, map[string]any{"active": false}).Status)
	r = e.do("POST", "/v1/webhooks/"+hook+"/test", key, nil)
	require.Equal(t, http.StatusConflict, r.Status)
	require.Equal(t, "webhook_inactive", r.errCode())
}
