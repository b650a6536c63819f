package httpapi

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/event"
	"github.com/hookline/hookline/internal/tenant"
	"github.com/hookline/hookline/internal/webhook"
)

// The fuzz targets send hostile input to every JSON body and query
// parameter of the API. Whatever arrives, the answer is a 2xx, or a 4xx
// with the JSON error shape that changed nothing; never a 5xx (a panic is
// one: recoverJSON answers it with 500). `go test` runs the seeds below;
// `go test -fuzz FuzzWebhookBodies ./internal/httpapi` explores further.
//
// Each target serves all its inputs from one API and database, so inputs
// run one after another (a fuzz function may not call t.Parallel), and
// "changed nothing" is a comparison of the database before and after.

// hostileJSON are JSON values to put where a field's value goes: text that
// Postgres cannot store, nesting at and below Go's decoder limit (10,000),
// and arrays as large as the body limits allow.
func hostileJSON() [][]byte {
	deep := func(open, close string, n int) []byte {
		return []byte(strings.Repeat(open, n) + "1" + strings.Repeat(close, n))
	}
	return [][]byte{
		[]byte("\"caf\xe9\""),                     // invalid UTF-8
		[]byte("\"\xed\xa0\x80\""),                // a surrogate encoded as UTF-8, invalid too
		[]byte(`"a\u0000b"`),                      // NUL: refused by text, and by jsonb as \u0000
		[]byte("\"a\x00b\""),                      // a raw NUL: not JSON
		[]byte(`"\ud800"`),                        // lone high surrogate
		[]byte(`"x\udc00"`),                       // lone low surrogate
		[]byte(`"\ud800\u0041"`),                  // high surrogate without its low half
		[]byte("{\"\xff\":1,\"k\\u0000\":\"v\"}"), // hostile keys
		[]byte("[\"ok\",\"\xc3\"]"),
		deep("[", "]", 10_000),
		deep("[", "]", 4_000),
		deep(`{"a":`, "}", 2_000),
		[]byte("[" + strings.Repeat("0,", 30_000) + "0]"),
		[]byte("[" + strings.Repeat(`"a",`, 12_000) + `"a"]`),
	}
}

// hostileQuery are query parameter values, sent percent-encoded.
func hostileQuery() []string {
	return []string{"\xff", "a\x00b", "\x00", "\xed\xa0\x80", "caf\xe9", strings.Repeat("[", 10_000),
		strings.Repeat("a,", 20_000), strings.Repeat("9", 400), "-1"}
}

// fuzzFixture is one API with a tenant, a webhook, an event and its
// delivery, shared by the inputs of one fuzz target.
type fuzzFixture struct {
	env *apiEnv
	key string
	ids *strings.Replacer
}

func newFuzzFixture(f *testing.F) *fuzzFixture {
	f.Helper()
	e := startAPI(f)
	ctx := context.Background()
	tn, err := tenant.Build(tenant.WithDefaults(e.srv.cfg.Defaults), tenant.Input{Name: ptr("fuzz")}, true)
	require.NoError(f, err)
	tn, key, err := e.srv.tenants.Create(ctx, tn)
	require.NoError(f, err)
	w, err := e.srv.rules.Build(ctx, webhook.Webhook{TenantID: tn.ID},
		webhook.Input{URL: ptr("https://8.8.8.8/hooks"), Events: []string{"order.*"}}, true)
	require.NoError(f, err)
	w, err = e.srv.webhooks.Create(ctx, w)
	require.NoError(f, err)
	res, err := e.srv.events.Publish(ctx, tn.ID, event.Request{EventType: "order.created", Data: []byte(`{"n":1}`)})
	require.NoError(f, err)
	ev, err := e.srv.events.Get(ctx, tn.ID, res.ID)
	require.NoError(f, err)
	require.Len(f, ev.Deliveries, 1)
	return &fuzzFixture{env: e, key: key, ids: strings.NewReplacer("{tenant}", tn.ID.String(), "{hook}", w.ID.String(),
		"{event}", ev.ID.String(), "{delivery}", ev.Deliveries[0].ID.String())}
}

func ptr[T any](v T) *T { return &v }

// bodyRoute is a route taking a JSON body, with templates in which %v
// stands for a hostile value: one template per field, and one for the
// body as a whole.
type bodyRoute struct {
	method, path string
	admin        bool
	templates    []string
}

// seed adds every hostile value in every template of every route.
func seedBodies(f *testing.F, routes []bodyRoute) {
	for i, r := range routes {
		for _, tpl := range r.templates {
			before, after, ok := strings.Cut(tpl, "%v")
			require.True(f, ok, tpl)
			for _, v := range hostileJSON() {
				f.Add(uint8(i), []byte(before+string(v)+after))
			}
		}
	}
}

// fuzzBodies is the body of the JSON fuzz targets.
func fuzzBodies(f *testing.F, routes []bodyRoute) {
	seedBodies(f, routes)
	fx := newFuzzFixture(f)
	f.Fuzz(func(t *testing.T, route uint8, body []byte) {
		r := routes[int(route)%len(routes)]
		token := fx.key
		if r.admin {
			token = testAdminToken
		}
		fx.check(t, r.method, fx.ids.Replace(r.path), token, body)
	})
}

// check sends one request and holds the answer to the rules above.
func (fx *fuzzFixture) check(t *testing.T, method, path, token string, body []byte) {
	e := fx.env.forTest(t)
	before := e.snapshot()
	var r resp
	if body == nil {
		r = e.do(method, path, token, nil)
	} else {
		r = e.do(method, path, token, body)
	}
	require.Less(t, r.Status, 500, "%s %.200s answered %s", method, path, r.Raw)
	if r.Status < 400 {
		return
	}
	require.True(t, strings.HasPrefix(r.Header.Get("Content-Type"), "application/json"), "%d %s", r.Status, r.Raw)
	refusal, ok := r.Body["error"].(map[string]any)
	require.True(t, ok, "%s", r.Raw)
	require.NotEmpty(t, refusal["code"], "%s", r.Raw)
	require.NotEmpty(t, refusal["message"], "%s", r.Raw)
	require.Equal(t, before, e.snapshot(), "a refused request changed nothing: %s", r.Raw)
}

// snapshotSQL sums up what the API may write. Events and deliveries are
// counted, not hashed: the outbox marks deliveries enqueued in the
// background. last_used_at is left out: authentication writes it.
const snapshotSQL = `SELECT concat_ws(' ',
  (SELECT md5(coalesce(string_agg(t::text, '|' ORDER BY t.id), '')) FROM tenants t),
  (SELECT md5(coalesce(string_agg(concat_ws(',', k.id, k.name, k.expires_at, k.revoked_at), '|' ORDER BY k.id), '')) FROM api_keys k),
  (SELECT md5(coalesce(string_agg(w::text, '|' ORDER BY w.id), '')) FROM webhooks w),
  (SELECT md5(coalesce(string_agg(c::text, '|' ORDER BY c::text), '')) FROM circuit_breaker_states c),
  (SELECT md5(coalesce(string_agg(b::text, '|' ORDER BY b.id), '')) FROM batch_operations b),
  (SELECT count(*) FROM events), (SELECT count(*) FROM deliveries), (SELECT count(*) FROM audit_log))`

func (e *apiEnv) snapshot() string {
	e.t.Helper()
	var s string
	require.NoError(e.t, e.pool.QueryRow(context.Background(), snapshotSQL).Scan(&s))
	return s
}

func FuzzTenantBodies(f *testing.F) {
	tenantFields := []string{`{"name":%v}`, `{"name":"t","rate_limit":%v}`,
		`{"name":"t","rate_limit":{"requests_per_minute":%v}}`, `{"name":"t","publish_rate_limit":{"burst":%v}}`, `%v`}
	fuzzBodies(f, []bodyRoute{
		{"POST", "/v1/tenants", true, tenantFields},
		{"PATCH", "/v1/tenants/{tenant}", true, tenantFields},
		{"POST", "/v1/api-keys", false, []string{`{"name":%v}`, `{"expires_at":%v}`, `%v`}},
	})
}

func FuzzWebhookBodies(f *testing.F) {
	full := []string{`{"url":%v,"events":["a"]}`}
	for _, field := range []string{`"events":%v`, `"events":[%v]`, `"secret":%v`, `"active":%v`, `"retry_config":%v`,
		`"retry_config":{"schedule_ms":%v}`, `"circuit_breaker_config":%v`, `"rate_limit":{"burst":%v}`,
		`"ordering_guarantee":%v`, `"headers":%v`, `"headers":{"X-A":%v}`, `"metadata":%v`, `"metadata":{"k":%v}`,
		`"verify_url":%v`} {
		full = append(full, `{"url":"https://8.8.8.8/h","events":["a"],`+field+`}`)
	}
	fuzzBodies(f, []bodyRoute{
		{"POST", "/v1/webhooks", false, append(full, `%v`)},
		{"PUT", "/v1/webhooks/{hook}", false, []string{full[0], `{"url":"https://8.8.8.8/h","events":["a"],"metadata":%v}`,
			`{"url":"https://8.8.8.8/h","events":%v}`, `%v`}},
		{"PATCH", "/v1/webhooks/{hook}", false, []string{`{"url":%v}`, `{"events":%v}`, `{"metadata":%v}`,
			`{"headers":{"X-A":%v}}`, `{"retry_config":{"max_attempts":%v}}`, `%v`}},
		{"POST", "/v1/webhooks/{hook}/secret/rotate", false, []string{`{"secret":%v}`, `{"grace_period_seconds":%v}`, `%v`}},
		{"PATCH", "/v1/webhooks/{hook}/circuit-breaker", false, []string{`{"action":%v}`,
			`{"action":"force_open","duration_seconds":%v}`, `%v`}},
	})
}

func FuzzEventBodies(f *testing.F) {
	fuzzBodies(f, []bodyRoute{
		{"POST", "/v1/events", false, []string{`{"event_type":%v,"data":{}}`, `{"event_type":"a","data":%v}`,
			`{"event_type":"a","data":{"k":%v}}`, `{"event_type":"a","data":{},"source":%v}`,
			`{"event_type":"a","data":{},"idempotency_key":%v}`, `{"event_type":"a","data":{},"priority":%v}`, `%v`}},
		{"POST", "/v1/events/{event}/replay", false, []string{`{"webhook_id":%v}`, `%v`}},
	})
}

func FuzzDLQBodies(f *testing.F) {
	fuzzBodies(f, []bodyRoute{
		{"POST", "/v1/webhooks/{hook}/deliveries/{delivery}/retry", false, []string{`{"priority":%v}`, `%v`}},
		{"POST", "/v1/dlq/retry-batch", false, []string{`{"filter":%v}`, `{"filter":{"event_types":%v}}`,
			`{"filter":{"event_types":[%v]}}`, `{"filter":{"webhook_ids":%v}}`, `{"filter":{"failure_categories":[%v]}}`,
			`{"filter":{"from":%v}}`, `{"rate_limit":{"requests_per_second":%v}}`, `{"priority":%v}`, `%v`}},
	})
}

// queryRoutes are the routes that read query parameters, with the
// parameters they read.
var queryRoutes = []struct {
	path   string
	params []string
}{
	{"/v1/events", []string{"idempotency_key"}},
	{"/v1/webhooks", []string{"limit", "cursor", "active", "event_type"}},
	{"/v1/webhooks/{hook}/deliveries", []string{"limit", "cursor", "status", "event_type", "from", "to"}},
	{"/v1/dlq", []string{"webhook_id", "event_type", "failure_category", "from", "to", "include_retried", "limit", "cursor"}},
	{"/v1/dlq/counts", []string{"webhook_id", "event_type", "failure_category", "from", "to", "include_retried"}},
	{"/v1/dlq/batch-operations", []string{"limit", "cursor"}},
	{"/v1/api-keys", []string{"limit", "cursor"}},
	{"/v1/audit", []string{"limit", "cursor"}},
}

func FuzzQueryParams(f *testing.F) {
	for i, r := range queryRoutes {
		for _, p := range r.params {
			for _, v := range hostileQuery() {
				f.Add(uint8(i), p, v)
			}
		}
	}
	fx := newFuzzFixture(f)
	f.Fuzz(func(t *testing.T, route uint8, name, value string) {
		r := queryRoutes[int(route)%len(queryRoutes)]
		path := fx.ids.Replace(r.path) + "?" + url.Values{name: {value}}.Encode()
		fx.check(t, http.MethodGet, path, fx.key, nil)
	})
}
