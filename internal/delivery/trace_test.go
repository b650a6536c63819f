package delivery

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/hookline/hookline/internal/netguard"
	"github.com/hookline/hookline/internal/retry"
	"github.com/hookline/hookline/internal/tracing"
	"github.com/hookline/hookline/internal/wire"
)

// With tracing on, a request is a client span, a child of the attempt,
// with the standard HTTP attributes (the URL without its query); the
// endpoint receives the client span's traceparent unless the webhook
// leaves it out. With tracing off nothing is sent or recorded.
func TestSenderTracesTheRequest(t *testing.T) {
	t.Parallel()
	got := make(chan http.Header, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Clone()
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	tracer := tracing.NewTracer(tp)
	cfg := SenderConfig{ConnectTimeout: time.Second, MaxConnsPerHost: 5, UserAgent: UserAgent, Tracer: tracer}
	traced := NewSender(cfg, netguard.Policy{AllowPrivate: true})
	cfg.Tracer = tracing.Tracer{}
	untraced := NewSender(cfg, netguard.Policy{AllowPrivate: true})

	send := func(s *Sender, propagate bool) http.Header {
		ctx, attempt := tracer.Start(context.Background(), "hookline.attempt", trace.SpanKindConsumer)
		defer attempt.End()
		_, err := s.Send(ctx, Request{URL: srv.URL + "/in?token=secret", Body: []byte(`{"a":1}`), Header: http.Header{},
			Timeout: 2 * time.Second, Propagate: propagate})
		require.NoError(t, err)
		return <-got
	}

	h := send(traced, true)
	spans := exp.GetSpans()
	require.Len(t, spans, 2)
	client, attempt := spans[0], spans[1]
	require.Equal(t, "POST", client.Name)
	require.Equal(t, trace.SpanKindClient, client.SpanKind)
	require.Equal(t, attempt.SpanContext.SpanID(), client.Parent.SpanID())
	require.Equal(t, "00-"+client.SpanContext.TraceID().String()+"-"+client.SpanContext.SpanID().String()+"-01", h.Get("traceparent"))
	attrs := map[string]string{}
	for _, a := range client.Attributes {
		attrs[string(a.Key)] = a.Value.String()
	}
	require.Equal(t, "POST", attrs["http.request.method"])
	require.Equal(t, srv.URL+"/in", attrs["url.full"], "no query: it may hold credentials")
	require.Equal(t, "127.0.0.1", attrs["server.address"])
	require.Equal(t, srv.URL[len("http://127.0.0.1:"):], attrs["server.port"])
	require.Equal(t, "503", attrs["http.response.status_code"])
	require.Equal(t, "503", attrs["error.type"])
	require.Equal(t, "1.1", attrs["network.protocol.version"])
	require.Equal(t, strconv.Itoa(len(`{"a":1}`)), attrs["http.request.body.size"])
	require.Equal(t, codes.Error, client.Status.Code)

	require.Empty(t, send(traced, false).Get("traceparent"), "the webhook leaves the trace context out")
	require.Len(t, exp.GetSpans(), 4, "still traced")

	exp.Reset()
	h = send(untraced, true)
	require.Empty(t, h.Get("traceparent"))
	require.Len(t, exp.GetSpans(), 1, "only the test's own span")
}

// With tracing off, the worker's tracing on the attempt path (the span,
// the guard's decision, the outcome, the trace context of a dead letter)
// allocates nothing.
func TestTracingOffAllocatesNothing(t *testing.T) {
	w := &Worker{}
	ctx := context.Background()
	next := time.Now()
	rec := attemptRecord{Status: "retrying", NextAttemptAt: &next}
	allocs := testing.AllocsPerRun(1000, func() {
		ctx, span := w.startAttempt(ctx, wire.Task{Attempt: 1}, job{Trace: tracing.Parent{TraceParent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}})
		traceAdmission(span, admission{allowed: true, state: "closed"})
		tracePostponed(span, "rate_limited", next)
		traceOutcome(span, rec, retry.Decision{Retry: true, Delay: time.Second})
		_ = tracing.ParentOf(ctx)
		ctx, client := w.tracer.Start(ctx, http.MethodPost, trace.SpanKindClient)
		_ = ctx
		client.End()
		span.End()
	})
	require.Zero(t, allocs)
}
