package httpapi

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Text that Postgres cannot store is refused with a 400 naming the field,
// never answered with the 500 of a failed insert, and stores nothing:
// invalid UTF-8 (refused by every text type), NUL (refused by text, and as
// \u0000 by jsonb) and unpaired surrogate escapes (refused by jsonb, and
// silently turned into U+FFFD by Go's decoder in every other field).
func TestUnstorableTextIsRefused(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	tenantID, key := e.tenantKey("acme")
	hook := e.createWebhook(key, map[string]any{})["id"].(string)
	const newHook = `{"url":"https://8.8.8.8/h","events":["a"],`
	const newEvent = `{"event_type":"order.created",`
	cases := []struct {
		name, method, path, body, field string
		admin                           bool
	}{
		{"event data invalid UTF-8", "POST", "/v1/events", newEvent + `"data":{"note":"caf` + "\xe9" + `"}}`, "data", false},
		{"event source invalid UTF-8", "POST", "/v1/events", newEvent + `"data":{},"source":"` + "\xff" + `"}`, "source", false},
		{"event source lone surrogate", "POST", "/v1/events", newEvent + `"data":{},"source":"\ud800"}`, "source", false},
		{"event key NUL", "POST", "/v1/events", newEvent + `"data":{},"idempotency_key":"k\u0000"}`, "idempotency_key", false},
		{"webhook metadata NUL", "POST", "/v1/webhooks", newHook + `"metadata":{"k":"a\u0000b"}}`, "metadata.k", false},
		{"webhook metadata invalid UTF-8", "POST", "/v1/webhooks", newHook + `"metadata":{"k":"` + "\xc3" + `"}}`, "metadata.k", false},
		{"webhook metadata lone surrogate", "POST", "/v1/webhooks", newHook + `"metadata":{"k":[1,"\udc00"]}}`, "metadata.k[1]", false},
		{"webhook metadata key NUL", "POST", "/v1/webhooks", newHook + `"metadata":{"\u0000":1}}`, "metadata", false},
		{"webhook url invalid UTF-8", "POST", "/v1/webhooks", `{"events":["a"],"url":"https://8.8.8.8/` + "\xff" + `"}`, "url", false},
		{"webhook header lone surrogate", "POST", "/v1/webhooks", newHook + `"headers":{"X-A":"\ud800"}}`, "headers.X-A", false},
		{"webhook patch metadata NUL", "PATCH", "/v1/webhooks/" + hook, `{"metadata":{"k":"\u0000"}}`, "metadata.k", false},
		{"api key name NUL", "POST", "/v1/api-keys", `{"name":"ci\u0000"}`, "name", false},
		{"api key name invalid UTF-8", "POST", "/v1/api-keys", `{"name":"` + "\xff" + `"}`, "name", false},
		{"tenant name NUL", "POST", "/v1/tenants", `{"name":"a\u0000"}`, "name", true},
		{"tenant rename invalid UTF-8", "PATCH", "/v1/tenants/" + tenantID, `{"name":"` + "\xc3" + `"}`, "name", true},
		{"lookup key invalid UTF-8", "GET", "/v1/events?idempotency_key=%FF", "", "idempotency_key", false},
		{"lookup key NUL", "GET", "/v1/events?idempotency_key=%00", "", "idempotency_key", false},
		{"list query NUL", "GET", "/v1/webhooks?event_type=a%00", "", "event_type", false},
	}
	for _, tc := range cases {
		token := key
		if tc.admin {
			token = testAdminToken
		}
		var body any
		if tc.body != "" {
			body = tc.body
		}
		r := e.do(tc.method, tc.path, token, body)
		require.Equal(t, http.StatusBadRequest, r.Status, "%s: %s", tc.name, r.Raw)
		require.Equal(t, tc.field, r.errField(), "%s: %s", tc.name, r.Raw)
		require.NotEmpty(t, r.errCode(), tc.name)
		msg := r.Body["error"].(map[string]any)["message"].(string)
		require.True(t, strings.HasPrefix(msg, tc.field+":"), "%s: message %q names the field", tc.name, msg)
	}
	require.Zero(t, e.count(`SELECT count(*) FROM events`))
	require.Equal(t, 1, e.count(`SELECT count(*) FROM webhooks WHERE metadata = '{}'`))
	require.Equal(t, 1, e.count(`SELECT count(*) FROM api_keys`))
	require.Equal(t, 1, e.count(`SELECT count(*) FROM tenants WHERE name = 'acme'`))
	require.NotContains(t, e.logBuf.String(), "request failed", "no refusal came from the database")
}

// The json column of events.data keeps what Postgres can store faithfully:
// \u0000 and unpaired surrogate escapes are valid JSON text, and come back
// as they were sent.
func TestEventDataKeepsStorableEscapes(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	_, key := e.tenantKey("acme")
	r := e.publish(key, `{"event_type":"order.created","data":{"a":"x\u0000y","b":"\ud800","c":"\ud83d\ude00"}}`)
	require.Equal(t, http.StatusAccepted, r.Status, string(r.Raw))
	got := e.do("GET", "/v1/events/"+r.Body["id"].(string), key, nil)
	require.Equal(t, http.StatusOK, got.Status, string(got.Raw))
	require.Contains(t, string(got.Raw), `"data":{"a":"x\u0000y","b":"\ud800","c":"\ud83d\ude00"}`)
}
