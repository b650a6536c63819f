package console_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The webhook page tells a manual disable from an automatic one, counts
// what a recovery would cover (also while the webhook is disabled), refuses
// to start one until the webhook is enabled, and then starts it with the
// REST API's store and audit row; the DLQ page lists it with the batch
// operations.
func TestRecoverForm(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, key := e.Tenant("acme")
	hook := e.webhook(key, "http://127.0.0.1:1/hook", map[string]any{"active": false})
	for i := range 3 {
		status, out := e.call("POST", "/v1/events", key, map[string]any{"event_type": "order.created", "data": map[string]any{"i": i}})
		require.Equal(t, http.StatusAccepted, status, out)
	}
	c := e.client()
	c.signIn(key)
	path := "/console/webhooks/" + hook.String()

	p := c.get(path)
	require.Equal(t, http.StatusOK, p.Status)
	require.Contains(t, p.Body, `<span class="badge neutral">disabled</span>`)
	require.Contains(t, p.Body, `action="`+path+`/recover"`)
	require.Contains(t, p.Body, `Enable the webhook first`)
	from := time.Now().UTC().Add(-time.Hour).Format("2006-01-02T15:04")
	form := url.Values{"from": {from}, "include": {"failed", "missed"}, "requests_per_second": {"5"}}

	form.Set("action", "count")
	p = c.post(path+"/recover", form)
	require.Equal(t, http.StatusOK, p.Status, p.Body)
	require.Contains(t, p.Body, "Would recover 3: 0 failed, 3 missed.")
	require.Zero(t, e.Count(`SELECT count(*) FROM batch_operations`), "a count starts nothing")

	form.Set("action", "recover")
	p = c.post(path+"/recover", form)
	require.Equal(t, http.StatusConflict, p.Status, p.Body)
	require.Contains(t, p.Body, "the webhook is disabled")

	status, _ := e.call("PATCH", "/v1/webhooks/"+hook.String(), key, map[string]any{"active": true})
	require.Equal(t, http.StatusOK, status)
	p = c.post(path+"/recover", form)
	require.Equal(t, http.StatusSeeOther, p.Status, p.Body)
	require.True(t, strings.HasPrefix(p.Location, "/console/dlq?notice=recovery_created#batch-"), p.Location)
	require.Equal(t, 1, e.Count(`SELECT count(*) FROM batch_operations WHERE kind = 'recover' AND recovery->>'webhook_id' = $1`, hook.String()))
	a := e.lastAudit("webhook.recovery_created")
	require.Equal(t, hook.String(), a.TargetID)
	require.Equal(t, "console", a.Details["via"])
	p = c.get("/console/dlq?notice=recovery_created")
	require.Contains(t, p.Body, "Recovery created")
	require.Contains(t, p.Body, "recovery of webhook http://127.0.0.1:1/hook: failed and missed, events from ")

	p = c.post(path+"/recover", url.Values{"from": {""}, "include": {"missed"}, "requests_per_second": {"5"}, "action": {"recover"}})
	require.Equal(t, http.StatusBadRequest, p.Status)
	require.Contains(t, p.Body, "From: enter a date and time")
	p = c.post(path+"/recover", url.Values{"from": {from}, "requests_per_second": {"5"}, "action": {"recover"}})
	require.Equal(t, http.StatusBadRequest, p.Status)
	require.Contains(t, p.Body, "Include failed deliveries, missed events, or both.")

	_, err := e.Pool.Exec(context.Background(), `UPDATE webhooks SET failing_since = now() - interval '6 days' WHERE id = $1`, hook)
	require.NoError(t, err)
	require.Equal(t, 1, e.Count(`SELECT count(*) FROM disable_failing_webhooks(0, 10)`))
	require.Contains(t, c.get(path).Body, `<span class="badge bad">disabled automatically</span>`)
	require.Contains(t, c.get("/console/webhooks").Body, `<span class="badge bad">disabled automatically</span>`)
}
