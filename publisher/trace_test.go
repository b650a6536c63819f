package publisher_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/hookline/hookline/internal/db"
	"github.com/hookline/hookline/internal/queue/queuetest"
	"github.com/hookline/hookline/publisher"
)

// With a TracerProvider, a publish is a span of the trace of the span in
// its context, and the event stores that trace for its deliveries.
func TestPublishContinuesTheCallersTrace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer func() { _ = tp.Shutdown(ctx) }()
	p, err := publisher.Open(ctx, publisher.Config{DatabaseURL: databaseURL, AMQPURL: queuetest.URL(), AMQPPrefix: amqpPrefix,
		TracerProvider: tp})
	require.NoError(t, err)
	defer func() { require.NoError(t, p.Close()) }()

	caller, span := tp.Tracer("producer").Start(ctx, "checkout")
	res, err := p.PublishEvent(caller, publisher.Event{TenantID: tenantID, EventType: "trace.checked", Data: map[string]any{}})
	require.NoError(t, err)
	span.End()

	spans := exp.GetSpans()
	require.Len(t, spans, 2)
	pub := spans[0]
	require.Equal(t, "hookline.publish", pub.Name)
	require.Equal(t, span.SpanContext().TraceID(), pub.SpanContext.TraceID())
	require.Equal(t, span.SpanContext().SpanID(), pub.Parent.SpanID())

	pool, err := db.Open(ctx, databaseURL, 1)
	require.NoError(t, err)
	defer pool.Close()
	var stored string
	require.NoError(t, pool.QueryRow(ctx, `SELECT traceparent FROM events WHERE id = $1`, res.ID).Scan(&stored))
	require.Equal(t, "00-"+pub.SpanContext.TraceID().String()+"-"+pub.SpanContext.SpanID().String()+"-01", stored)
}
