package delivery

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
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

// BenchmarkDeliveryTracing is the tracing work of one delivery, done as the
// api and the worker do it: the publish span and the trace context stored
// from it, the attempt span continued from that context, the guard's
// decision, the client span with its attributes and the traceparent for
// the endpoint, the outcome. Off, and on with 100 % and 1 % of traces
// sampled, spans batched and exported over OTLP/HTTP to a local receiver
// that reads and discards them. cpu-ns/op is the process's CPU time per
// delivery (the exporting goroutines included), from getrusage.
func BenchmarkDeliveryTracing(b *testing.B) {
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
	}))
	defer sink.Close()
	for _, c := range []struct {
		name  string
		ratio float64
	}{{"off", 0}, {"on-100pct", 1}, {"on-1pct", 0.01}} {
		b.Run(c.name, func(b *testing.B) {
			tracer := benchTracer(b, sink.URL, c.ratio)
			w, s := &Worker{tracer: tracer}, &Sender{tracer: tracer}
			req := httptest.NewRequest(http.MethodPost, "https://hooks.example.com/in?token=x", nil)
			req.Header.Set("User-Agent", UserAgent)
			t := wire.Task{DeliveryID: uuid.New(), EventID: uuid.New(), WebhookID: uuid.New(), TenantID: uuid.New(), Attempt: 1}
			rec := attemptRecord{Status: wire.Succeeded, Response: Response{StatusCode: 200, proto: "HTTP/1.1"}}
			b.ReportAllocs()
			start := cpuTime()
			for b.Loop() {
				parent := benchPublish(tracer, t)
				ctx, span := w.startAttempt(context.Background(), t, job{Trace: parent, EventType: "order.created"})
				traceAdmission(span, admission{allowed: true, state: "closed"})
				ctx, client := s.tracer.Start(ctx, http.MethodPost, trace.SpanKindClient)
				if s.tracer.On() {
					tracing.ParentOf(ctx).SetHeader(req.Header)
				}
				if client.IsRecording() {
					describeRequest(client, req, 1024, rec.Response)
				}
				client.End()
				traceOutcome(span, rec, retry.Decision{Succeeded: true})
				span.End()
			}
			b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op")
		})
	}
}

// benchTracer traces with ratio of new traces sampled (0: off), exporting
// every span (the batch processor blocks rather than drops) to url.
func benchTracer(b *testing.B, url string, ratio float64) tracing.Tracer {
	b.Helper()
	if ratio == 0 {
		return tracing.Tracer{}
	}
	exp, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(url+"/v1/traces"))
	require.NoError(b, err)
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp, sdktrace.WithBlocking()),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio))))
	b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tracing.NewTracer(tp)
}

// benchPublish is the api's part: the publish span, with its attributes
// and events, and the trace context the event stores.
func benchPublish(tracer tracing.Tracer, t wire.Task) tracing.Parent {
	ctx, span := tracer.Start(context.Background(), "hookline.publish", trace.SpanKindProducer)
	defer span.End()
	span.AddEvent("validated")
	span.AddEvent("committed")
	span.AddEvent("enqueued")
	if span.IsRecording() {
		span.SetAttributes(tracing.TenantID.String(t.TenantID.String()), tracing.EventType.String("order.created"),
			tracing.EventID.String(t.EventID.String()), attribute.Int("hookline.deliveries", 1),
			attribute.Bool("hookline.idempotent_replay", false))
	}
	if !tracer.On() {
		return tracing.Parent{}
	}
	return tracing.ParentOf(ctx)
}

// cpuTime is the process's user and system CPU time so far, in ns.
func cpuTime() int64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}
