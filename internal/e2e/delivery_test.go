package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/metrics"
	"github.com/hookline/hookline/internal/signature"
	"github.com/hookline/hookline/internal/systemtest"
	"github.com/hookline/hookline/internal/testwait"
)

const tolerance = 5 * time.Minute

// verify checks both signatures of a received request against secrets.
func verify(t *testing.T, r received, secrets ...string) {
	t.Helper()
	for _, s := range secrets {
		require.NoError(t, signature.VerifyStandard(s, r.Header.Get("webhook-id"), r.Header.Get("webhook-timestamp"),
			r.Header.Get("webhook-signature"), r.Body, time.Now(), tolerance))
		require.NoError(t, signature.VerifyLegacy(s, r.Header.Get("X-Webhook-Signature"), r.Body, time.Now(), tolerance))
	}
}

func TestDeliveryRequestShape(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	rc := newReceiver(t, func(int, http.ResponseWriter, *http.Request) {})
	hookID, secret := s.webhook(rc.URL+"/in?x=1", map[string]any{"headers": map[string]string{"X-Team": "payments"}})
	eventID := s.publish("order.created", map[string]any{"order_id": 42, "big": json.Number("12345678901234567890")})
	id := s.deliveryOf(eventID)
	s.waitStatus(id, "succeeded", 15*time.Second)

	reqs := rc.requests()
	require.Len(t, reqs, 1)
	r := reqs[0]
	verify(t, r, secret)
	h := r.Header
	require.Equal(t, "application/json", h.Get("Content-Type"))
	require.Equal(t, "hookline/0.1.0", h.Get("User-Agent"))
	require.Equal(t, hookID, h.Get("X-Webhook-ID"))
	require.Equal(t, "order.created", h.Get("X-Webhook-Event"))
	require.Equal(t, id.String(), h.Get("X-Webhook-Delivery"))
	require.Equal(t, "1", h.Get("X-Webhook-Attempt"))
	require.Equal(t, h.Get("webhook-timestamp"), h.Get("X-Webhook-Timestamp"))
	ts, err := strconv.ParseInt(h.Get("X-Webhook-Timestamp"), 10, 64)
	require.NoError(t, err)
	require.InDelta(t, time.Now().Unix(), ts, 10)
	require.Equal(t, eventID, h.Get("webhook-id"))
	require.Equal(t, eventID, h.Get("X-Correlation-Id"))
	require.Regexp(t, `^idk_`, h.Get("X-Idempotency-Key"))
	require.Equal(t, "payments", h.Get("X-Team"))

	var env map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(r.Body, &env))
	require.ElementsMatch(t, []string{"id", "event_type", "timestamp", "data", "source"}, keys(env))
	require.Equal(t, `"`+eventID+`"`, string(env["id"]))
	require.Equal(t, `{"big":12345678901234567890,"order_id":42}`, string(env["data"]), "the payload as published, numbers intact")

	at := s.attempts(id)
	require.Len(t, at, 1)
	require.Equal(t, 200, *at[0].StatusCode)
	require.Nil(t, at[0].Category)
}

func keys(m map[string]json.RawMessage) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// During a secret rotation both secrets sign: two v1 values in each header,
// each verifying with its own secret.
func TestDeliverySignedWithBothSecretsDuringRotation(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	rc := newReceiver(t, func(int, http.ResponseWriter, *http.Request) {})
	hookID, old := s.webhook(rc.URL, nil)
	var rotated map[string]any
	s.call("POST", "/v1/webhooks/"+hookID+"/secret/rotate", s.key, nil, http.StatusOK, &rotated)
	fresh := rotated["secret"].(string)
	s.waitStatus(s.deliveryOf(s.publish("a.b", map[string]any{})), "succeeded", 15*time.Second)
	r := rc.requests()[0]
	verify(t, r, old, fresh)
	require.Len(t, strings.Fields(r.Header.Get("webhook-signature")), 2)
	require.Equal(t, 2, strings.Count(r.Header.Get("X-Webhook-Signature"), "v1="))
}

func TestRetryThenSuccessKeepsIdentity(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	rc := newReceiver(t, func(n int, w http.ResponseWriter, _ *http.Request) {
		if n == 0 {
			w.WriteHeader(http.StatusInternalServerError)
		}
	})
	_, secret := s.webhook(rc.URL, map[string]any{"retry_config": map[string]any{"base_delay_ms": 200}})
	id := s.deliveryOf(s.publish("order.created", map[string]any{"n": 1}))
	s.waitStatus(id, "succeeded", 20*time.Second)

	reqs := rc.requests()
	require.Len(t, reqs, 2)
	for _, r := range reqs {
		verify(t, r, secret)
	}
	require.Equal(t, "1", reqs[0].Header.Get("X-Webhook-Attempt"))
	require.Equal(t, "2", reqs[1].Header.Get("X-Webhook-Attempt"))
	for _, h := range []string{"X-Idempotency-Key", "webhook-id", "X-Webhook-Delivery"} {
		require.Equal(t, reqs[0].Header.Get(h), reqs[1].Header.Get(h), h)
	}
	at := s.attempts(id)
	require.Len(t, at, 2)
	require.Equal(t, 500, *at[0].StatusCode)
	require.Equal(t, "server_error", *at[0].Category)
	require.Equal(t, 200, *at[1].StatusCode)
	require.Equal(t, 1, s.Count(`SELECT count(*) FROM deliveries WHERE id = $1 AND attempt_count = 2 AND completed_at IS NOT NULL`, id))
}

func TestPermanentFailureExhaustsAtOnce(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	rc := newReceiver(t, func(_ int, w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNotFound) })
	s.webhook(rc.URL, nil)
	id := s.deliveryOf(s.publish("order.created", map[string]any{}))
	s.waitStatus(id, "exhausted", 15*time.Second)
	require.Len(t, rc.requests(), 1)
	at := s.attempts(id)
	require.Len(t, at, 1)
	require.Equal(t, 404, *at[0].StatusCode)
	require.Equal(t, "client_error", *at[0].Category)
	var lastErr, category string
	require.NoError(t, s.Pool.QueryRow(context.Background(), `SELECT last_error, failure_category FROM deliveries WHERE id = $1`, id).Scan(&lastErr, &category))
	require.Contains(t, lastErr, "permanent status 404")
	require.Equal(t, "client_error", category)
}

// An always-failing endpoint gets exactly max_attempts attempts, each no
// earlier than scheduled, with the backoff between them; then the delivery
// is exhausted and recorded by the dlq. How late retries run against the
// docs/DESIGN.md §5 tolerance (max(1 s, 10 %)) is measured by bench/retry,
// not here: under the whole suite's load one attempt once ran 1.04 s
// late. The bound here, 5 s, tells a retry left to wait for something
// other than its time (the waker looks every 100 ms) from one a loaded
// machine delayed.
func TestAlwaysFailingEndpointIsExhaustedOnSchedule(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	rc := newReceiver(t, func(_ int, w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusBadGateway) })
	s.webhook(rc.URL, map[string]any{"retry_config": map[string]any{"max_attempts": 4, "base_delay_ms": 400, "backoff_multiplier": 2}})
	id := s.deliveryOf(s.publish("order.created", map[string]any{}))
	s.waitStatus(id, "exhausted", 30*time.Second)

	require.Len(t, rc.requests(), 4)
	at := s.attempts(id)
	require.Len(t, at, 4)
	for i, a := range at {
		require.Equal(t, i+1, a.Number)
		late := a.ExecutedAt.Sub(a.ScheduledAt)
		require.GreaterOrEqual(t, late, time.Duration(0), "attempt %d ran before it was due", a.Number)
		if i > 0 {
			delay := a.ScheduledAt.Sub(at[i-1].ExecutedAt)
			base := 400 * time.Millisecond << (i - 1)
			require.GreaterOrEqual(t, delay, base*3/4, "attempt %d: backoff %s below base %s - 25%%", a.Number, delay, base)
			require.LessOrEqual(t, delay, base*5/4+time.Duration(at[i-1].DurationMS)*time.Millisecond+250*time.Millisecond,
				"attempt %d: backoff %s above base %s + 25%%", a.Number, delay, base)
			require.LessOrEqual(t, late, 5*time.Second, "attempt %d ran %s after it was due", a.Number, late)
		}
	}
	var lastErr string
	require.NoError(t, s.Pool.QueryRow(context.Background(), `SELECT last_error FROM deliveries WHERE id = $1`, id).Scan(&lastErr))
	require.Contains(t, lastErr, "max attempts (4) reached")
}

func TestRetryAfterIsHonoured(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	rc := newReceiver(t, func(n int, w http.ResponseWriter, _ *http.Request) {
		if n == 0 {
			w.Header().Set("Retry-After", "3")
			w.WriteHeader(http.StatusTooManyRequests)
		}
	})
	s.webhook(rc.URL, nil)
	id := s.deliveryOf(s.publish("order.created", map[string]any{}))
	s.waitStatus(id, "succeeded", 20*time.Second)
	reqs := rc.requests()
	require.Len(t, reqs, 2)
	require.GreaterOrEqual(t, reqs[1].At.Sub(reqs[0].At), 3*time.Second)
	at := s.attempts(id)
	require.Equal(t, "rate_limit", *at[0].Category)
}

func TestHangingEndpointTimesOut(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	rc := newReceiver(t, func(_ int, _ http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	s.webhook(rc.URL, map[string]any{"retry_config": map[string]any{"max_attempts": 1, "timeout_ms": 300}})
	id := s.deliveryOf(s.publish("order.created", map[string]any{}))
	s.waitStatus(id, "exhausted", 15*time.Second)
	at := s.attempts(id)
	require.Len(t, at, 1)
	require.Nil(t, at[0].StatusCode)
	require.Equal(t, "timeout", *at[0].Category)
	require.InDelta(t, 300, at[0].DurationMS, 250)
}

// A 10 MB answer is not read past the 1 KiB sample: the receiver can only
// write what the socket buffers hold before the worker hangs up.
func TestLargeResponseIsNotReadBeyondTheSample(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	written := make(chan int64, 1)
	rc := newReceiver(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
		chunk := []byte(strings.Repeat("z", 64<<10))
		var n int64
		defer func() { written <- n }()
		for n < 10<<20 {
			k, err := w.Write(chunk)
			n += int64(k)
			if err != nil {
				return
			}
			if f, ok := w.(http.Flusher); ok {
				f.Flush()
			}
		}
	})
	s.webhook(rc.URL, nil)
	id := s.deliveryOf(s.publish("order.created", map[string]any{}))
	s.waitStatus(id, "succeeded", 15*time.Second)
	at := s.attempts(id)
	require.Len(t, at[0].Sample, 1024)
	select {
	case n := <-written:
		require.Less(t, n, int64(10<<20), "the worker hung up before the whole body was sent")
		t.Logf("receiver managed to write %d bytes of 10 MiB before the worker hung up", n)
	case <-time.After(10 * time.Second):
		t.Fatal("the receiver is still writing: the body is being read")
	}
}

// A webhook whose host resolves to loopback is refused at dial time when
// private networks are not allowed, even though it was stored (as after a
// DNS change): nothing reaches the endpoint.
func TestPrivateAddressRefusedAtDialTime(t *testing.T) {
	t.Parallel()
	s := newSystem(t, func(o *systemtest.Options) { o.BlockPrivate = true })
	rc := newReceiver(t, func(int, http.ResponseWriter, *http.Request) {})
	_, port, _ := strings.Cut(strings.TrimPrefix(rc.URL, "http://"), ":")
	hookID, _ := s.webhook(rc.URL, nil) // the api allows private networks; the worker does not
	_, err := s.Pool.Exec(context.Background(), `UPDATE webhooks SET url = $2 WHERE id = $1`, hookID, fmt.Sprintf("http://localhost:%s/hook", port))
	require.NoError(t, err)
	id := s.deliveryOf(s.publish("order.created", map[string]any{}))
	s.waitStatus(id, "exhausted", 15*time.Second)
	require.Empty(t, rc.requests())
	at := s.attempts(id)
	require.Len(t, at, 1)
	require.Equal(t, "ssrf_blocked", *at[0].Category)
}

// Postgres unreachable from the worker for a few seconds while deliveries
// flow: every delivery still succeeds, each with one attempt (the outage
// is not charged to any endpoint).
func TestPostgresOutageChargesNoAttempt(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	rc := newReceiver(t, func(int, http.ResponseWriter, *http.Request) {})
	s.webhook(rc.URL, nil)
	var ids []string
	for i := range 10 {
		ids = append(ids, s.publish("tick", map[string]any{"i": i}))
	}
	before := testutil.ToFloat64(metrics.WorkerInternalErrors.WithLabelValues("load"))
	s.PGTap.Cut()
	for i := range 20 {
		ids = append(ids, s.publish("tick", map[string]any{"i": 10 + i}))
	}
	// Keep Postgres away until the worker has put back deliveries because
	// of it (this test is the only one cutting Postgres).
	testwait.Eventually(t, 30*time.Second, func() bool {
		return testutil.ToFloat64(metrics.WorkerInternalErrors.WithLabelValues("load")) >= before+10
	}, "the worker felt the outage")
	s.PGTap.Restore()
	for i := range 10 {
		ids = append(ids, s.publish("tick", map[string]any{"i": 30 + i}))
	}
	testwait.Eventually(t, 60*time.Second, func() bool {
		return s.Count(`SELECT count(*) FROM deliveries WHERE status = 'succeeded'`) == len(ids)
	}, "all %d deliveries succeeded", len(ids))
	require.Equal(t, 0, s.Count(`SELECT count(*) FROM deliveries WHERE attempt_count <> 1`), "no delivery was charged for the outage")
	require.Equal(t, len(ids), s.Count(`SELECT count(*) FROM delivery_attempts`))
	require.Equal(t, 0, s.Count(`SELECT count(*) FROM delivery_attempts WHERE status_code IS DISTINCT FROM 200`))
}

// A binary or non-UTF-8 answer is still recorded (sanitised), not retried
// for ever because Postgres refuses the text.
func TestBinaryResponseIsRecorded(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	rc := newReceiver(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("X-Raw", "caf\xe9")
		_, _ = w.Write([]byte("\x00\x01binary\xff\x00"))
	})
	s.webhook(rc.URL, nil)
	id := s.deliveryOf(s.publish("order.created", map[string]any{}))
	s.waitStatus(id, "succeeded", 15*time.Second)
	at := s.attempts(id)
	require.Len(t, at, 1)
	require.Equal(t, "\x01binary\uFFFD", at[0].Sample)
	require.Len(t, rc.requests(), 1)
}
