package e2e

import (
	"encoding/json"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/systemtest"
	"github.com/hookline/hookline/internal/testwait"
)

// notification is an owner notification as a receiver gets it.
type notification struct {
	Type string         `json:"event_type"`
	Data map[string]any `json:"data"`
}

func notificationsOf(t *testing.T, rc *receiver) []notification {
	t.Helper()
	var out []notification
	for _, r := range rc.requests() {
		var n notification
		require.NoError(t, json.Unmarshal(r.Body, &n))
		out = append(out, n)
	}
	return out
}

// failingSince reads a webhook's failing_since (nil while its last attempt
// succeeded).
func (s *system) failingSince(hook string) *time.Time {
	s.t.Helper()
	var since *time.Time
	require.NoError(s.t, s.Pool.QueryRow(s.t.Context(), `SELECT failing_since FROM webhooks WHERE id = $1`, hook).Scan(&since))
	return since
}

// The worker marks a webhook failing at its first failed attempt and clears
// the mark at its next success.
func TestFailingSinceFollowsAttempts(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	var healthy atomic.Bool
	rc := newReceiver(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
		if !healthy.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})
	hook := s.fastHook(rc.URL, map[string]any{"retry_config": map[string]any{"max_attempts": 20, "schedule_ms": []int{300}}})
	require.Nil(t, s.failingSince(hook))
	id := s.deliveryOf(s.publish("order.created", map[string]any{"n": 1}))
	testwait.Eventually(t, 15*time.Second, func() bool { return s.failingSince(hook) != nil }, "the webhook to be marked failing")
	first := *s.failingSince(hook)
	testwait.Eventually(t, 15*time.Second, func() bool { return len(rc.requests()) >= 2 }, "a second failed attempt")
	require.Equal(t, first, *s.failingSince(hook), "failing since the first failure, not the last")

	healthy.Store(true)
	s.waitStatus(id, "succeeded", 15*time.Second)
	require.Nil(t, s.failingSince(hook))
}

// An endpoint that fails without a success for its window is disabled
// automatically: the API says why and since when, the tenant's webhook
// subscribed to webhook.endpoint_disabled is told, the audit log has it;
// enabling it again is an ordinary update that clears the reason.
func TestFailingEndpointIsDisabledAndItsOwnerTold(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	dead := newReceiver(t, func(_ int, w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusBadGateway) })
	owner := newReceiver(t, func(int, http.ResponseWriter, *http.Request) {})
	hook := s.fastHook(dead.URL, map[string]any{"events": []string{"order.*"}, "auto_disable": map[string]any{"failing_for_ms": 1000}})
	s.fastHook(owner.URL, map[string]any{"events": []string{"webhook.endpoint_disabled"}})

	s.publish("order.created", map[string]any{"n": 1})
	var w map[string]any
	testwait.Eventually(t, 20*time.Second, func() bool {
		s.call("GET", "/v1/webhooks/"+hook, s.key, nil, http.StatusOK, &w)
		return w["active"] == false
	}, "the webhook to be disabled")
	require.Equal(t, "auto_disabled", w["disabled_reason"])
	disabledAt, err := time.Parse(time.RFC3339Nano, w["disabled_at"].(string))
	require.NoError(t, err)
	since := s.failingSince(hook)
	require.NotNil(t, since)
	require.GreaterOrEqual(t, disabledAt.Sub(*since), time.Second, "not before its window has passed")

	testwait.Eventually(t, 20*time.Second, func() bool { return len(owner.requests()) == 1 }, "the owner to be told")
	n := notificationsOf(t, owner)[0]
	require.Equal(t, "webhook.endpoint_disabled", n.Type)
	require.Equal(t, hook, n.Data["webhook_id"])
	require.Equal(t, dead.URL, n.Data["url"])
	require.Equal(t, "auto_disabled", n.Data["disabled_reason"])
	require.Equal(t, "failing", n.Data["cause"])
	require.Equal(t, 1000.0, n.Data["failing_for_ms"])
	require.Len(t, dead.requests(), 1, "the notification is not sent to the webhook it is about")

	var log struct {
		Data []map[string]any `json:"data"`
	}
	s.call("GET", "/v1/audit", s.key, nil, http.StatusOK, &log)
	require.Equal(t, "webhook.auto_disabled", log.Data[0]["action"])
	require.Equal(t, hook, log.Data[0]["target_id"])
	require.Nil(t, log.Data[0]["actor_key_id"])

	s.call("PATCH", "/v1/webhooks/"+hook, s.key, map[string]any{"active": true}, http.StatusOK, &w)
	require.Equal(t, true, w["active"])
	require.Equal(t, "", w["disabled_reason"])
	require.Nil(t, w["disabled_at"])
	require.Nil(t, s.failingSince(hook), "enabled again, it starts a new window")
}

// A circuit that opens again after its probes fail, a configured number of
// times in a row, disables its webhook before its failure window ends.
func TestCircuitReopeningInARowDisables(t *testing.T) {
	t.Parallel()
	s := &system{System: systemtest.Start(t, systemtest.Options{Workers: 16, CircuitReopens: 2}), t: t}
	s.tenantID, s.key = s.Tenant("e2e")
	dead := newReceiver(t, func(_ int, w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusBadGateway) })
	owner := newReceiver(t, func(int, http.ResponseWriter, *http.Request) {})
	breaker := map[string]any{"enabled": true, "error_threshold_percentage": 50, "minimum_throughput": 1,
		"window_size_ms": 10_000, "sleep_window_ms": 1000, "half_open_max_calls": 1, "half_open_success_threshold": 100}
	hook := s.fastHook(dead.URL, map[string]any{"events": []string{"order.*"}, "circuit_breaker_config": breaker,
		"retry_config": map[string]any{"max_attempts": 50, "schedule_ms": []int{100}}})
	s.fastHook(owner.URL, map[string]any{"events": []string{"webhook.endpoint_disabled"}})

	s.publish("order.created", map[string]any{"n": 1})
	testwait.Eventually(t, 30*time.Second, func() bool { return len(owner.requests()) == 1 }, "the webhook to be disabled")
	n := notificationsOf(t, owner)[0]
	require.Equal(t, hook, n.Data["webhook_id"])
	require.Equal(t, "circuit_reopens", n.Data["cause"])
	require.Equal(t, 2.0, n.Data["circuit_reopens"])
	var w map[string]any
	s.call("GET", "/v1/webhooks/"+hook, s.key, nil, http.StatusOK, &w)
	require.Equal(t, "auto_disabled", w["disabled_reason"])
	// Its delivery is kept, waiting for the webhook, not exhausted.
	require.Equal(t, 1, s.Count(`SELECT count(*) FROM deliveries WHERE webhook_id = $1 AND status = 'retrying'`, hook))
}

// batchOp reads a batch operation.
func (s *system) batchOp(id string) map[string]any {
	s.t.Helper()
	var b map[string]any
	s.call("GET", "/v1/dlq/batch-operations/"+id, s.key, nil, http.StatusOK, &b)
	return b
}

// After an endpoint was disabled automatically and enabled again, a
// recovery of the window gives its DLQ entry a retry and each event
// published while it was disabled one delivery, with progress on the batch
// operation; running it again delivers nothing more. Each process part runs
// under its own database role.
func TestRecoveryAfterReEnablingDeliversMissedEventsOnce(t *testing.T) {
	t.Parallel()
	s := newSystem(t, func(o *systemtest.Options) { o.Roles = true })
	var healthy atomic.Bool
	var mu sync.Mutex
	seen := map[string]int{}
	rc := newReceiver(t, func(_ int, w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen[r.Header.Get("X-Webhook-Event")+" "+r.Header.Get("X-Idempotency-Key")]++
		mu.Unlock()
		if !healthy.Load() {
			w.WriteHeader(http.StatusBadGateway)
		}
	})
	from := time.Now().Add(-time.Second).UTC()
	hook := s.fastHook(rc.URL, map[string]any{"events": []string{"order.*"}, "auto_disable": map[string]any{"failing_for_ms": 1000}})
	first := s.publish("order.created", map[string]any{"n": 0})
	s.waitStatus(s.deliveryOf(first), "exhausted", 15*time.Second)
	testwait.Eventually(t, 20*time.Second, func() bool {
		var w map[string]any
		s.call("GET", "/v1/webhooks/"+hook, s.key, nil, http.StatusOK, &w)
		return w["disabled_reason"] == "auto_disabled"
	}, "the webhook to be disabled")
	for i := range 5 {
		var r map[string]any
		s.call("POST", "/v1/events", s.key, map[string]any{"event_type": "order.created", "data": map[string]any{"n": i + 1}},
			http.StatusAccepted, &r)
		require.Equal(t, 0.0, r["deliveries"], "no delivery to a disabled webhook")
	}
	healthy.Store(true)
	s.call("PATCH", "/v1/webhooks/"+hook, s.key, map[string]any{"active": true}, http.StatusOK, nil)

	path := "/v1/webhooks/" + hook + "/recover"
	var counts map[string]any
	s.call("POST", path, s.key, map[string]any{"from": from, "dry_run": true}, http.StatusOK, &counts)
	require.Equal(t, 6.0, counts["total"])
	require.Equal(t, 1.0, counts["recovery"].(map[string]any)["failed"])
	require.Equal(t, 5.0, counts["recovery"].(map[string]any)["missed"])

	body := map[string]any{"from": from, "include": []string{"failed", "missed"}, "rate_limit": map[string]any{"requests_per_second": 20}}
	var started map[string]any
	s.call("POST", path, s.key, body, http.StatusAccepted, &started)
	id := started["batch_operation_id"].(string)
	var b map[string]any
	testwait.Eventually(t, 30*time.Second, func() bool { b = s.batchOp(id); return b["state"] == "completed" },
		"the recovery to complete")
	require.Equal(t, 6.0, b["total"])
	require.Equal(t, 6.0, b["processed"])
	require.Equal(t, 6.0, b["succeeded"])
	require.Equal(t, 0.0, b["skipped"])

	mu.Lock()
	require.Len(t, seen, 6, "every event reached the endpoint")
	for key, n := range seen {
		want := 1
		if key == "order.created "+s.idempotencyKey(first) {
			want = 2 // its failed attempt, then its retry
		}
		require.Equal(t, want, n, key)
	}
	mu.Unlock()

	s.call("POST", path, s.key, map[string]any{"from": from, "dry_run": true}, http.StatusOK, &counts)
	require.Equal(t, 0.0, counts["total"], "nothing left to recover")
	s.call("POST", path, s.key, body, http.StatusAccepted, &started)
	id = started["batch_operation_id"].(string)
	testwait.Eventually(t, 30*time.Second, func() bool { b = s.batchOp(id); return b["state"] == "completed" },
		"the second recovery to complete")
	require.Equal(t, 0.0, b["total"])
	require.Len(t, rc.requests(), 7)
}

func (s *system) idempotencyKey(eventID string) string {
	s.t.Helper()
	var key string
	require.NoError(s.t, s.Pool.QueryRow(s.t.Context(), `SELECT idempotency_key FROM events WHERE id = $1`, eventID).Scan(&key))
	return key
}
