package console_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// auditRow is the newest audit row of an action.
type auditRow struct {
	KeyID      *uuid.UUID
	TargetType string
	TargetID   string
	Details    map[string]any
	RemoteAddr string
}

func (e *env) lastAudit(action string) auditRow {
	e.t.Helper()
	var r auditRow
	var details []byte
	err := e.Pool.QueryRow(context.Background(), `SELECT actor_key_id, target_type, target_id, details, remote_addr
		FROM audit_log WHERE action = $1 ORDER BY id DESC LIMIT 1`, action).Scan(&r.KeyID, &r.TargetType, &r.TargetID, &details, &r.RemoteAddr)
	require.NoError(e.t, err, action)
	require.NoError(e.t, json.Unmarshal(details, &r.Details))
	return r
}

// keyID is the id of the tenant's only key.
func (e *env) keyID(tenantID uuid.UUID) uuid.UUID {
	e.t.Helper()
	var id uuid.UUID
	require.NoError(e.t, e.Pool.QueryRow(context.Background(), `SELECT id FROM api_keys WHERE tenant_id = $1`, tenantID).Scan(&id))
	return id
}

func TestRetryAction(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tenantID, key := e.Tenant("acme")
	hook := e.webhook(key, "http://127.0.0.1:1/hook", nil)
	dead := e.seed(tenantID, hook, 1, "order.created", "exhausted")[0]
	done := e.seed(tenantID, hook, 1, "order.created", "succeeded")[0]
	c := e.client()
	c.signIn(key)
	c.get("/console/deliveries/" + dead.String())

	p := c.post("/console/deliveries/"+dead.String()+"/retry", url.Values{"priority": {"high"}})
	require.Equal(t, http.StatusSeeOther, p.Status, p.Body)
	require.True(t, strings.HasPrefix(p.Location, "/console/deliveries/"), p.Location)
	var retry uuid.UUID
	var priority, status string
	require.NoError(t, e.Pool.QueryRow(context.Background(), `SELECT id, priority FROM deliveries WHERE retry_of = $1`, dead).Scan(&retry, &priority))
	require.Equal(t, "/console/deliveries/"+retry.String()+"?notice=retried", p.Location)
	require.Equal(t, "high", priority)
	require.NoError(t, e.Pool.QueryRow(context.Background(), `SELECT status FROM deliveries WHERE id = $1`, dead).Scan(&status))
	require.Equal(t, "exhausted", status, "the original is kept as it was")

	a := e.lastAudit("delivery.retried")
	require.Equal(t, e.keyID(tenantID), *a.KeyID)
	require.Equal(t, "delivery", a.TargetType)
	require.Equal(t, dead.String(), a.TargetID)
	require.Equal(t, retry.String(), a.Details["retry_delivery_id"])
	require.Equal(t, "console", a.Details["via"])
	require.Equal(t, "127.0.0.1", a.RemoteAddr)

	page := c.get(p.Location)
	require.Contains(t, page.Body, "Retry created.")
	require.Contains(t, page.Body, `http-equiv="refresh"`, "a pending delivery reloads until it finishes")

	// A second retry while the first is in flight, and a retry of a
	// delivery that did not fail, are refused and say why.
	p = c.post("/console/deliveries/"+dead.String()+"/retry", nil)
	require.Equal(t, http.StatusConflict, p.Status)
	require.Contains(t, p.Body, "already in flight")
	p = c.post("/console/deliveries/"+done.String()+"/retry", nil)
	require.Equal(t, http.StatusConflict, p.Status)
	require.Contains(t, p.Body, "not exhausted")
	p = c.post("/console/deliveries/"+dead.String()+"/retry", url.Values{"priority": {"urgent"}})
	require.Equal(t, http.StatusBadRequest, p.Status)
	require.Equal(t, 1, e.Count(`SELECT count(*) FROM deliveries WHERE retry_of IS NOT NULL`))
}

func TestReplayAction(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tenantID, key := e.Tenant("acme")
	hook := e.webhook(key, "http://127.0.0.1:1/one", nil)
	e.webhook(key, "http://127.0.0.1:1/two", nil)
	d := e.seed(tenantID, hook, 1, "order.created", "succeeded")[0]
	var eventID uuid.UUID
	require.NoError(t, e.Pool.QueryRow(context.Background(), `SELECT event_id FROM deliveries WHERE id = $1`, d).Scan(&eventID))
	c := e.client()
	c.signIn(key)

	// To this webhook only: the page of the new delivery.
	p := c.post("/console/events/"+eventID.String()+"/replay", url.Values{"target": {"webhook"},
		"webhook_id": {hook.String()}, "delivery_id": {d.String()}})
	require.Equal(t, http.StatusSeeOther, p.Status, p.Body)
	var replay, newDelivery uuid.UUID
	require.NoError(t, e.Pool.QueryRow(context.Background(), `SELECT e.id, d.id FROM events e JOIN deliveries d ON d.event_id = e.id
		WHERE e.replay_of = $1`, eventID).Scan(&replay, &newDelivery))
	require.Equal(t, "/console/deliveries/"+newDelivery.String()+"?notice=replayed", p.Location)
	a := e.lastAudit("event.replayed")
	require.Equal(t, eventID.String(), a.TargetID)
	require.Equal(t, replay.String(), a.Details["replay_event_id"])
	require.Equal(t, hook.String(), a.Details["webhook_id"])

	// To every subscribed webhook: back to the delivery, with a notice.
	p = c.post("/console/events/"+eventID.String()+"/replay", url.Values{"target": {"all"},
		"webhook_id": {hook.String()}, "delivery_id": {d.String()}})
	require.Equal(t, http.StatusSeeOther, p.Status, p.Body)
	require.Equal(t, "/console/deliveries/"+d.String()+"?notice=replayed_all", p.Location)
	require.Equal(t, 2, e.Count(`SELECT count(*) FROM events WHERE replay_of = $1`, eventID))
	require.Equal(t, 3, e.Count(`SELECT count(*) FROM deliveries d JOIN events e ON e.id = d.event_id WHERE e.replay_of = $1`, eventID))

	// Once retention removed the payload, the replay is refused.
	_, err := e.Pool.Exec(context.Background(), `UPDATE events SET data = NULL WHERE id = $1`, eventID)
	require.NoError(t, err)
	p = c.post("/console/events/"+eventID.String()+"/replay", url.Values{"delivery_id": {d.String()}})
	require.Equal(t, http.StatusConflict, p.Status)
	require.Contains(t, p.Body, "removed by retention")
}

func TestCircuitActions(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tenantID, key := e.Tenant("acme")
	hook := e.webhook(key, "http://127.0.0.1:1/hook", nil)
	c := e.client()
	c.signIn(key)
	path := "/console/webhooks/" + hook.String()
	c.get(path)

	p := c.post(path+"/circuit-breaker", url.Values{"action": {"force_open"}, "duration_seconds": {"3600"}})
	require.Equal(t, http.StatusSeeOther, p.Status, p.Body)
	require.Equal(t, path+"?notice=force_open", p.Location)
	st, _, err := e.Stack.Deps.Overrides.Load(context.Background(), hook)
	require.NoError(t, err)
	require.Equal(t, "open", *st.ForcedState)
	require.WithinDuration(t, time.Now().Add(time.Hour), *st.ForcedUntil, time.Minute)
	page := c.get(p.Location)
	require.Contains(t, page.Body, `<span class="badge bad">open</span> forced open, until`)
	require.Contains(t, page.Body, "Circuit forced open")
	a := e.lastAudit("webhook.circuit_breaker_overridden")
	require.Equal(t, "force_open", a.Details["action"])
	require.Equal(t, e.keyID(tenantID), *a.KeyID)

	p = c.post(path+"/circuit-breaker", url.Values{"action": {"force_close"}})
	require.Equal(t, http.StatusSeeOther, p.Status)
	st, _, err = e.Stack.Deps.Overrides.Load(context.Background(), hook)
	require.NoError(t, err)
	require.Equal(t, "closed", *st.ForcedState)
	require.Nil(t, st.ForcedUntil)
	require.Contains(t, c.get(p.Location).Body, "forced closed, until reset")

	p = c.post(path+"/circuit-breaker", url.Values{"action": {"reset"}})
	require.Equal(t, http.StatusSeeOther, p.Status)
	st, _, err = e.Stack.Deps.Overrides.Load(context.Background(), hook)
	require.NoError(t, err)
	require.Nil(t, st.ForcedState)
	require.Equal(t, 3, e.Count(`SELECT count(*) FROM audit_log WHERE action = 'webhook.circuit_breaker_overridden'`))

	for _, form := range []url.Values{{"action": {"explode"}}, {"action": {"force_open"}, "duration_seconds": {"7"}}} {
		p = c.post(path+"/circuit-breaker", form)
		require.Equal(t, http.StatusBadRequest, p.Status, form)
	}
	require.Equal(t, 3, e.Count(`SELECT count(*) FROM audit_log WHERE action = 'webhook.circuit_breaker_overridden'`))
}

func TestBatchActions(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tenantID, key := e.Tenant("acme")
	hook := e.webhook(key, "http://127.0.0.1:1/hook", nil)
	e.seed(tenantID, hook, 3, "order.created", "exhausted")
	e.seed(tenantID, hook, 2, "invoice.paid", "exhausted")
	c := e.client()
	c.signIn(key)

	p := c.get("/console/dlq?failure_category=server_error&event_type=order.created")
	require.Equal(t, http.StatusOK, p.Status)
	require.Contains(t, p.Body, "<h2 id=\"counts-h\">3 waiting</h2>")
	require.Contains(t, p.Body, `<td><code>server_error</code></td><td class="num">3</td>`)
	require.Len(t, deliveryIDs(p.Body), 3)

	// The batch form retries what the page's filter selects.
	p = c.post("/console/dlq/batches", url.Values{"event_type": {"order.created"}, "failure_category": {"server_error"},
		"requests_per_second": {"25"}, "priority": {"low"}})
	require.Equal(t, http.StatusSeeOther, p.Status, p.Body)
	require.Contains(t, p.Location, "notice=batch_created")
	require.Contains(t, p.Location, "event_type=order.created")
	var id uuid.UUID
	var rps int
	var prio string
	var filter []byte
	require.NoError(t, e.Pool.QueryRow(context.Background(), `SELECT id, requests_per_second, priority, filter FROM batch_operations`).
		Scan(&id, &rps, &prio, &filter))
	require.Equal(t, 25, rps)
	require.Equal(t, "low", prio)
	require.JSONEq(t, `{"event_types": ["order.created"], "failure_categories": ["server_error"]}`, string(filter))
	a := e.lastAudit("dlq.batch_retry_created")
	require.Equal(t, id.String(), a.TargetID)
	require.EqualValues(t, 25, a.Details["requests_per_second"])

	page := c.get(p.Location)
	require.Contains(t, page.Body, `id="batch-`+id.String()+`"`)
	require.Contains(t, page.Body, `<meta http-equiv="refresh" content="2">`, "a pending batch reloads the page")
	require.Contains(t, page.Body, "event type order.created; category server_error")

	// Refusals: no filter, bad rate.
	for _, form := range []url.Values{{"requests_per_second": {"5"}}, {"webhook_id": {hook.String()}, "requests_per_second": {"0"}},
		{"webhook_id": {hook.String()}, "requests_per_second": {"fast"}}, {"failure_category": {"bad_luck"}, "requests_per_second": {"5"}}} {
		p = c.post("/console/dlq/batches", form)
		require.Equal(t, http.StatusBadRequest, p.Status, form)
		require.Contains(t, p.Body, `role="alert"`)
		require.NotContains(t, p.Body, `http-equiv="refresh"`)
	}
	require.Equal(t, 1, e.Count(`SELECT count(*) FROM batch_operations`))

	p = c.post("/console/dlq/batches/"+id.String()+"/cancel", nil)
	require.Equal(t, http.StatusSeeOther, p.Status, p.Body)
	require.Equal(t, "cancelled", batchState(e, id.String()))
	require.Equal(t, id.String(), e.lastAudit("dlq.batch_retry_cancelled").TargetID)
	p = c.post("/console/dlq/batches/"+id.String()+"/cancel", nil)
	require.Equal(t, http.StatusConflict, p.Status)
	require.Contains(t, p.Body, "already finished")
	require.NotContains(t, c.get("/console/dlq").Body, `http-equiv="refresh"`)
}

// The audit page lists what was done, by which key, from where.
func TestAuditPage(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tenantID, key := e.Tenant("acme")
	hook := e.webhook(key, "http://127.0.0.1:1/hook", nil)
	dead := e.seed(tenantID, hook, 1, "order.created", "exhausted")[0]
	c := e.client()
	c.signIn(key)
	c.get("/console/deliveries/" + dead.String())
	require.Equal(t, http.StatusSeeOther, c.post("/console/deliveries/"+dead.String()+"/retry", nil).Status)

	p := c.get("/console/audit")
	require.Equal(t, http.StatusOK, p.Status)
	for _, want := range []string{"delivery.retried", "console.signed_in", "tenant.created",
		`<a href="/console/deliveries/` + dead.String() + `">`, "default (hk_", "127.0.0.1", "admin token"} {
		require.Contains(t, p.Body, want)
	}
	require.Less(t, strings.Index(p.Body, "delivery.retried"), strings.Index(p.Body, "console.signed_in"), "newest first")
}
