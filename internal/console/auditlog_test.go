package console_test

import (
	"context"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/httpapi"
	"github.com/hookline/hookline/internal/systemtest"
)

// serviceKey creates a service key for the tenants ids and returns it and
// its prefix.
func (e *env) serviceKey(name string, ids ...uuid.UUID) (string, string) {
	e.t.Helper()
	status, out := e.call("POST", "/v1/service-keys", systemtest.AdminToken, map[string]any{"name": name, "tenant_ids": ids})
	require.Equal(e.t, http.StatusCreated, status, out)
	return out["service_key"].(string), out["prefix"].(string)
}

// actFor sends a request with a service key acting for tenantID.
func (e *env) actFor(method, path, serviceKey string, tenantID uuid.UUID) int {
	e.t.Helper()
	req, err := http.NewRequest(method, e.URL+path, nil)
	require.NoError(e.t, err)
	req.Header.Set("Authorization", "Bearer "+serviceKey)
	req.Header.Set(httpapi.TenantHeader, tenantID.String())
	res, err := http.DefaultClient.Do(req)
	require.NoError(e.t, err)
	require.NoError(e.t, res.Body.Close())
	return res.StatusCode
}

var (
	auditRowPattern = regexp.MustCompile(`(?s)<tr>\s*<td data-label="When">.*?</tr>`)
	whoCell         = regexp.MustCompile(`<td data-label="Who">([^<]*)</td>`)
	actionCell      = regexp.MustCompile(`<td data-label="Action"><code>([^<]*)</code></td>`)
	detailsCell     = regexp.MustCompile(`(?s)<td class="details" data-label="Details">(.*?)</td>`)
)

// auditRows reads the audit page's rows: who, action and details (HTML).
func auditRows(body string) []map[string]string {
	var out []map[string]string
	for _, row := range auditRowPattern.FindAllString(body, -1) {
		r := map[string]string{}
		if m := whoCell.FindStringSubmatch(row); m != nil {
			r["who"] = m[1]
		}
		if m := actionCell.FindStringSubmatch(row); m != nil {
			r["action"] = m[1]
		}
		if m := detailsCell.FindStringSubmatch(row); m != nil {
			r["details"] = m[1]
		}
		out = append(out, r)
	}
	return out
}

// whoDid is the Who of the newest row of action.
func whoDid(rows []map[string]string, action string) string {
	for _, r := range rows {
		if r["action"] == action {
			return r["who"]
		}
	}
	return ""
}

// The audit page names each kind of actor and spells out the details as
// key/value pairs, escaped, not as JSON.
func TestAuditPageNamesActorsAndDetails(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tenantID, key := e.Tenant("acme")
	hook := e.webhook(key, "http://127.0.0.1:1/hook", nil)
	serviceKey, servicePrefix := e.serviceKey("billing backend", tenantID)
	require.Equal(t, http.StatusNoContent, e.actFor("DELETE", "/v1/webhooks/"+hook.String(), serviceKey, tenantID))
	e.portalClient(tenantID, serviceKey)
	_, err := e.Pool.Exec(context.Background(), `INSERT INTO audit_log (id, tenant_id, actor_type, action, target_type, target_id, details)
VALUES (gen_random_uuid(), $1, 'system', 'webhook.auto_disabled', 'webhook', $2, $3)`, tenantID, hook, map[string]any{
		"reason":      map[string]any{"failing_for_ms": 3600000, "last_status": 503},
		"event_types": []string{"order.created", "invoice.paid"},
		"attempts":    []map[string]any{{"n": 1}, {"n": 2}},
		"note":        "<script>alert(1)</script>",
		"long":        strings.Repeat("abcdefghij", 30),
		"gone":        nil,
	})
	require.NoError(t, err)
	c := e.client()
	c.signIn(key)

	p := c.get("/console/audit")
	require.Equal(t, http.StatusOK, p.Status)
	rows := auditRows(p.Body)
	require.NotEmpty(t, rows)
	require.Equal(t, "admin token", whoDid(rows, "tenant.created"))
	require.Regexp(t, `^API key default \(hk_[A-Za-z0-9_-]{8}…\)$`, whoDid(rows, "console.signed_in"))
	require.Equal(t, "service key billing backend ("+servicePrefix+"…)", whoDid(rows, "webhook.deleted"))
	require.Equal(t, "portal session (opened by service key billing backend ("+servicePrefix+"…))", whoDid(rows, "portal.session_started"))
	require.Equal(t, "hookline (automatic)", whoDid(rows, "webhook.auto_disabled"))

	var details string
	for _, r := range rows {
		require.NotContains(t, r["details"], "{", r["action"])
		require.NotContains(t, r["details"], "&#34;", r["action"])
		if r["action"] == "webhook.auto_disabled" {
			details = r["details"]
		}
	}
	for _, want := range []string{"<dt>reason.failing_for_ms</dt><dd>3600000</dd>", "<dt>reason.last_status</dt><dd>503</dd>",
		"<dt>event_types</dt><dd>order.created, invoice.paid</dd>", "<dt>attempts.0.n</dt><dd>1</dd>", "<dt>attempts.1.n</dt><dd>2</dd>",
		"<dt>gone</dt><dd>none</dd>", "<dt>note</dt><dd>&lt;script&gt;alert(1)&lt;/script&gt;</dd>", `<dt>long</dt><dd title="` + strings.Repeat("abcdefghij", 30) + `">`} {
		require.Contains(t, details, want)
	}
	require.Contains(t, details, strings.Repeat("abcdefghij", 7)+"abcdefghi…</dd>", "a long value is cut to 80 characters")
	require.NotContains(t, p.Body, "<script>")
}

// A portal session the admin opened is named so.
func TestAuditPageNamesAdminPortalSessions(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tenantID, key := e.Tenant("acme")
	e.portalClient(tenantID, systemtest.AdminToken)
	c := e.client()
	c.signIn(key)
	rows := auditRows(c.get("/console/audit").Body)
	require.Equal(t, "portal session (opened by the admin)", whoDid(rows, "portal.session_started"))
	for _, r := range rows {
		if r["action"] == "console.signed_in" {
			require.Equal(t, "<dl class=\"kv\"><dt>via</dt><dd>console</dd></dl>", strings.TrimSpace(r["details"]))
		}
	}
}
