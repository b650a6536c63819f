package process_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/hookline/hookline/internal/db/dbtest"
	"github.com/hookline/hookline/internal/queue/queuetest"
	"github.com/hookline/hookline/internal/tracing"
	"github.com/hookline/hookline/internal/tracing/otlptest"
)

// The producer's trace and the span that publishes in it.
const (
	producerTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	producerSpan  = "00f067aa0ba902b7"
)

// flakyEndpoint fails its first request and accepts the others, keeping
// the trace context each one carried.
type flakyEndpoint struct {
	*httptest.Server
	mu      sync.Mutex
	parents []tracing.Parent
}

func newFlakyEndpoint(t *testing.T) *flakyEndpoint {
	e := &flakyEndpoint{}
	e.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.mu.Lock()
		e.parents = append(e.parents, tracing.ParentFromHeader(r.Header))
		n := len(e.parents)
		e.mu.Unlock()
		if n == 1 {
			w.WriteHeader(http.StatusInternalServerError)
		}
	}))
	t.Cleanup(e.Close)
	return e
}

func (e *flakyEndpoint) received() []tracing.Parent {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]tracing.Parent(nil), e.parents...)
}

// tracedPair starts an api and a worker with env, registers a webhook to
// url retried after 100 ms, publishes one event with the producer's
// traceparent, and returns the worker.
func tracedPair(t *testing.T, url string, env ...string) *proc {
	t.Helper()
	dbURL := dbtest.NewURL(t, false)
	topo := queuetest.NewTopology(t)
	env = append([]string{"DATABASE_URL=" + dbURL, "AMQP_PREFIX=" + topo.Prefix, "ALLOW_PRIVATE_NETWORKS=true"}, env...)
	apiAddr, workerAddr := freeAddr(t), freeAddr(t)
	api := start(t, "api", append(env, "API_ADDR="+apiAddr)...)
	waitReady(t, api, "http://"+apiAddr+"/readyz")
	worker := start(t, "worker", append(env, "METRICS_ADDR="+workerAddr)...)
	waitReady(t, worker, "http://"+workerAddr+"/readyz")

	base := "http://" + apiAddr
	key := postJSON(t, base+"/v1/tenants", "process-test-token", `{"name": "traced"}`, http.StatusCreated)["api_key"].(string)
	postJSON(t, base+"/v1/webhooks", key, fmt.Sprintf(`{"url": %q, "events": ["*"], "retry_config": {"base_delay_ms": 100}}`, url),
		http.StatusCreated)
	req, err := http.NewRequest("POST", base+"/v1/events", strings.NewReader(`{"event_type": "order.created", "data": {"n": 1}}`))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("traceparent", "00-"+producerTrace+"-"+producerSpan+"-01")
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusAccepted, res.StatusCode)
	return worker
}

// Two processes, one trace: the api and a worker export to an OTLP/HTTP
// receiver. The api's publish is a child of the producer's span; the
// worker's attempts (the failed first one and its retry) are children of
// the publish, each HTTP request a client span of its attempt whose
// traceparent the endpoint receives; the worker's log line about the
// failed attempt names the trace.
func TestOneTraceAcrossTheAPIAndAWorker(t *testing.T) {
	t.Parallel()
	rcv := otlptest.New(true)
	collector := httptest.NewServer(rcv)
	defer collector.Close()
	endpoint := newFlakyEndpoint(t)
	worker := tracedPair(t, endpoint.URL, "OTEL_EXPORTER_OTLP_ENDPOINT="+collector.URL, "OTEL_BSP_SCHEDULE_DELAY=100")

	named := func(name string) []otlptest.Span {
		var out []otlptest.Span
		for _, s := range rcv.Spans() {
			if s.Name == name && s.TraceID == producerTrace {
				out = append(out, s)
			}
		}
		return out
	}
	waitFor(t, 30*time.Second, worker, func() bool {
		return len(named("hookline.publish")) == 1 && len(named("hookline.attempt")) == 2 && len(named("POST")) == 2
	}, "the publish, two attempts and their requests exported")

	pub := named("hookline.publish")[0]
	require.Equal(t, "hookline-api", pub.Service)
	require.Equal(t, producerSpan, pub.ParentSpanID)
	require.Equal(t, tracepb.Span_SPAN_KIND_PRODUCER, pub.Kind)
	require.Equal(t, []string{"validated", "committed", "enqueued"}, pub.Events)

	attempts := named("hookline.attempt")
	byNumber := map[string]otlptest.Span{}
	for _, a := range attempts {
		require.Equal(t, "hookline-worker", a.Service)
		require.Equal(t, pub.SpanID, a.ParentSpanID, "an attempt is a child of the publish")
		require.Equal(t, pub.Attributes["hookline.event_id"], a.Attributes["hookline.event_id"])
		byNumber[a.Attributes["hookline.attempt"]] = a
	}
	require.Equal(t, "retrying", byNumber["1"].Attributes["hookline.outcome"])
	require.True(t, byNumber["1"].StatusError)
	require.NotEmpty(t, byNumber["1"].EventAttributes["retry_scheduled"]["hookline.next_attempt_at"])
	require.Equal(t, "succeeded", byNumber["2"].Attributes["hookline.outcome"])

	clients := map[string]otlptest.Span{}
	for _, c := range named("POST") {
		require.Equal(t, tracepb.Span_SPAN_KIND_CLIENT, c.Kind)
		require.Equal(t, "POST", c.Attributes["http.request.method"])
		require.Equal(t, endpoint.URL, c.Attributes["url.full"])
		clients[c.SpanID] = c
	}
	got := endpoint.received()
	require.Len(t, got, 2)
	for i, p := range got {
		sc := p.SpanContext()
		require.Equal(t, producerTrace, sc.TraceID().String(), "request %d", i+1)
		client, ok := clients[sc.SpanID().String()]
		require.True(t, ok, "request %d names an exported client span", i+1)
		require.Equal(t, byNumber[fmt.Sprint(i+1)].SpanID, client.ParentSpanID, "request %d is a child of attempt %d", i+1, i+1)
	}
	require.Contains(t, worker.out.String(), "trace_id="+producerTrace+" span_id="+byNumber["1"].SpanID,
		"the failed attempt's log line joins its trace")
}

// With tracing off (OTEL_SDK_DISABLED, though an endpoint is named) the
// processes export nothing and the endpoint receives no traceparent.
func TestNothingIsExportedWithTracingOff(t *testing.T) {
	t.Parallel()
	rcv := otlptest.New(false)
	collector := httptest.NewServer(rcv)
	defer collector.Close()
	endpoint := newFlakyEndpoint(t)
	worker := tracedPair(t, endpoint.URL, "OTEL_EXPORTER_OTLP_ENDPOINT="+collector.URL, "OTEL_BSP_SCHEDULE_DELAY=100",
		"OTEL_SDK_DISABLED=true")
	waitFor(t, 30*time.Second, worker, func() bool { return len(endpoint.received()) == 2 }, "the attempt and its retry")
	stopWithSIGTERM(t, worker) // a process with tracing on would flush its spans here
	require.Equal(t, []tracing.Parent{{}, {}}, endpoint.received())
	require.Zero(t, rcv.Count())
}
