package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/systemtest"
	"github.com/hookline/hookline/internal/testwait"
)

// unlimited lifts the delivery rate limits of the system's tenant, so that
// a batch runs at its own rate.
func (s *system) unlimited() {
	s.t.Helper()
	s.call("PATCH", "/v1/tenants/"+s.tenantID.String(), systemtest.AdminToken,
		map[string]any{"rate_limit": map[string]any{"requests_per_minute": 600_000, "burst": 10_000}}, http.StatusOK, nil)
}

// fastHook is a webhook without rate limit worth the name, one attempt per
// delivery.
func (s *system) fastHook(url string, extra map[string]any) string {
	s.t.Helper()
	body := map[string]any{"rate_limit": map[string]any{"requests_per_minute": 600_000, "burst": 10_000},
		"retry_config": map[string]any{"max_attempts": 1}}
	for k, v := range extra {
		body[k] = v
	}
	id, _ := s.webhook(url, body)
	return id
}

// seedExhausted stores n exhausted deliveries to hook (with their events)
// as if they had failed, and returns their ids.
func (s *system) seedExhausted(hook string, n int, eventType, category string) []uuid.UUID {
	s.t.Helper()
	rows, err := s.Pool.Query(context.Background(), `WITH ev AS (
    INSERT INTO events (id, tenant_id, event_type, idempotency_key, request_hash, priority, data)
    SELECT uuidv7(), $1, $3, 'seed-' || gen_random_uuid(), '\x00', 'normal', json_build_object('n', g)
    FROM generate_series(1, $4) g
    RETURNING id, tenant_id, created_at)
INSERT INTO deliveries (id, tenant_id, event_id, webhook_id, status, priority, attempt_count, failure_category,
    last_status_code, last_error, completed_at, dead_lettered_at, created_at)
SELECT uuidv7(), tenant_id, id, $2, 'exhausted', 'normal', 3, $5, 502, '502 Bad Gateway', now(), now(), created_at FROM ev
RETURNING id`, s.tenantID, hook, eventType, n, category)
	require.NoError(s.t, err)
	defer rows.Close()
	var ids []uuid.UUID
	for rows.Next() {
		var id uuid.UUID
		require.NoError(s.t, rows.Scan(&id))
		ids = append(ids, id)
	}
	require.NoError(s.t, rows.Err())
	return ids
}

type batchView struct {
	ID         string     `json:"id"`
	State      string     `json:"state"`
	Total      int        `json:"total"`
	Processed  int        `json:"processed"`
	Skipped    int        `json:"skipped"`
	Succeeded  int        `json:"succeeded"`
	Failed     int        `json:"failed"`
	StartedAt  *time.Time `json:"started_at"`
	FinishedAt *time.Time `json:"finished_at"`
}

func (s *system) batch(id string) batchView {
	s.t.Helper()
	var b batchView
	s.call("GET", "/v1/dlq/batch-operations/"+id, s.key, nil, http.StatusOK, &b)
	return b
}

func (s *system) startBatch(filter map[string]any, rps int) string {
	s.t.Helper()
	var out map[string]any
	s.call("POST", "/v1/dlq/retry-batch", s.key, map[string]any{"filter": filter,
		"rate_limit": map[string]any{"requests_per_second": rps}, "priority": "high"}, http.StatusAccepted, &out)
	return out["batch_operation_id"].(string)
}

// An exhausted delivery retried by hand once its endpoint is healthy
// again: a new delivery of the same event succeeds, linked to the original,
// which keeps its state and attempts; the DLQ no longer lists it as open.
func TestRetryOneExhaustedDelivery(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	var healthy atomic.Bool
	rc := newReceiver(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
		if !healthy.Load() {
			w.WriteHeader(http.StatusInternalServerError)
		}
	})
	hook := s.fastHook(rc.URL, nil)
	event := s.publish("order.created", map[string]any{"id": 1})
	orig := s.deliveryOf(event)
	s.waitStatus(orig, "exhausted", 15*time.Second)

	var page struct {
		Data []struct {
			ID              uuid.UUID  `json:"id"`
			FailureCategory string     `json:"failure_category"`
			RetriedBy       *uuid.UUID `json:"retried_by"`
		} `json:"data"`
	}
	s.call("GET", "/v1/dlq", s.key, nil, http.StatusOK, &page)
	require.Len(t, page.Data, 1)
	require.Equal(t, orig, page.Data[0].ID)
	require.Equal(t, "server_error", page.Data[0].FailureCategory)

	healthy.Store(true)
	var out struct {
		DeliveryID uuid.UUID `json:"delivery_id"`
	}
	s.call("POST", "/v1/webhooks/"+hook+"/deliveries/"+orig.String()+"/retry", s.key, map[string]any{"priority": "high"},
		http.StatusAccepted, &out)
	s.waitStatus(out.DeliveryID, "succeeded", 15*time.Second)

	var got map[string]any
	s.call("GET", "/v1/deliveries/"+out.DeliveryID.String(), s.key, nil, http.StatusOK, &got)
	require.Equal(t, orig.String(), got["retry_of"])
	require.Equal(t, event, got["event_id"])
	s.call("GET", "/v1/deliveries/"+orig.String(), s.key, nil, http.StatusOK, &got)
	require.Equal(t, "exhausted", got["status"], "the original is kept as it was")
	require.Len(t, got["attempts"], 1)

	reqs := rc.requests()
	require.Len(t, reqs, 2)
	require.Equal(t, reqs[0].Header.Get("X-Idempotency-Key"), reqs[1].Header.Get("X-Idempotency-Key"),
		"a retry carries the event's idempotency key")
	require.JSONEq(t, string(reqs[0].Body), string(reqs[1].Body))

	s.call("GET", "/v1/dlq", s.key, nil, http.StatusOK, &page)
	require.Empty(t, page.Data, "a retried delivery leaves the open DLQ")
	s.call("GET", "/v1/dlq?include_retried=true", s.key, nil, http.StatusOK, &page)
	require.Len(t, page.Data, 1)
	require.Equal(t, out.DeliveryID, *page.Data[0].RetriedBy)
}

// A batch over 1,000 exhausted deliveries at 200 per second takes about
// five seconds, retries each delivery once, and completes with every retry
// succeeded.
func TestBatchRetryRunsAtItsRateAndCompletes(t *testing.T) {
	t.Parallel()
	s := newSystem(t, func(o *systemtest.Options) { o.Workers = 64 })
	s.unlimited()
	rc := newReceiver(t, func(int, http.ResponseWriter, *http.Request) {})
	hook := s.fastHook(rc.URL, nil)
	other := s.fastHook(rc.URL, nil)
	ids := s.seedExhausted(hook, 1000, "order.created", "server_error")
	s.seedExhausted(other, 20, "order.created", "server_error") // not in the filter

	id := s.startBatch(map[string]any{"webhook_ids": []string{hook}}, 200)
	var b batchView
	testwait.Eventually(t, 60*time.Second, func() bool { b = s.batch(id); return b.State == "completed" }, "batch %s to complete", id)
	require.Equal(t, 1000, b.Total)
	require.Equal(t, 1000, b.Processed)
	require.Equal(t, 1000, b.Succeeded)
	require.Zero(t, b.Failed)
	require.Zero(t, b.Skipped)

	require.Equal(t, 1000, s.Count(`SELECT count(DISTINCT retry_of) FROM deliveries WHERE retry_of = ANY($1)`, ids))
	require.Equal(t, 1000, s.Count(`SELECT count(*) FROM deliveries WHERE retry_of = ANY($1)`, ids), "each retried once")
	require.Zero(t, s.Count(`SELECT count(*) FROM deliveries WHERE webhook_id = $1 AND retry_of IS NOT NULL`, other))
	require.Len(t, rc.requests(), 1000)

	var first, last time.Time
	require.NoError(t, s.Pool.QueryRow(context.Background(),
		`SELECT min(created_at), max(created_at) FROM deliveries WHERE batch_operation_id = $1`, id).Scan(&first, &last))
	span := last.Sub(first)
	t.Logf("1,000 retries enqueued over %s at 200/s", span)
	// 50 chunks of 20, the last one due 4.9 s after the first.
	require.GreaterOrEqual(t, span, 4800*time.Millisecond, "faster than 200 per second")
}

// Cancelling a running batch stops it: no delivery is given a retry after
// the cancel answered.
func TestBatchRetryCancel(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	s.unlimited()
	rc := newReceiver(t, func(int, http.ResponseWriter, *http.Request) {})
	hook := s.fastHook(rc.URL, nil)
	s.seedExhausted(hook, 300, "order.created", "timeout")

	id := s.startBatch(map[string]any{"failure_categories": []string{"timeout"}}, 20)
	testwait.Eventually(t, 15*time.Second, func() bool { return s.batch(id).Processed >= 4 }, "batch to make progress")
	var cancelled batchView
	s.call("POST", "/v1/dlq/batch-operations/"+id+"/cancel", s.key, nil, http.StatusOK, &cancelled)
	require.Equal(t, "cancelled", cancelled.State)
	require.Less(t, cancelled.Processed, 300)
	require.NotNil(t, cancelled.FinishedAt)

	// At 20 per second, a batch still running would add two retries every
	// 100 ms; watch it for a second and a half.
	watch := time.NewTicker(50 * time.Millisecond)
	defer watch.Stop()
	for end := time.Now().Add(1500 * time.Millisecond); time.Now().Before(end); <-watch.C {
		require.Equal(t, cancelled.Processed, s.Count(`SELECT count(*) FROM deliveries WHERE batch_operation_id = $1`, id))
	}
	testwait.Eventually(t, 15*time.Second, func() bool { return s.batch(id).Succeeded == cancelled.Processed },
		"the retries enqueued before the cancel to be counted")
	require.Equal(t, "cancelled", s.batch(id).State)
	var e map[string]any
	s.call("POST", "/v1/dlq/batch-operations/"+id+"/cancel", s.key, nil, http.StatusConflict, &e)
	require.Equal(t, "batch_finished", e["error"].(map[string]any)["code"])
}

// Replay publishes the event again as a new event, to every subscriber or
// to the one webhook named.
func TestReplayEvent(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	a := newReceiver(t, func(int, http.ResponseWriter, *http.Request) {})
	b := newReceiver(t, func(int, http.ResponseWriter, *http.Request) {})
	s.fastHook(a.URL, nil)
	hookB := s.fastHook(b.URL, nil)
	orig := s.publish("order.created", map[string]any{"id": 42})
	testwait.Eventually(t, 15*time.Second, func() bool { return len(a.requests()) == 1 && len(b.requests()) == 1 }, "first deliveries")

	var r map[string]any
	s.call("POST", "/v1/events/"+orig+"/replay", s.key, nil, http.StatusAccepted, &r)
	require.Equal(t, orig, r["replay_of"])
	require.Equal(t, 2.0, r["deliveries"])
	require.NotEqual(t, orig, r["id"])
	testwait.Eventually(t, 15*time.Second, func() bool { return len(a.requests()) == 2 && len(b.requests()) == 2 }, "replayed deliveries")
	var first, again map[string]any
	require.NoError(t, json.Unmarshal(a.requests()[0].Body, &first))
	require.NoError(t, json.Unmarshal(a.requests()[1].Body, &again))
	require.Equal(t, first["data"], again["data"])
	require.NotEqual(t, a.requests()[0].Header.Get("X-Idempotency-Key"), a.requests()[1].Header.Get("X-Idempotency-Key"),
		"a replay is a new event with a fresh idempotency key")

	var ev map[string]any
	s.call("GET", "/v1/events/"+r["id"].(string), s.key, nil, http.StatusOK, &ev)
	require.Equal(t, orig, ev["replay_of"])

	s.call("POST", "/v1/events/"+orig+"/replay", s.key, map[string]any{"webhook_id": hookB}, http.StatusAccepted, &r)
	require.Equal(t, 1.0, r["deliveries"])
	testwait.Eventually(t, 15*time.Second, func() bool { return len(b.requests()) == 3 }, "replay to one webhook")
	require.Len(t, a.requests(), 2)

	s.call("POST", "/v1/events/"+uuid.NewString()+"/replay", s.key, nil, http.StatusNotFound, nil)
}

// Owner notifications: an exhausted delivery is announced to the webhook
// subscribed to webhook.*; when that webhook fails too, its own exhausted
// notification delivery announces nothing (no loop).
func TestExhaustedNotificationDoesNotLoop(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	bad := newReceiver(t, func(_ int, w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusBadGateway) })
	watcher := newReceiver(t, func(_ int, w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) })
	hook := s.fastHook(bad.URL, map[string]any{"events": []string{"order.*"}})
	watch := s.fastHook(watcher.URL, map[string]any{"events": []string{"webhook.*"}})
	catchAll := newReceiver(t, func(int, http.ResponseWriter, *http.Request) {})
	s.fastHook(catchAll.URL, nil) // "*": every event of the tenant, but no notification

	event := s.publish("order.created", map[string]any{"id": 9})
	var orig uuid.UUID
	require.NoError(t, s.Pool.QueryRow(context.Background(), `SELECT id FROM deliveries WHERE event_id = $1 AND webhook_id = $2`, event, hook).Scan(&orig))
	s.waitStatus(orig, "exhausted", 15*time.Second)
	testwait.Eventually(t, 20*time.Second, func() bool { return len(watcher.requests()) == 1 }, "the notification to arrive")
	testwait.Eventually(t, 20*time.Second, func() bool { return len(catchAll.requests()) == 1 }, "the event itself to reach the catch-all webhook")
	var n struct {
		Type string         `json:"event_type"`
		Data map[string]any `json:"data"`
	}
	require.NoError(t, json.Unmarshal(watcher.requests()[0].Body, &n))
	require.Equal(t, "webhook.delivery_exhausted", n.Type)
	require.Equal(t, orig.String(), n.Data["delivery_id"])
	require.Equal(t, hook, n.Data["webhook_id"])
	require.Equal(t, "server_error", n.Data["failure_category"])
	require.Equal(t, 502.0, n.Data["last_status_code"])

	// The notification's own delivery fails and is exhausted: once it is
	// recorded, no further notification exists.
	var notif uuid.UUID
	require.NoError(t, s.Pool.QueryRow(context.Background(), `SELECT id FROM deliveries WHERE webhook_id = $1`, watch).Scan(&notif))
	s.waitStatus(notif, "exhausted", 15*time.Second)
	require.Equal(t, 1, s.Count(`SELECT count(*) FROM events WHERE event_type LIKE 'webhook.%'`))
	require.Len(t, watcher.requests(), 1)
	require.Len(t, bad.requests(), 1, "a notification is never delivered to the webhook it is about")
	require.Len(t, catchAll.requests(), 1, "a catch-all filter does not subscribe to notifications")

	var e map[string]any
	s.call("POST", "/v1/events", s.key, map[string]any{"event_type": "webhook.delivery_exhausted", "data": map[string]any{}},
		http.StatusBadRequest, &e)
	require.Equal(t, "event_type", e["error"].(map[string]any)["field"])
}

// A circuit that opens and recovers is announced to the subscribed webhook;
// transitions decided by a notification's own delivery are not.
func TestCircuitNotifications(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	var healthy atomic.Bool
	flaky := newReceiver(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
		if !healthy.Load() {
			w.WriteHeader(http.StatusBadGateway)
		}
	})
	watcher := newReceiver(t, func(int, http.ResponseWriter, *http.Request) {})
	breaker := map[string]any{"enabled": true, "error_threshold_percentage": 50, "minimum_throughput": 3,
		"window_size_ms": 10_000, "sleep_window_ms": 1000, "half_open_max_calls": 1, "half_open_success_threshold": 1}
	hook := s.fastHook(flaky.URL, map[string]any{"events": []string{"order.*"}, "circuit_breaker_config": breaker})
	s.fastHook(watcher.URL, map[string]any{"events": []string{"webhook.circuit_*"}})

	for i := range 3 {
		s.publish("order.created", map[string]any{"i": i})
	}
	types := func() []string {
		var out []string
		for _, r := range watcher.requests() {
			var n struct {
				Type string         `json:"event_type"`
				Data map[string]any `json:"data"`
			}
			require.NoError(t, json.Unmarshal(r.Body, &n))
			require.Equal(t, hook, n.Data["webhook_id"])
			out = append(out, n.Type)
		}
		return out
	}
	testwait.Eventually(t, 20*time.Second, func() bool { return len(types()) == 1 }, "the circuit_opened notification")
	require.Equal(t, []string{"webhook.circuit_opened"}, types())

	healthy.Store(true)
	s.publish("order.created", map[string]any{"probe": true})
	testwait.Eventually(t, 20*time.Second, func() bool { return len(types()) == 2 }, "the circuit_recovered notification")
	require.Equal(t, []string{"webhook.circuit_opened", "webhook.circuit_recovered"}, types())
}

// A batch retry of an ordered webhook's exhausted deliveries gives each
// retry the webhook's order key, so the retries go one at a time, in event
// order, like any other deliveries of that key.
func TestBatchRetryKeepsTheOrderKey(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	s.unlimited()
	rc := newReceiver(t, func(int, http.ResponseWriter, *http.Request) {})
	hook := s.fastHook(rc.URL, map[string]any{"ordering_guarantee": "strict"})
	s.seedExhausted(hook, 3, "order.updated", "server_error")
	id := s.startBatch(map[string]any{"webhook_ids": []string{hook}}, 100)
	testwait.Eventually(t, 20*time.Second, func() bool { return s.batch(id).State == "completed" }, "the batch to complete")
	require.Equal(t, 3, s.Count(`SELECT count(*) FROM deliveries WHERE retry_of IS NOT NULL`))
	require.Zero(t, s.Count(`SELECT count(*) FROM deliveries WHERE retry_of IS NOT NULL AND order_key IS DISTINCT FROM $1`, hook),
		"every retry carries the strict webhook's order key")
}
