package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/queue/queuetest"
	"github.com/hookline/hookline/internal/testproxy"
	"github.com/hookline/hookline/internal/testwait"
)

func (e *apiEnv) publish(key string, body any, headers ...string) resp {
	e.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case string:
		rd = strings.NewReader(b)
	default:
		rd = strings.NewReader(mustJSON(e.t, b))
	}
	req, err := http.NewRequest("POST", e.http.URL+"/v1/events", rd)
	require.NoError(e.t, err)
	req.Header.Set("Authorization", "Bearer "+key)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	return e.send(req)
}

func (e *apiEnv) send(req *http.Request) resp {
	e.t.Helper()
	res, err := http.DefaultClient.Do(req)
	require.NoError(e.t, err)
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	require.NoError(e.t, err)
	out := resp{Status: res.StatusCode, Header: res.Header, Raw: raw}
	if len(raw) > 0 {
		require.NoError(e.t, json.Unmarshal(raw, &out.Body), string(raw))
	}
	return out
}

// workDepth is the number of messages waiting in the three work queues.
func (e *apiEnv) workDepth() int {
	n := 0
	for _, p := range []string{"high", "normal", "low"} {
		n += queuetest.Depth(e.t, e.topo.WorkQueue(p))
	}
	return n
}

func TestPublishAcceptsAndFansOut(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	_, key := e.tenantKey("acme")
	orders := e.createWebhook(key, map[string]any{"events": []string{"order.*"}})["id"].(string)
	all := e.createWebhook(key, map[string]any{"events": []string{"*"}})["id"].(string)
	created := e.createWebhook(key, map[string]any{"events": []string{"*.created", "user.deleted"}})["id"].(string)
	e.createWebhook(key, map[string]any{"events": []string{"order.*"}, "active": false})
	gone := e.createWebhook(key, map[string]any{"events": []string{"*"}})["id"].(string)
	require.Equal(t, http.StatusNoContent, e.do("DELETE", "/v1/webhooks/"+gone, key, nil).Status)
	_, otherKey := e.tenantKey("other")
	e.createWebhook(otherKey, map[string]any{"events": []string{"*"}})

	cases := []struct {
		eventType string
		want      []string
	}{
		{"order.created", []string{orders, all, created}},
		{"order.paid", []string{orders, all}},
		{"user.deleted", []string{all, created}},
		{"user.updated", []string{all}},
		{"order", []string{all}},
	}
	total := 0
	for _, tc := range cases {
		r := e.publish(key, map[string]any{"event_type": tc.eventType, "data": map[string]any{"n": 1}, "source": "billing"})
		require.Equal(t, http.StatusAccepted, r.Status, string(r.Raw))
		require.Equal(t, float64(len(tc.want)), r.Body["deliveries"], tc.eventType)
		require.Equal(t, tc.eventType, r.Body["event_type"])
		require.Equal(t, "normal", r.Body["priority"])
		require.Regexp(t, `^idk_[0-9a-f-]{36}$`, r.Body["idempotency_key"])
		total += len(tc.want)

		got := e.do("GET", "/v1/events/"+r.Body["id"].(string), key, nil)
		require.Equal(t, http.StatusOK, got.Status)
		require.Equal(t, map[string]any{"n": 1.0}, got.Body["data"])
		require.Equal(t, "billing", got.Body["source"])
		var hooks []string
		for _, d := range got.Body["deliveries"].([]any) {
			dm := d.(map[string]any)
			require.Equal(t, "pending", dm["status"])
			require.Equal(t, 0.0, dm["attempt_count"])
			hooks = append(hooks, dm["webhook_id"].(string))
		}
		require.ElementsMatch(t, tc.want, hooks, tc.eventType)
	}
	require.Equal(t, len(cases), e.count(`SELECT count(*) FROM events`), "payload stored once per event")
	testwait.Eventually(t, 10*time.Second, func() bool { return e.workDepth() == total }, "%d deliveries on the work queues", total)
	// The mark follows the broker's confirm, a moment after the message is on the queue.
	testwait.Eventually(t, 10*time.Second, func() bool {
		return e.count(`SELECT count(*) FROM deliveries WHERE enqueued_at IS NULL`) == 0
	}, "confirmed deliveries to be marked")
}

func TestPublishIdempotency(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	_, key := e.tenantKey("acme")
	e.createWebhook(key, map[string]any{"events": []string{"*"}})
	body := map[string]any{"event_type": "order.created", "data": map[string]any{"id": 7}, "idempotency_key": "order-7"}

	first := e.publish(key, body)
	require.Equal(t, http.StatusAccepted, first.Status, string(first.Raw))
	require.Empty(t, first.Header.Get("Idempotent-Replayed"))
	again := e.publish(key, body)
	require.Equal(t, http.StatusOK, again.Status)
	require.Equal(t, "true", again.Header.Get("Idempotent-Replayed"))
	require.Equal(t, first.Body, again.Body)

	viaHeader := e.publish(key, map[string]any{"event_type": "order.created", "data": map[string]any{"id": 7}}, "Idempotency-Key", "order-7")
	require.Equal(t, http.StatusOK, viaHeader.Status, "the header names the same key")
	require.Equal(t, first.Body["id"], viaHeader.Body["id"])

	conflict := e.publish(key, map[string]any{"event_type": "order.created", "data": map[string]any{"id": 8}, "idempotency_key": "order-7"})
	require.Equal(t, http.StatusUnprocessableEntity, conflict.Status)
	require.Equal(t, "idempotency_conflict", conflict.errCode())

	mismatch := e.publish(key, map[string]any{"event_type": "a", "data": map[string]any{}, "idempotency_key": "x"}, "Idempotency-Key", "y")
	require.Equal(t, http.StatusBadRequest, mismatch.Status)
	require.Equal(t, "idempotency_key", mismatch.errField())

	_, otherKey := e.tenantKey("other")
	other := e.publish(otherKey, body)
	require.Equal(t, http.StatusAccepted, other.Status, "keys are per tenant")
	require.NotEqual(t, first.Body["id"], other.Body["id"])

	require.Equal(t, 2, e.count(`SELECT count(*) FROM events`))
	require.Equal(t, 1, e.count(`SELECT count(*) FROM deliveries`))

	found := e.do("GET", "/v1/events?idempotency_key=order-7", key, nil)
	require.Equal(t, http.StatusOK, found.Status)
	require.Len(t, found.Body["data"], 1)
	require.Equal(t, first.Body["id"], found.Body["data"].([]any)[0].(map[string]any)["id"])
	require.Empty(t, e.do("GET", "/v1/events?idempotency_key=nope", key, nil).Body["data"])
	require.Equal(t, "idempotency_key", e.do("GET", "/v1/events?idempotency_key=", key, nil).errField())
	require.Equal(t, "cursor", e.do("GET", "/v1/events?idempotency_key=order-7&cursor=x", key, nil).errField())
}

// Twenty concurrent publishes of one key create exactly one event; every
// caller gets that event.
func TestPublishConcurrentRepeatsCreateOneEvent(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	_, key := e.tenantKey("acme")
	e.createWebhook(key, map[string]any{"events": []string{"*"}})
	body := mustJSON(t, map[string]any{"event_type": "order.created", "data": map[string]any{"id": 1}, "idempotency_key": "same"})

	var wg sync.WaitGroup
	results := make([]resp, 20)
	start := make(chan struct{})
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			req, _ := http.NewRequest("POST", e.http.URL+"/v1/events", strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+key)
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				return
			}
			defer res.Body.Close()
			raw, _ := io.ReadAll(res.Body)
			results[i] = resp{Status: res.StatusCode, Raw: raw}
			_ = json.Unmarshal(raw, &results[i].Body)
		}()
	}
	close(start)
	wg.Wait()
	accepted := 0
	for _, r := range results {
		require.Contains(t, []int{http.StatusAccepted, http.StatusOK}, r.Status, string(r.Raw))
		if r.Status == http.StatusAccepted {
			accepted++
		}
		require.Equal(t, results[0].Body["id"], r.Body["id"])
	}
	require.Equal(t, 1, accepted)
	require.Equal(t, 1, e.count(`SELECT count(*) FROM events`))
	require.Equal(t, 1, e.count(`SELECT count(*) FROM deliveries`))
}

// Idempotency holds without Redis: Postgres's unique constraint decides.
func TestPublishIdempotencyWithoutRedis(t *testing.T) {
	t.Parallel()
	dead := testproxy.New(t, "127.0.0.1:6379")
	dead.Cut()
	e := newAPI(t, func(o *apiOptions) { o.redisAddr = dead.Addr })
	_, key := e.tenantKey("acme")
	body := map[string]any{"event_type": "a.b", "data": map[string]any{}, "idempotency_key": "k"}
	require.Equal(t, http.StatusAccepted, e.publish(key, body).Status)
	require.Equal(t, http.StatusOK, e.publish(key, body).Status)
	body["data"] = map[string]any{"x": 1}
	require.Equal(t, http.StatusUnprocessableEntity, e.publish(key, body).Status)
	require.Equal(t, 1, e.count(`SELECT count(*) FROM events`))
}

func TestPublishRefusals(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	_, key := e.tenantKey("acme")
	e.createWebhook(key, map[string]any{"events": []string{"*"}})
	huge := `{"event_type": "a", "data": {"x": "` + strings.Repeat("a", 256<<10) + `"}}`
	cases := []struct {
		name   string
		body   string
		status int
		code   string
		field  string
	}{
		{"malformed", `{"event_type": "a", "data": {`, 400, "invalid_json", ""},
		{"not an object", `["a"]`, 400, "invalid_json", ""},
		{"empty", ``, 400, "invalid_json", ""},
		{"missing event_type", `{"data": {}}`, 400, "invalid_request", "event_type"},
		{"empty event_type", `{"event_type": "", "data": {}}`, 400, "invalid_request", "event_type"},
		{"event_type not a string", `{"event_type": 5, "data": {}}`, 400, "invalid_request", "event_type"},
		{"wildcard event_type", `{"event_type": "order.*", "data": {}}`, 400, "invalid_request", "event_type"},
		{"unknown priority", `{"event_type": "a", "data": {}, "priority": "urgent"}`, 400, "invalid_request", "priority"},
		{"missing data", `{"event_type": "a"}`, 400, "invalid_request", "data"},
		{"data not an object", `{"event_type": "a", "data": [1]}`, 400, "invalid_request", "data"},
		{"source with NUL", `{"event_type": "a", "data": {}, "source": "x\u0000y"}`, 400, "invalid_request", "source"},
		{"source too long", `{"event_type": "a", "data": {}, "source": "` + strings.Repeat("s", 257) + `"}`, 400, "invalid_request", "source"},
		{"key with space", `{"event_type": "a", "data": {}, "idempotency_key": "a b"}`, 400, "invalid_request", "idempotency_key"},
		{"key too long", `{"event_type": "a", "data": {}, "idempotency_key": "` + strings.Repeat("k", 256) + `"}`, 400, "invalid_request", "idempotency_key"},
		{"unknown field", `{"event_type": "a", "data": {}, "tenant": "x"}`, 400, "invalid_request", "tenant"},
		{"too large", huge, 413, "payload_too_large", ""},
	}
	for _, tc := range cases {
		r := e.publish(key, tc.body)
		require.Equal(t, tc.status, r.Status, "%s: %s", tc.name, r.Raw)
		require.Equal(t, tc.code, r.errCode(), tc.name)
		require.Equal(t, tc.field, r.errField(), tc.name)
	}

	// A chunked body (no Content-Length) over the limit is cut off while
	// reading, not buffered whole.
	req, err := http.NewRequest("POST", e.http.URL+"/v1/events", io.MultiReader(strings.NewReader(huge), strings.NewReader(strings.Repeat(" ", 1<<20))))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+key)
	req.ContentLength = -1
	r := e.send(req)
	require.Equal(t, http.StatusRequestEntityTooLarge, r.Status)
	require.Contains(t, r.Body["error"].(map[string]any)["message"], "262144")

	require.Equal(t, 0, e.count(`SELECT count(*) FROM events`), "nothing partial is stored")
	require.Equal(t, 0, e.count(`SELECT count(*) FROM deliveries`))
}

func TestPublishKeepsPayloadAndPriority(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	_, key := e.tenantKey("acme")
	e.createWebhook(key, map[string]any{"events": []string{"*"}})
	r := e.publish(key, `{"event_type": "a.b", "priority": "high", "data": {"z": 1, "a": 12345678901234567890, "s": "<&>"}}`)
	require.Equal(t, http.StatusAccepted, r.Status, string(r.Raw))
	require.Equal(t, "high", r.Body["priority"])
	var data string
	require.NoError(t, e.pool.QueryRow(context.Background(), `SELECT data::text FROM events`).Scan(&data))
	require.Equal(t, `{"z":1,"a":12345678901234567890,"s":"<&>"}`, data, "key order and numbers kept, whitespace compacted")
	testwait.Eventually(t, 10*time.Second, func() bool { return queuetest.Depth(t, e.topo.WorkQueue("high")) == 1 }, "on the high queue")
}

func TestEventsAreTenantScoped(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	_, keyA := e.tenantKey("a")
	_, keyB := e.tenantKey("b")
	r := e.publish(keyA, map[string]any{"event_type": "a", "data": map[string]any{}, "idempotency_key": "secret-key"})
	require.Equal(t, http.StatusAccepted, r.Status)
	require.Equal(t, http.StatusNotFound, e.do("GET", "/v1/events/"+r.Body["id"].(string), keyB, nil).Status)
	require.Empty(t, e.do("GET", "/v1/events?idempotency_key=secret-key", keyB, nil).Body["data"])
	require.Equal(t, http.StatusUnauthorized, e.publish("hk_nope", map[string]any{"event_type": "a", "data": map[string]any{}}).Status)
}

// With the broker unreachable the api keeps accepting; readiness says the
// broker is down; once it is back every delivery reaches the work queues.
func TestPublishSurvivesBrokerOutage(t *testing.T) {
	t.Parallel()
	proxy := testproxy.New(t, strings.TrimPrefix(strings.TrimSuffix(queuetest.URL(), "/"), "amqp://guest:guest@"))
	e := newAPI(t, func(o *apiOptions) { o.amqpURL = "amqp://guest:guest@" + proxy.Addr + "/" })
	_, key := e.tenantKey("acme")
	e.createWebhook(key, map[string]any{"events": []string{"*"}})

	proxy.Cut()
	testwait.Eventually(t, 10*time.Second, func() bool { return e.amqp.Check(context.Background()) != nil }, "the api sees the broker down")
	for i := range 100 {
		r := e.publish(key, map[string]any{"event_type": "tick", "data": map[string]any{"i": i}})
		require.Equal(t, http.StatusAccepted, r.Status, string(r.Raw))
	}
	ready := e.do("GET", "/readyz", "", nil)
	require.Equal(t, http.StatusServiceUnavailable, ready.Status)
	require.Equal(t, []any{"rabbitmq"}, ready.Body["down"])
	require.Equal(t, 0, e.workDepth())
	require.Equal(t, 100, e.count(`SELECT count(*) FROM deliveries WHERE enqueued_at IS NULL`))

	proxy.Restore()
	testwait.Eventually(t, 30*time.Second, func() bool { return e.workDepth() >= 100 }, "all 100 deliveries on the work queue")
	testwait.Eventually(t, 10*time.Second, func() bool {
		return e.count(`SELECT count(*) FROM deliveries WHERE enqueued_at IS NULL`) == 0
	}, "all marked enqueued")
	require.Equal(t, http.StatusOK, e.do("GET", "/readyz", "", nil).Status)
}

func TestPublishMetrics(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	_, key := e.tenantKey("acme")
	e.publish(key, map[string]any{"event_type": "a", "data": map[string]any{}})
	e.publish(key, `{"event_type": 1}`)
	raw := string(e.do("GET", "/metrics", "", nil).Raw)
	for _, want := range []string{`hookline_publish_requests_total{outcome="accepted"}`, `hookline_publish_requests_total{outcome="invalid"}`,
		"hookline_publish_duration_seconds_bucket", "hookline_outbox_backlog", "hookline_outbox_lag_seconds"} {
		require.Contains(t, raw, want)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	var buf bytes.Buffer
	require.NoError(t, json.NewEncoder(&buf).Encode(v))
	return buf.String()
}
