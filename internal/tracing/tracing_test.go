package tracing_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"

	"github.com/hookline/hookline/internal/config"
	"github.com/hookline/hookline/internal/tracing"
	"github.com/hookline/hookline/internal/tracing/otlptest"
)

const parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

// Off (the default), the provider holds nothing: its Tracer starts no
// span, changes no context and allocates nothing.
func TestTracingOffCostsNothing(t *testing.T) {
	p, err := tracing.Setup(context.Background(), config.Default().Tracing, "api", slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	require.False(t, p.On())
	tr := p.Tracer()
	require.False(t, tr.On())
	ctx := context.Background()
	allocs := testing.AllocsPerRun(1000, func() {
		got, span := tr.Start(ctx, "x", trace.SpanKindInternal)
		if got != ctx || span.IsRecording() || span.SpanContext().IsValid() {
			t.Fatal("the zero Tracer started a span")
		}
		span.End()
	})
	require.Zero(t, allocs)
	require.NoError(t, p.Shutdown(context.Background()))
}

// On, spans are exported over OTLP/HTTP to the configured endpoint with the
// process's service name, and follow the configured sampler.
func TestSetupExportsToTheEndpoint(t *testing.T) {
	t.Parallel()
	rcv := otlptest.New(true)
	srv := httptest.NewServer(rcv)
	defer srv.Close()
	export := func(sampler string) {
		cfg := config.Default().Tracing
		cfg.Enabled, cfg.Endpoint, cfg.Sampler = true, srv.URL, sampler
		p, err := tracing.Setup(context.Background(), cfg, "worker", slog.New(slog.DiscardHandler))
		require.NoError(t, err)
		ctx := tracing.Parent{TraceParent: parent}.Context(context.Background())
		_, span := p.Tracer().Start(ctx, "hookline.attempt", trace.SpanKindConsumer)
		span.End()
		require.NoError(t, p.Shutdown(context.Background()), "flushes")
	}
	export("parentbased_always_on")
	spans := rcv.Spans()
	require.Len(t, spans, 1)
	require.Equal(t, "hookline-worker", spans[0].Service)
	require.Equal(t, "0af7651916cd43dd8448eb211c80319c", spans[0].TraceID)
	require.Equal(t, "b7ad6b7169203331", spans[0].ParentSpanID)
	require.Equal(t, "hookline.attempt", spans[0].Name)

	export("always_off")
	require.Len(t, rcv.Spans(), 1, "nothing sampled, nothing exported")
}

// A trace context goes into a context and back out unchanged; a malformed
// one is ignored, and an oversized tracestate is dropped whole.
func TestParentRoundTrip(t *testing.T) {
	t.Parallel()
	p := tracing.Parent{TraceParent: parent, TraceState: "a=1,b=2"}
	require.Equal(t, p, tracing.ParentOf(p.Context(context.Background())))
	require.True(t, p.SpanContext().IsRemote())

	bad := tracing.Parent{TraceParent: "00-nothex-b7ad6b7169203331-01"}
	ctx := context.Background()
	require.Equal(t, ctx, bad.Context(ctx), "ignored")
	require.False(t, bad.SpanContext().IsValid())
	require.Equal(t, tracing.Parent{}, tracing.ParentOf(bad.Context(ctx)))
	require.Equal(t, tracing.Parent{}, tracing.ParentOf(ctx))

	long := tracing.Parent{TraceParent: parent, TraceState: "a=" + strings.Repeat("x", 250) + ",b=" + strings.Repeat("y", 250) + ",c=" + strings.Repeat("z", 250)}
	require.Equal(t, tracing.Parent{TraceParent: parent}, tracing.ParentOf(long.Context(ctx)))
}

// Lines logged with a traced context carry trace_id and span_id; others,
// and lines logged without a context, do not.
func TestLogHandlerJoinsLogsAndTraces(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log := slog.New(tracing.LogHandler(slog.NewTextHandler(&buf, nil))).With("process", "worker")
	log.InfoContext(tracing.Parent{TraceParent: parent}.Context(context.Background()), "traced")
	log.InfoContext(context.Background(), "untraced")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.Len(t, lines, 2)
	require.Contains(t, lines[0], "process=worker")
	require.Contains(t, lines[0], "trace_id=0af7651916cd43dd8448eb211c80319c span_id=b7ad6b7169203331")
	require.NotContains(t, lines[1], "trace_id")
}
