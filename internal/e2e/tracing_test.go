package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/hookline/hookline/internal/systemtest"
	"github.com/hookline/hookline/internal/testwait"
	"github.com/hookline/hookline/internal/tracing"
)

// producerTrace is the trace a producer publishes in, and producerSpan its
// span that publishes.
const (
	producerTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	producerSpan  = "00f067aa0ba902b7"
)

// tracedSystem is a system whose api, worker and dlq parts trace into an
// in-memory exporter.
func tracedSystem(t *testing.T) (*system, *tracetest.InMemoryExporter) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return newSystem(t, func(o *systemtest.Options) { o.Tracer = tracing.NewTracer(tp) }), exp
}

// publishTraced publishes an event with the producer's traceparent and
// returns its id.
func (s *system) publishTraced(eventType string) string {
	s.t.Helper()
	req, err := http.NewRequest("POST", s.URL+"/v1/events", strings.NewReader(fmt.Sprintf(`{"event_type": %q, "data": {}}`, eventType)))
	require.NoError(s.t, err)
	req.Header.Set("Authorization", "Bearer "+s.key)
	req.Header.Set("traceparent", "00-"+producerTrace+"-"+producerSpan+"-01")
	req.Header.Set("tracestate", "producer=1")
	res, err := http.DefaultClient.Do(req)
	require.NoError(s.t, err)
	defer res.Body.Close()
	require.Equal(s.t, http.StatusAccepted, res.StatusCode)
	var id string
	require.NoError(s.t, s.Pool.QueryRow(context.Background(),
		`SELECT id::text FROM events WHERE tenant_id = $1 ORDER BY id DESC LIMIT 1`, s.tenantID).Scan(&id))
	return id
}

// spansNamed waits until exp holds n spans named name in trace, and
// returns them in the order they ended.
func spansNamed(t *testing.T, exp *tracetest.InMemoryExporter, traceID, name string, n int) []tracetest.SpanStub {
	t.Helper()
	var out []tracetest.SpanStub
	testwait.Eventually(t, 10*time.Second, func() bool {
		out = out[:0]
		for _, s := range exp.GetSpans() {
			if s.Name == name && s.SpanContext.TraceID().String() == traceID {
				out = append(out, s)
			}
		}
		return len(out) >= n
	}, "%d %s spans in trace %s", n, name, traceID)
	require.Len(t, out, n, "%s spans", name)
	return out
}

func attr(s tracetest.SpanStub, key string) string {
	for _, a := range s.Attributes {
		if string(a.Key) == key {
			return a.Value.String()
		}
	}
	return ""
}

func eventNames(s tracetest.SpanStub) []string {
	var out []string
	for _, e := range s.Events {
		out = append(out, e.Name)
	}
	return out
}

// One publish carrying the producer's traceparent is one trace: the publish
// a child of the producer's span, each attempt (the failed first one and
// its retry) a child of the publish, each HTTP request a client span of its
// attempt, whose traceparent the endpoint receives. A webhook that turned
// trace propagation off gets no traceparent, its attempt still traced.
func TestOneTraceFromPublishToEveryAttempt(t *testing.T) {
	t.Parallel()
	s, exp := tracedSystem(t)
	flaky := newReceiver(t, func(n int, w http.ResponseWriter, _ *http.Request) {
		if n == 0 {
			w.WriteHeader(http.StatusInternalServerError)
		}
	})
	quiet := newReceiver(t, func(int, http.ResponseWriter, *http.Request) {})
	flakyHook, _ := s.webhook(flaky.URL, map[string]any{"retry_config": map[string]any{"base_delay_ms": 100}})
	quietHook, _ := s.webhook(quiet.URL, map[string]any{"trace_propagation": false})

	event := s.publishTraced("order.created")
	var flakyDelivery, quietDelivery uuid.UUID
	require.NoError(t, s.Pool.QueryRow(context.Background(), `SELECT id FROM deliveries WHERE event_id = $1 AND webhook_id = $2`,
		event, flakyHook).Scan(&flakyDelivery))
	require.NoError(t, s.Pool.QueryRow(context.Background(), `SELECT id FROM deliveries WHERE event_id = $1 AND webhook_id = $2`,
		event, quietHook).Scan(&quietDelivery))
	s.waitStatus(flakyDelivery, "succeeded", 20*time.Second)
	s.waitStatus(quietDelivery, "succeeded", 20*time.Second)

	pub := spansNamed(t, exp, producerTrace, "hookline.publish", 1)[0]
	require.Equal(t, producerSpan, pub.Parent.SpanID().String())
	require.Equal(t, event, attr(pub, "hookline.event_id"))
	require.Equal(t, s.tenantID.String(), attr(pub, "hookline.tenant_id"))

	attempts := spansNamed(t, exp, producerTrace, "hookline.attempt", 3)
	clients := spansNamed(t, exp, producerTrace, "POST", 3)
	byDelivery := map[string][]tracetest.SpanStub{}
	for _, a := range attempts {
		require.Equal(t, pub.SpanContext.SpanID(), a.Parent.SpanID(), "every attempt is a child of the publish")
		require.Equal(t, trace.SpanKindConsumer, a.SpanKind)
		require.Contains(t, eventNames(a), "guard")
		byDelivery[attr(a, "hookline.delivery_id")] = append(byDelivery[attr(a, "hookline.delivery_id")], a)
	}
	flakyAttempts := byDelivery[flakyDelivery.String()]
	require.Len(t, flakyAttempts, 2)
	first, retry := flakyAttempts[0], flakyAttempts[1]
	require.Equal(t, "1", attr(first, "hookline.attempt"))
	require.Equal(t, "retrying", attr(first, "hookline.outcome"))
	require.Equal(t, "server_error", attr(first, "hookline.failure_category"))
	require.Contains(t, eventNames(first), "retry_scheduled")
	require.Equal(t, "2", attr(retry, "hookline.attempt"))
	require.Equal(t, "succeeded", attr(retry, "hookline.outcome"))
	require.Equal(t, flakyHook, attr(retry, "hookline.webhook_id"))
	require.Len(t, byDelivery[quietDelivery.String()], 1)

	parentOf := map[trace.SpanID]trace.SpanID{}
	for _, c := range clients {
		require.Equal(t, trace.SpanKindClient, c.SpanKind)
		parentOf[c.SpanContext.SpanID()] = c.Parent.SpanID()
	}
	for i, req := range flaky.requests() {
		tp := tracing.Parent{TraceParent: req.Header.Get("traceparent"), TraceState: req.Header.Get("tracestate")}
		sc := tp.SpanContext()
		require.True(t, sc.IsValid(), "request %d carries a traceparent", i)
		require.Equal(t, producerTrace, sc.TraceID().String(), "request %d continues the producer's trace", i)
		require.Equal(t, flakyAttempts[i].SpanContext.SpanID(), parentOf[sc.SpanID()], "request %d names its client span", i)
		require.Equal(t, "producer=1", tp.TraceState)
	}
	require.Len(t, quiet.requests(), 1)
	require.Empty(t, quiet.requests()[0].Header.Get("traceparent"), "trace_propagation false")
}

// An exhausted delivery's dead letter is recorded in its attempt's trace;
// a batch retry links to the original trace, and the retried delivery's
// attempt continues it.
func TestDeadLetterAndBatchRetryStayInTheEventsTrace(t *testing.T) {
	t.Parallel()
	s, exp := tracedSystem(t)
	var healthy atomic.Bool
	rc := newReceiver(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
		if !healthy.Load() {
			w.WriteHeader(http.StatusInternalServerError)
		}
	})
	hook := s.fastHook(rc.URL, nil)
	event := s.publishTraced("order.created")
	orig := s.deliveryOf(event)
	s.waitStatus(orig, "exhausted", 15*time.Second)

	attempt := spansNamed(t, exp, producerTrace, "hookline.attempt", 1)[0]
	require.Equal(t, "exhausted", attr(attempt, "hookline.outcome"))
	dead := spansNamed(t, exp, producerTrace, "hookline.dead_letter", 1)[0]
	require.Equal(t, attempt.SpanContext.SpanID(), dead.Parent.SpanID(), "recorded as a child of the attempt that exhausted it")
	require.Equal(t, orig.String(), attr(dead, "hookline.delivery_id"))

	healthy.Store(true)
	batch := s.startBatch(map[string]any{"webhook_ids": []string{hook}}, 100)
	testwait.Eventually(t, 20*time.Second, func() bool { return s.batch(batch).State == "completed" }, "the batch to complete")
	pub := spansNamed(t, exp, producerTrace, "hookline.publish", 1)[0]
	var chunk tracetest.SpanStub
	testwait.Eventually(t, 10*time.Second, func() bool {
		for _, sp := range exp.GetSpans() {
			if sp.Name == "hookline.batch_retry" && attr(sp, "hookline.deliveries") == "1" {
				chunk = sp
				return true
			}
		}
		return false
	}, "the batch chunk's span")
	require.Equal(t, batch, attr(chunk, "hookline.batch_operation_id"))
	require.Len(t, chunk.Links, 1)
	require.Equal(t, pub.SpanContext.SpanID(), chunk.Links[0].SpanContext.SpanID(), "linked to the original publish")
	attempts := spansNamed(t, exp, producerTrace, "hookline.attempt", 2)
	require.Equal(t, "succeeded", attr(attempts[1], "hookline.outcome"))
	require.NotEqual(t, orig.String(), attr(attempts[1], "hookline.delivery_id"), "the retry's own delivery")
	require.Equal(t, pub.SpanContext.SpanID(), attempts[1].Parent.SpanID())
}

// With tracing off, a publish's traceparent is neither stored nor passed
// on to the endpoint.
func TestTracingOffPassesNothingOn(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	rc := newReceiver(t, func(int, http.ResponseWriter, *http.Request) {})
	s.webhook(rc.URL, nil)
	event := s.publishTraced("order.created")
	s.waitStatus(s.deliveryOf(event), "succeeded", 15*time.Second)
	require.Empty(t, rc.requests()[0].Header.Get("traceparent"))
	require.Zero(t, s.Count(`SELECT count(*) FROM events WHERE traceparent IS NOT NULL OR tracestate IS NOT NULL`))
}

// A recovery's chunks are spans linked to the publishes of the events
// they deliver, and each delivery it makes is attempted in its event's
// trace: here an event published before its webhook existed.
func TestRecoveryStaysInTheEventsTrace(t *testing.T) {
	t.Parallel()
	s, exp := tracedSystem(t)
	from := time.Now().Add(-time.Second).UTC()
	// The webhook exists but is paused when the event is published: the
	// event is one it missed.
	rc := newReceiver(t, func(int, http.ResponseWriter, *http.Request) {})
	hook := s.fastHook(rc.URL, map[string]any{"events": []string{"order.*"}, "active": false})
	event := s.publishTraced("order.created")
	s.call("PATCH", "/v1/webhooks/"+hook, s.key, map[string]any{"active": true}, http.StatusOK, nil)

	var started map[string]any
	s.call("POST", "/v1/webhooks/"+hook+"/recover", s.key, map[string]any{"from": from, "include": []string{"missed"},
		"rate_limit": map[string]any{"requests_per_second": 20}}, http.StatusAccepted, &started)
	batch := started["batch_operation_id"].(string)
	testwait.Eventually(t, 30*time.Second, func() bool { return s.batchOp(batch)["state"] == "completed" }, "the recovery to complete")

	pub := spansNamed(t, exp, producerTrace, "hookline.publish", 1)[0]
	require.Equal(t, event, attr(pub, "hookline.event_id"))
	attempt := spansNamed(t, exp, producerTrace, "hookline.attempt", 1)[0]
	require.Equal(t, pub.SpanContext.SpanID(), attempt.Parent.SpanID(), "the recovered delivery continues its event's trace")
	require.Equal(t, hook, attr(attempt, "hookline.webhook_id"))
	var chunk tracetest.SpanStub
	testwait.Eventually(t, 10*time.Second, func() bool {
		for _, sp := range exp.GetSpans() {
			if sp.Name == "hookline.recovery" && len(sp.Links) > 0 {
				chunk = sp
				return true
			}
		}
		return false
	}, "the recovery chunk's span")
	require.Equal(t, batch, attr(chunk, "hookline.batch_operation_id"))
	require.Equal(t, hook, attr(chunk, "hookline.webhook_id"))
	require.Equal(t, pub.SpanContext.SpanID(), chunk.Links[0].SpanContext.SpanID(), "linked to the event's publish")
}
