package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/metrics"
	"github.com/hookline/hookline/internal/redistest"
	"github.com/hookline/hookline/internal/systemtest"
	"github.com/hookline/hookline/internal/testproxy"
	"github.com/hookline/hookline/internal/testwait"
)

// guardedSystem is newSystem's system whose worker reaches Redis through a
// proxy, so that a test can cut Redis for the worker only. The api talks
// to Redis directly.
type guardedSystem struct {
	*system
	redisTap *testproxy.Proxy // between the worker's guard and Redis
}

func newGuardedSystem(t *testing.T) *guardedSystem {
	t.Helper()
	tap := testproxy.New(t, redistest.Addr())
	s := newSystem(t, func(o *systemtest.Options) { o.WorkerRedis = tap.Addr })
	return &guardedSystem{system: s, redisTap: tap}
}

// flushRedis deletes every key under the system's prefix (breakers,
// buckets, idempotency cache) and returns how many there were.
func (g *guardedSystem) flushRedis() int {
	g.t.Helper()
	n, err := redistest.DeleteKeys(context.Background(), g.Redis, g.RedisPrefix)
	require.NoError(g.t, err)
	return n
}

// newTenant creates a tenant with the given limits and returns its id and
// API key.
func (s *system) newTenant(body map[string]any) (string, string) {
	s.t.Helper()
	var tn map[string]any
	s.call("POST", "/v1/tenants", systemtest.AdminToken, body, http.StatusCreated, &tn)
	return tn["id"].(string), tn["api_key"].(string)
}

// webhookAs registers an endpoint for the tenant of key.
func (s *system) webhookAs(key, url string, extra map[string]any) string {
	s.t.Helper()
	body := map[string]any{"url": url, "events": []string{"*"}}
	for k, v := range extra {
		body[k] = v
	}
	var w map[string]any
	s.call("POST", "/v1/webhooks", key, body, http.StatusCreated, &w)
	return w["id"].(string)
}

// publishAs publishes one event for the tenant of key and returns its id.
func (s *system) publishAs(key, eventType string, data map[string]any) string {
	s.t.Helper()
	var r map[string]any
	s.call("POST", "/v1/events", key, map[string]any{"event_type": eventType, "data": data}, http.StatusAccepted, &r)
	return r["id"].(string)
}

// rawCall sends a request and returns the answer whatever its status.
func (s *system) rawCall(method, path, token string, body any) (*http.Response, map[string]any) {
	s.t.Helper()
	raw, err := json.Marshal(body)
	require.NoError(s.t, err)
	req, err := http.NewRequest(method, s.URL+path, bytes.NewReader(raw))
	require.NoError(s.t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	require.NoError(s.t, err)
	defer res.Body.Close()
	out, err := io.ReadAll(res.Body)
	require.NoError(s.t, err)
	var m map[string]any
	require.NoError(s.t, json.Unmarshal(out, &m), string(out))
	return res, m
}

// circuitOf returns the circuit_breaker object of the webhook's health.
func (s *system) circuitOf(webhookID, key string) map[string]any {
	s.t.Helper()
	var h map[string]any
	s.call("GET", "/v1/webhooks/"+webhookID+"/health", key, nil, http.StatusOK, &h)
	return h["circuit_breaker"].(map[string]any)
}

// deliveryState is the part of a deliveries row the guard changes.
type deliveryState struct {
	ID        uuid.UUID
	Status    string
	Attempts  int
	Postponed int
}

func (s *system) deliveriesOf(webhookID string) []deliveryState {
	s.t.Helper()
	rows, err := s.Pool.Query(context.Background(), `SELECT id, status, attempt_count, postponed_count
		FROM deliveries WHERE webhook_id = $1 ORDER BY id`, webhookID)
	require.NoError(s.t, err)
	defer rows.Close()
	var out []deliveryState
	for rows.Next() {
		var d deliveryState
		require.NoError(s.t, rows.Scan(&d.ID, &d.Status, &d.Attempts, &d.Postponed))
		out = append(out, d)
	}
	require.NoError(s.t, rows.Err())
	return out
}

// arrivals returns the receivers' request times, earliest first.
func arrivals(rcs ...*receiver) []time.Time {
	var out []time.Time
	for _, rc := range rcs {
		for _, r := range rc.requests() {
			out = append(out, r.At)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Before(out[j]) })
	return out
}

// requireBucketPace checks arrivals against a token bucket of burst tokens
// refilled one a second, full when the first request took its token: the
// k-th request (0-based) needs k+1 tokens, so it cannot arrive before
// (k+1-burst) seconds after the first one (less a little for the time
// between the first token and the first arrival).
func requireBucketPace(t *testing.T, at []time.Time, burst int) {
	t.Helper()
	const slack = 400 * time.Millisecond
	for k := burst; k < len(at); k++ {
		earliest := time.Duration(k+1-burst) * time.Second
		require.GreaterOrEqual(t, at[k].Sub(at[0]), earliest-slack,
			"request %d arrived %s after the first: faster than a bucket of burst %d at 1/s allows", k, at[k].Sub(at[0]), burst)
	}
}

func transitions(name string) float64 {
	return testutil.ToFloat64(metrics.CircuitTransitions.WithLabelValues(name))
}

// Section 7: an always-failing endpoint opens its circuit; while open no
// attempt is made (deliveries are postponed, attempt counts unchanged); once
// the endpoint recovers a half-open probe closes the circuit and every
// delivery succeeds, each attempt recorded once.
func TestBreakerOpensPostponesAndRecovers(t *testing.T) {
	redistest.EachMode(t, func(t *testing.T, mode redistest.Mode) {
		t.Parallel()
		s := newSystem(t, func(o *systemtest.Options) { o.RedisMode = mode })
		ctx := context.Background()
		var healthy atomic.Bool
		rc := newReceiver(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
			if !healthy.Load() {
				w.WriteHeader(http.StatusInternalServerError)
			}
		})
		opened0, halfOpened0, closed0 := transitions("opened"), transitions("half_opened"), transitions("closed")
		hook, _ := s.webhook(rc.URL, map[string]any{
			"circuit_breaker_config": map[string]any{"enabled": true, "minimum_throughput": 5, "error_threshold_percentage": 60,
				"window_size_ms": 60000, "sleep_window_ms": 2000, "half_open_max_calls": 2, "half_open_success_threshold": 50},
			"retry_config": map[string]any{"max_attempts": 10, "base_delay_ms": 100, "max_delay_ms": 1000,
				"backoff_multiplier": 2, "timeout_ms": 2000},
			"rate_limit": map[string]any{"requests_per_minute": 100000, "burst": 1000},
		})

		var ids []uuid.UUID
		for i := range 5 {
			ids = append(ids, s.deliveryOf(s.publish("order.created", map[string]any{"n": i})))
		}
		var openedAt time.Time
		var sleepMS int64
		testwait.Eventually(t, 10*time.Second, func() bool {
			return s.Pool.QueryRow(ctx, `SELECT opened_at, sleep_window_ms FROM circuit_breaker_states
			WHERE webhook_id = $1 AND state = 'open'`, hook).Scan(&openedAt, &sleepMS) == nil
		}, "circuit of %s to open", hook)
		require.EqualValues(t, 2000, sleepMS)
		cb := s.circuitOf(hook, s.key)
		require.Equal(t, "open", cb["state"], "%v", cb)
		require.Equal(t, "redis", cb["source"])
		require.GreaterOrEqual(t, cb["window"].(map[string]any)["failures"].(float64), 5.0)

		// Deliveries created while the circuit is open are postponed for the
		// rest of the sleep window on their first attempt: no attempt.
		var late []uuid.UUID
		for i := range 3 {
			late = append(late, s.deliveryOf(s.publish("order.created", map[string]any{"late": i})))
		}
		testwait.Eventually(t, 5*time.Second, func() bool {
			return s.Count(`SELECT count(*) FROM deliveries WHERE id = ANY($1) AND postponed_count > 0`, late) == len(late)
		}, "late deliveries to be postponed")
		sleepEnd := openedAt.Add(time.Duration(sleepMS) * time.Millisecond)
		require.Zero(t, s.Count(`SELECT count(*) FROM delivery_attempts WHERE delivery_id = ANY($1) AND executed_at < $2`, late, sleepEnd),
			"late deliveries attempted before the sleep window ended")
		testwait.Eventually(t, 5*time.Second, func() bool {
			return s.Count(`SELECT coalesce(sum(postponed_count), 0) FROM deliveries WHERE id = ANY($1)`, ids) >= len(ids)
		}, "failed deliveries to be postponed while open")

		healthy.Store(true)
		all := append(append([]uuid.UUID{}, ids...), late...)
		for _, id := range all {
			s.waitStatus(id, "succeeded", 15*time.Second)
		}

		// Nothing was attempted during the sleep window after the opening.
		require.Zero(t, s.Count(`SELECT count(*) FROM delivery_attempts WHERE webhook_id = $1 AND executed_at >= $2 AND executed_at < $3`,
			hook, openedAt.Add(500*time.Millisecond), sleepEnd), "attempts made while the circuit was open (after those already in flight)")
		perDelivery := map[string][]received{}
		for _, r := range rc.requests() {
			perDelivery[r.Header.Get("X-Webhook-Delivery")] = append(perDelivery[r.Header.Get("X-Webhook-Delivery")], r)
		}
		for _, id := range all {
			atts := s.attempts(id)
			reqs := perDelivery[id.String()]
			require.Len(t, reqs, len(atts), "delivery %s: every request sent is recorded once", id)
			require.EqualValues(t, len(atts), s.Count(`SELECT attempt_count FROM deliveries WHERE id = $1`, id))
			for i, a := range atts {
				require.Equal(t, i+1, a.Number)
				require.Equal(t, strconv.Itoa(i+1), reqs[i].Header.Get("X-Webhook-Attempt"))
				want := http.StatusInternalServerError
				if i == len(atts)-1 {
					want = http.StatusOK
				}
				require.NotNil(t, a.StatusCode)
				require.Equal(t, want, *a.StatusCode, "delivery %s attempt %d", id, a.Number)
			}
		}
		require.Positive(t, s.Count(`SELECT coalesce(sum(postponed_count), 0) FROM deliveries WHERE webhook_id = $1`, hook))
		cb = s.circuitOf(hook, s.key)
		require.Equal(t, "closed", cb["state"], "%v", cb)
		require.Nil(t, cb["opened_at"])
		require.GreaterOrEqual(t, transitions("opened")-opened0, 1.0)
		require.GreaterOrEqual(t, transitions("half_opened")-halfOpened0, 1.0)
		require.GreaterOrEqual(t, transitions("closed")-closed0, 1.0)
	})
}

// Section 8: a webhook's bucket (60/min, burst 3) lets 3 requests through
// at once and then one a second; postponed deliveries are not attempts.
func TestWebhookRateLimitSpacesDeliveries(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	rc := newReceiver(t, func(int, http.ResponseWriter, *http.Request) {})
	hook, _ := s.webhook(rc.URL, map[string]any{"rate_limit": map[string]any{"requests_per_minute": 60, "burst": 3}})
	for i := range 10 {
		s.publish("order.created", map[string]any{"n": i})
	}
	sawWaiting := false
	testwait.Eventually(t, 20*time.Second, func() bool {
		ds := s.deliveriesOf(hook)
		done := 0
		for _, d := range ds {
			switch {
			case d.Status == "succeeded":
				done++
			case d.Postponed > 0:
				require.Zero(t, d.Attempts, "a postponed delivery not yet sent has no attempt: %+v", d)
				sawWaiting = true
			}
		}
		return len(ds) == 10 && done == 10
	}, "10 deliveries to succeed")
	require.True(t, sawWaiting, "some deliveries waited for a token")

	at := arrivals(rc)
	require.Len(t, at, 10)
	n := 0
	for _, a := range at {
		if a.Sub(at[0]) < time.Second {
			n++
		}
	}
	require.LessOrEqual(t, n, 4, "at most burst+1 requests within the first second")
	requireBucketPace(t, at, 3)
	postponed := 0
	for _, d := range s.deliveriesOf(hook) {
		require.Equal(t, 1, d.Attempts, "postponements are not attempts: %+v", d)
		postponed += d.Postponed
	}
	require.GreaterOrEqual(t, postponed, 6)
}

// Section 8: a tenant's delivery bucket (60/min, burst 2) spans all its
// webhooks, whatever their own limits: on one Redis server, and on a Redis
// Cluster, where each delivery draws from its webhook's and its tenant's
// buckets in one slot.
func TestTenantRateLimitSpansWebhooks(t *testing.T) {
	redistest.EachMode(t, func(t *testing.T, mode redistest.Mode) {
		t.Parallel()
		s := newSystem(t, func(o *systemtest.Options) { o.RedisMode = mode })
		tenantID, key := s.newTenant(map[string]any{"name": "limited", "rate_limit": map[string]any{"requests_per_minute": 60, "burst": 2}})
		var rcs []*receiver
		for range 3 {
			rc := newReceiver(t, func(int, http.ResponseWriter, *http.Request) {})
			rcs = append(rcs, rc)
			s.webhookAs(key, rc.URL, nil)
		}
		for i := range 6 {
			s.publishAs(key, "order.created", map[string]any{"n": i})
		}
		require.Equal(t, 18, s.Count(`SELECT count(*) FROM deliveries WHERE tenant_id = $1`, tenantID))
		testwait.Eventually(t, 10*time.Second, func() bool { return len(arrivals(rcs...)) >= 5 }, "5 requests to arrive")

		at := arrivals(rcs...)
		n := 0
		for _, a := range at {
			if a.Sub(at[0]) < time.Second {
				n++
			}
		}
		require.LessOrEqual(t, n, 3, "at most burst+1 requests across the tenant's webhooks within the first second")
		requireBucketPace(t, at, 2)
		require.Zero(t, s.Count(`SELECT count(*) FROM deliveries WHERE tenant_id = $1 AND attempt_count > 1`, tenantID))
		require.Positive(t, s.Count(`SELECT count(*) FROM deliveries WHERE tenant_id = $1 AND status = 'pending'
		AND attempt_count = 0 AND postponed_count > 0`, tenantID))
	})
}

// Section 7: an operator's force_open stops deliveries to a healthy
// endpoint, holds across a Redis flush (it is kept in Postgres), and a
// reset lets deliveries through again.
func TestForcedOpenSurvivesRedisFlushUntilReset(t *testing.T) {
	t.Parallel()
	g := newGuardedSystem(t)
	rc := newReceiver(t, func(int, http.ResponseWriter, *http.Request) {})
	hook, _ := g.webhook(rc.URL, nil)
	warm := g.deliveryOf(g.publish("order.created", map[string]any{"warm": true}))
	g.waitStatus(warm, "succeeded", 10*time.Second)

	const forSeconds = 20
	var out map[string]any
	g.call("PATCH", "/v1/webhooks/"+hook+"/circuit-breaker", g.key,
		map[string]any{"action": "force_open", "duration_seconds": forSeconds}, http.StatusOK, &out)
	forcedAt := time.Now()
	require.Equal(t, "open", out["circuit_breaker"].(map[string]any)["forced_state"])

	var held []uuid.UUID
	for i := range 3 {
		held = append(held, g.deliveryOf(g.publish("order.created", map[string]any{"n": i})))
	}
	testwait.Eventually(t, 5*time.Second, func() bool {
		return g.Count(`SELECT count(*) FROM deliveries WHERE id = ANY($1) AND postponed_count > 0`, held) == len(held)
	}, "deliveries to be postponed by the forced-open circuit")
	require.Zero(t, g.Count(`SELECT count(*) FROM deliveries WHERE id = ANY($1) AND attempt_count > 0`, held))
	require.Len(t, rc.requests(), 1, "only the delivery made before the override")

	require.Positive(t, g.flushRedis(), "the live breaker and buckets were in Redis")
	cb := g.circuitOf(hook, g.key)
	require.Equal(t, "open", cb["forced_state"], "%v", cb)
	require.Equal(t, "open", cb["state"], "%v", cb)
	after := g.deliveryOf(g.publish("order.created", map[string]any{"after_flush": true}))
	testwait.Eventually(t, 5*time.Second, func() bool {
		return g.Count(`SELECT postponed_count FROM deliveries WHERE id = $1`, after) > 0
	}, "a delivery after the flush to be postponed")
	require.Len(t, rc.requests(), 1, "nothing sent after the flush while forced open")
	require.Less(t, time.Since(forcedAt), forSeconds*time.Second, "checks ran while the override held")

	g.call("PATCH", "/v1/webhooks/"+hook+"/circuit-breaker", g.key, map[string]any{"action": "reset"}, http.StatusOK, &out)
	cb = out["circuit_breaker"].(map[string]any)
	require.Nil(t, cb["forced_state"])
	require.Equal(t, "closed", cb["state"])
	fresh := g.deliveryOf(g.publish("order.created", map[string]any{"after_reset": true}))
	g.waitStatus(fresh, "succeeded", 15*time.Second)
	// Those postponed earlier come back when their postponement (the rest
	// of the forced period) ends.
	for _, id := range append(held, after) {
		g.waitStatus(id, "succeeded", (forSeconds+5)*time.Second)
		require.Len(t, g.attempts(id), 1)
	}
	require.Len(t, rc.requests(), 6)
}

// Section 7: when Redis is unreachable the worker fails open: deliveries go
// on, token buckets are not enforced, and hookline_redis_fallback_active is
// 1 until Redis is back.
//
// Not parallel on purpose: the gauge is process-global and every other
// test's worker sets it to 0 on each breaker check, so it can only be read
// reliably while no other test delivers (parallel tests are paused while
// sequential ones run).
func TestRedisOutageFailsOpen(t *testing.T) {
	g := newGuardedSystem(t)
	rc := newReceiver(t, func(int, http.ResponseWriter, *http.Request) {})
	hook, _ := g.webhook(rc.URL, map[string]any{"rate_limit": map[string]any{"requests_per_minute": 60, "burst": 2}})
	warm := g.deliveryOf(g.publish("order.created", map[string]any{"warm": true}))
	g.waitStatus(warm, "succeeded", 10*time.Second)
	require.Zero(t, testutil.ToFloat64(metrics.RedisFallback))

	g.redisTap.Cut()
	var during []uuid.UUID
	for i := range 5 {
		during = append(during, g.deliveryOf(g.publish("order.created", map[string]any{"n": i})))
	}
	var seen struct{ Fallback bool }
	testwait.Eventually(t, 15*time.Second, func() bool {
		seen.Fallback = seen.Fallback || testutil.ToFloat64(metrics.RedisFallback) == 1
		return seen.Fallback && g.Count(`SELECT count(*) FROM deliveries WHERE id = ANY($1) AND status = 'succeeded'`, during) == len(during)
	}, "deliveries to succeed with Redis cut and the fallback gauge to be 1: %+v", &seen)
	for _, id := range during {
		require.Len(t, g.attempts(id), 1)
	}
	require.Zero(t, g.Count(`SELECT coalesce(sum(postponed_count), 0) FROM deliveries WHERE id = ANY($1)`, during),
		"the webhook's bucket (burst 2) is not enforced without Redis")
	cb := g.circuitOf(hook, g.key)
	require.Equal(t, "closed", cb["state"])
	require.Equal(t, 1.0, testutil.ToFloat64(metrics.RedisFallback), "still in fallback while Redis is cut")

	g.redisTap.Restore()
	var later []uuid.UUID
	for i := range 2 {
		later = append(later, g.deliveryOf(g.publish("order.created", map[string]any{"after": i})))
	}
	for _, id := range later {
		g.waitStatus(id, "succeeded", 10*time.Second)
	}
	testwait.Eventually(t, 5*time.Second, func() bool { return testutil.ToFloat64(metrics.RedisFallback) == 0 },
		"fallback gauge to return to 0 after Redis is back")
	require.Len(t, rc.requests(), 8)
}

// Section 8: the tenant's publish bucket (1/s, burst 2) refuses the third
// quick publish with 429, Retry-After and code rate_limited; nothing of it
// is stored, so the same request is accepted as new once a token is back.
func TestPublishRateLimitAnswers429(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	third := map[string]any{"event_type": "order.created", "data": map[string]any{"n": 3}, "idempotency_key": "third"}
	var tenantID, key string
	var res *http.Response
	var body map[string]any
	// The bucket refills one token a second: the three publishes must come
	// within that second to test anything. On a machine too busy for that,
	// start over with a fresh tenant (a few times at most).
	for try := 1; ; try++ {
		tenantID, key = s.newTenant(map[string]any{"name": fmt.Sprintf("slow-publisher-%d", try),
			"publish_rate_limit": map[string]any{"requests_per_second": 1, "burst": 2}})
		start := time.Now()
		s.publishAs(key, "order.created", map[string]any{"n": 1})
		s.publishAs(key, "order.created", map[string]any{"n": 2})
		res, body = s.rawCall("POST", "/v1/events", key, third)
		if res.StatusCode == http.StatusTooManyRequests || time.Since(start) < 900*time.Millisecond || try == 5 {
			break
		}
	}
	require.Equal(t, http.StatusTooManyRequests, res.StatusCode, "%v", body)
	retryAfter, err := strconv.Atoi(res.Header.Get("Retry-After"))
	require.NoError(t, err, "Retry-After %q", res.Header.Get("Retry-After"))
	require.GreaterOrEqual(t, retryAfter, 1)
	require.Equal(t, "rate_limited", body["error"].(map[string]any)["code"])
	require.Equal(t, 2, s.Count(`SELECT count(*) FROM events WHERE tenant_id = $1`, tenantID))
	require.Zero(t, s.Count(`SELECT count(*) FROM events WHERE tenant_id = $1 AND idempotency_key = 'third'`, tenantID))

	var status int
	testwait.Eventually(t, time.Duration(retryAfter+2)*time.Second, func() bool {
		res, _ := s.rawCall("POST", "/v1/events", key, third)
		status = res.StatusCode
		return status != http.StatusTooManyRequests
	}, "a token to come back")
	require.Equal(t, http.StatusAccepted, status, "accepted as new, not replayed: the refused request left nothing")
	require.Equal(t, 3, s.Count(`SELECT count(*) FROM events WHERE tenant_id = $1`, tenantID))
}

// Regression (internal/delivery/guard.go, admit, when token buckets were
// taken before the breaker was asked): every check of a delivery that the open circuit
// then postpones spends a token of the webhook's and the tenant's bucket,
// although no request is made. Retrying deliveries of an open circuit are
// re-checked every backoff interval, so one broken webhook drains its
// tenant's delivery budget and starves the tenant's healthy webhooks
// (docs/DESIGN.md §8: the tenant limit counts requests across its webhooks).
//
// Tenant bucket: burst 20, 1 a minute. Webhook A (always 500) makes 3
// requests and opens; webhook B must then still find a token.
func TestOpenCircuitDoesNotSpendTenantTokens(t *testing.T) {
	t.Parallel()
	g := newGuardedSystem(t)
	s := g.system
	_, key := s.newTenant(map[string]any{"name": "two-hooks", "rate_limit": map[string]any{"requests_per_minute": 1, "burst": 20}})
	broken := newReceiver(t, func(_ int, w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusInternalServerError) })
	fine := newReceiver(t, func(int, http.ResponseWriter, *http.Request) {})
	generous := map[string]any{"requests_per_minute": 100000, "burst": 1000}
	hookA := s.webhookAs(key, broken.URL, map[string]any{"events": []string{"a.*"}, "rate_limit": generous,
		"circuit_breaker_config": map[string]any{"minimum_throughput": 3, "error_threshold_percentage": 50, "sleep_window_ms": 60000},
		"retry_config":           map[string]any{"max_attempts": 10, "base_delay_ms": 100, "max_delay_ms": 1000, "timeout_ms": 2000}})
	hookB := s.webhookAs(key, fine.URL, map[string]any{"events": []string{"b.*"}, "rate_limit": generous})
	for i := range 3 {
		s.publishAs(key, "a.failed", map[string]any{"n": i})
	}
	testwait.Eventually(t, 10*time.Second, func() bool {
		return s.Count(`SELECT count(*) FROM circuit_breaker_states WHERE webhook_id = $1 AND state = 'open'`, hookA) == 1
	}, "circuit of A to open")
	// A's retries meet the open circuit and wait behind it.
	testwait.Eventually(t, 10*time.Second, func() bool {
		return s.Count(`SELECT count(*) FROM deliveries WHERE webhook_id = $1 AND park_reason = 'circuit_open'`, hookA) == 3
	}, "A's deliveries to be parked behind the open circuit")
	sent := len(broken.requests())
	require.LessOrEqual(t, sent, 5, "A made a few requests of the tenant's 20 (2 recorded failures + at most one in flight per delivery)")

	s.publishAs(key, "b.created", map[string]any{"n": 1})
	var b struct {
		Postponed  int
		ParkReason string
	}
	testwait.Eventually(t, 5*time.Second, func() bool {
		_ = s.Pool.QueryRow(context.Background(), `SELECT postponed_count, coalesce(park_reason, '') FROM deliveries
			WHERE webhook_id = $1`, hookB).Scan(&b.Postponed, &b.ParkReason)
		return len(fine.requests()) == 1
	}, "B's delivery to be sent: the tenant made only %d requests of a burst of 20, but A's postponements by its "+
		"open circuit spent the rest of the tenant's slots: %+v", sent, &b)
}

// Regression (internal/delivery/worker.go, attempt, before probes were
// released: a delivery the breaker let through as a half-open probe was
// postponed as host_busy when its host was at its concurrent request limit,
// and the probe was never reported): the
// breaker counts the probe as issued but never hears its outcome, so once
// half_open_max_calls probes are lost this way the circuit stays half-open,
// postponing every delivery, until the probe lease (5 minutes,
// internal/breaker/breaker.go probeLease) runs out, although the endpoint
// is healthy again.
//
// Webhooks A and B share a host; B's 5 hanging requests fill the host's 5
// slots while A's circuit goes half-open.
func TestHalfOpenProbeLostToBusyHostIsNotStuck(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	var healthy atomic.Bool
	release := make(chan struct{})
	var hanging atomic.Int32
	rc := newReceiver(t, func(_ int, w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/slow":
			hanging.Add(1)
			<-release
		case !healthy.Load():
			w.WriteHeader(http.StatusInternalServerError)
		}
	})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(free) // before the receiver closes: it waits for its requests
	generous := map[string]any{"requests_per_minute": 100000, "burst": 1000}
	hookA, _ := s.webhook(rc.URL+"/a", map[string]any{"events": []string{"a.*"}, "rate_limit": generous,
		"circuit_breaker_config": map[string]any{"minimum_throughput": 3, "error_threshold_percentage": 50, "sleep_window_ms": 2000,
			"half_open_max_calls": 2, "half_open_success_threshold": 50},
		"retry_config": map[string]any{"max_attempts": 20, "base_delay_ms": 100, "max_delay_ms": 1000, "timeout_ms": 2000}})
	hookB, _ := s.webhook(rc.URL+"/slow", map[string]any{"events": []string{"b.*"}, "rate_limit": generous})
	var ids []uuid.UUID
	for i := range 3 {
		ids = append(ids, s.deliveryOf(s.publish("a.failed", map[string]any{"n": i})))
	}
	testwait.Eventually(t, 10*time.Second, func() bool {
		return s.Count(`SELECT count(*) FROM circuit_breaker_states WHERE webhook_id = $1 AND state = 'open'`, hookA) == 1
	}, "circuit of A to open")
	busy0 := testutil.ToFloat64(metrics.DeliveriesPostponed.WithLabelValues("host_busy"))
	for i := range 5 {
		s.publish("b.slow", map[string]any{"n": i})
	}
	testwait.Eventually(t, 5*time.Second, func() bool { return hanging.Load() == 5 }, "B's 5 requests to hold the host's slots")
	healthy.Store(true)

	testwait.Eventually(t, 10*time.Second, func() bool {
		cb := s.circuitOf(hookA, s.key)
		ho, _ := cb["half_open"].(map[string]any)
		return cb["state"] == "half_open" && ho["probes_issued"] == 2.0
	}, "A's circuit to go half-open and issue its probes")
	testwait.Eventually(t, 5*time.Second, func() bool {
		return testutil.ToFloat64(metrics.DeliveriesPostponed.WithLabelValues("host_busy"))-busy0 >= 2
	}, "the probes to be postponed as host_busy")
	free()
	testwait.Eventually(t, 5*time.Second, func() bool {
		return s.Count(`SELECT count(*) FROM deliveries WHERE webhook_id = $1 AND status = 'succeeded'`, hookB) == 5
	}, "B's deliveries to finish")

	var last struct{ Circuit map[string]any }
	testwait.Eventually(t, 12*time.Second, func() bool {
		last.Circuit = s.circuitOf(hookA, s.key)
		return s.Count(`SELECT count(*) FROM deliveries WHERE id = ANY($1) AND status = 'succeeded'`, ids) == len(ids)
	}, "A's deliveries to succeed once the endpoint and its host are free; the circuit is stuck half-open "+
		"with its probes issued but never reported: %+v", &last)
}

// Regression (internal/delivery/guard.go, transition and persistSQL, before
// persistence was ordered by decision time): the state persisted to Postgres (the fallback for a Redis outage, docs/DESIGN.md §7, and what
// the health route reports while Redis is down) is written by whichever
// worker's UPSERT lands last, not in the order of the transitions. The
// worker whose Allow moved the circuit to half-open persists "half_open"
// after a Snapshot round trip; meanwhile another worker's probe can succeed
// and persist "closed" first, and the late "half_open" overwrites it for
// good (likewise a late "half_open" can overwrite a "reopened"'s "open").
// It is a race: the test runs open/half-open/close cycles on six webhooks
// at once until a persisted state disagrees with its live circuit after a
// close, or its time is up.
func TestPersistedCircuitStateFollowsTheLiveCircuit(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	_, key := s.newTenant(map[string]any{"name": "unlimited", "rate_limit": map[string]any{"requests_per_minute": 1000000, "burst": 100000}})
	var healthy atomic.Bool
	var hooks []string
	for range 6 {
		rc := newReceiver(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
			if !healthy.Load() {
				w.WriteHeader(http.StatusInternalServerError)
			}
		})
		hook := s.webhookAs(key, rc.URL, map[string]any{
			"circuit_breaker_config": map[string]any{"minimum_throughput": 3, "error_threshold_percentage": 50, "window_size_ms": 1000,
				"sleep_window_ms": 1000, "half_open_max_calls": 20, "half_open_success_threshold": 5},
			"retry_config": map[string]any{"max_attempts": 50, "base_delay_ms": 100, "max_delay_ms": 200, "timeout_ms": 2000},
			"rate_limit":   map[string]any{"requests_per_minute": 100000, "burst": 1000},
		})
		hooks = append(hooks, hook)
	}
	states := func() map[string]string {
		out := map[string]string{}
		rows, err := s.Pool.Query(context.Background(), `SELECT webhook_id::text, state FROM circuit_breaker_states`)
		require.NoError(t, err)
		defer rows.Close()
		for rows.Next() {
			var id, st string
			require.NoError(t, rows.Scan(&id, &st))
			out[id] = st
		}
		require.NoError(t, rows.Err())
		return out
	}
	all := func(st map[string]string, want string) bool {
		for _, h := range hooks {
			if st[h] != want {
				return false
			}
		}
		return true
	}
	start, total := time.Now(), 0
	for cycle := 0; time.Since(start) < 10*time.Second; cycle++ {
		healthy.Store(false)
		for i := range 3 {
			s.publishAs(key, "order.created", map[string]any{"cycle": cycle, "failing": i})
		}
		total += 3 * len(hooks)
		testwait.Eventually(t, 20*time.Second, func() bool { return all(states(), "open") }, "cycle %d: circuits to open", cycle)
		healthy.Store(true)
		// First tried while open: postponed to the end of the sleep window,
		// they come back together and race for the probes.
		for i := range 8 {
			s.publishAs(key, "order.created", map[string]any{"cycle": cycle, "while_open": i})
		}
		total += 8 * len(hooks)
		testwait.Eventually(t, 30*time.Second, func() bool {
			return s.Count(`SELECT count(*) FROM deliveries WHERE status = 'succeeded'`) == total
		}, "cycle %d: every delivery to succeed", cycle)
		for _, h := range hooks {
			require.Equal(t, "closed", s.circuitOf(h, key)["state"], "cycle %d: the live circuit is closed", cycle)
		}
		var last struct{ Persisted map[string]string }
		testwait.Eventually(t, 5*time.Second, func() bool { last.Persisted = states(); return all(last.Persisted, "closed") },
			"cycle %d: a state persisted for the Redis fallback disagrees with its live (closed) circuit: %+v", cycle, &last)
	}
}
