package httpapi

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// auditRows returns the tenant's audit rows, oldest first, keyed by
// nothing: each row as the API shows it.
func (e *apiEnv) auditRows(key string) []map[string]any {
	e.t.Helper()
	r := e.do("GET", "/v1/audit?limit=100", key, nil)
	require.Equal(e.t, http.StatusOK, r.Status, string(r.Raw))
	var rows []map[string]any
	for _, row := range r.Body["data"].([]any) {
		rows = append([]map[string]any{row.(map[string]any)}, rows...)
	}
	return rows
}

// Every change to a webhook through the REST API leaves an audit row
// naming who acted: created, updated (with the fields changed, never a
// header value or the secret), paused, resumed and test_sent.
func TestEveryWebhookChangeIsAudited(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	a, key := e.tenantKey("a")
	serviceID, sk := e.serviceKey(map[string]any{"scopes": []string{"manage"}, "tenant_ids": []string{a}})
	r := e.do("POST", "/v1/webhooks", sk, map[string]any{"url": "https://8.8.8.8/hooks", "events": []string{"order.*"},
		"headers": map[string]string{"X-Api-Token": "header-value-one"}}, TenantHeader, a)
	require.Equal(t, http.StatusCreated, r.Status, string(r.Raw))
	hook, secret := r.Body["id"].(string), r.Body["secret"].(string)
	path := "/v1/webhooks/" + hook

	steps := []struct {
		body   map[string]any
		action string
	}{
		{map[string]any{"url": "https://1.1.1.1/hooks", "events": []string{"*"}, "headers": map[string]string{"X-Api-Token": "header-value-two"}}, "webhook.updated"},
		{map[string]any{"active": false}, "webhook.paused"},
		{map[string]any{"active": true}, "webhook.resumed"},
	}
	for _, s := range steps {
		r = e.do("PATCH", path, key, s.body)
		require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
	}
	r = e.do("POST", path+"/test", key, nil)
	require.Equal(t, http.StatusAccepted, r.Status, string(r.Raw))
	testEvent := r.Body["id"].(string)

	rows := e.auditRows(key)
	var actions []string
	byAction := map[string]map[string]any{}
	for _, row := range rows {
		if row["target_id"] == hook {
			actions = append(actions, row["action"].(string))
			byAction[row["action"].(string)] = row
		}
	}
	require.Equal(t, []string{"webhook.created", "webhook.updated", "webhook.paused", "webhook.resumed", "webhook.test_sent"}, actions)

	created := byAction["webhook.created"]
	require.Equal(t, "service_key", created["actor_type"])
	require.Equal(t, serviceID, created["actor_service_key_id"])
	require.Equal(t, "https://8.8.8.8/hooks", created["details"].(map[string]any)["url"])

	updated := byAction["webhook.updated"]
	require.Equal(t, "api_key", updated["actor_type"])
	details := updated["details"].(map[string]any)
	require.ElementsMatch(t, []any{"url", "events", "headers"}, details["changed"])
	require.Equal(t, map[string]any{"from": "https://8.8.8.8/hooks", "to": "https://1.1.1.1/hooks"}, details["url"])
	require.Equal(t, testEvent, byAction["webhook.test_sent"]["details"].(map[string]any)["event_id"])

	raw, err := json.Marshal(rows)
	require.NoError(t, err)
	for _, secretValue := range []string{"header-value-one", "header-value-two", secret} {
		require.NotContains(t, string(raw), secretValue, "no header value or secret in the audit log")
	}
}
