package event_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/hookline/hookline/internal/db/dbtest"
	"github.com/hookline/hookline/internal/event"
	"github.com/hookline/hookline/internal/tracing"
)

// producer is the trace context a producer sends with its publish.
const producer = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

// tracedService runs a Service on a fresh database with one tenant,
// tracing into an in-memory exporter when tracer is true.
func tracedService(t *testing.T, traced bool) (*event.Service, *pgxpool.Pool, *tracetest.InMemoryExporter, uuid.UUID) {
	t.Helper()
	pool := dbtest.New(t)
	exp := tracetest.NewInMemoryExporter()
	svc := event.NewService(pool, nil, "", discard{}, slog.New(slog.DiscardHandler))
	if traced {
		tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
		t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
		svc.WithTracer(tracing.NewTracer(tp))
	}
	runService(t, svc)
	tenant := addTenant(t, pool, "t")
	return svc, pool, exp, tenant
}

func storedParent(t *testing.T, pool *pgxpool.Pool, id uuid.UUID) (*string, *string) {
	t.Helper()
	var parent, state *string
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT traceparent, tracestate FROM events WHERE id = $1`, id).Scan(&parent, &state))
	return parent, state
}

// A publish carrying the producer's trace context is a span of that trace,
// a child of the producer's span, and the event stores the publish span's
// context (tracestate included) for its deliveries to continue.
func TestPublishContinuesTheProducersTrace(t *testing.T) {
	t.Parallel()
	svc, pool, exp, tenant := tracedService(t, true)
	ctx := tracing.Parent{TraceParent: producer, TraceState: "vendor=abc"}.Context(context.Background())
	res, err := svc.Publish(ctx, tenant, event.Request{EventType: "order.created", Data: json.RawMessage(`{"n":1}`)})
	require.NoError(t, err)

	spans := exp.GetSpans()
	require.Len(t, spans, 1)
	pub := spans[0]
	require.Equal(t, "hookline.publish", pub.Name)
	require.Equal(t, trace.SpanKindProducer, pub.SpanKind)
	require.Equal(t, "0af7651916cd43dd8448eb211c80319c", pub.SpanContext.TraceID().String())
	require.Equal(t, "b7ad6b7169203331", pub.Parent.SpanID().String())
	require.True(t, pub.Parent.IsRemote())
	attrs := map[string]string{}
	for _, a := range pub.Attributes {
		attrs[string(a.Key)] = a.Value.String()
	}
	require.Equal(t, tenant.String(), attrs["hookline.tenant_id"])
	require.Equal(t, res.ID.String(), attrs["hookline.event_id"])
	require.Equal(t, "order.created", attrs["hookline.event_type"])
	var events []string
	for _, e := range pub.Events {
		events = append(events, e.Name)
	}
	require.Equal(t, []string{"validated", "committed", "enqueued"}, events)

	parent, state := storedParent(t, pool, res.ID)
	require.NotNil(t, parent)
	require.Equal(t, "00-0af7651916cd43dd8448eb211c80319c-"+pub.SpanContext.SpanID().String()+"-01", *parent)
	require.Equal(t, "vendor=abc", *state)

	// Without a trace context the publish starts a trace of its own.
	res, err = svc.Publish(context.Background(), tenant, event.Request{EventType: "order.created", Data: json.RawMessage(`{"n":2}`)})
	require.NoError(t, err)
	root := exp.GetSpans()[1]
	require.False(t, root.Parent.IsValid())
	parent, state = storedParent(t, pool, res.ID)
	require.Equal(t, tracing.ParentOf(trace.ContextWithSpanContext(context.Background(), root.SpanContext)).TraceParent, *parent)
	require.Nil(t, state)
}

// With tracing off, nothing is recorded or stored, whatever the caller's
// context holds.
func TestPublishWithTracingOffStoresNoTrace(t *testing.T) {
	t.Parallel()
	svc, pool, exp, tenant := tracedService(t, false)
	ctx := tracing.Parent{TraceParent: producer}.Context(context.Background())
	res, err := svc.Publish(ctx, tenant, event.Request{EventType: "order.created", Data: json.RawMessage(`{}`)})
	require.NoError(t, err)
	parent, state := storedParent(t, pool, res.ID)
	require.Nil(t, parent)
	require.Nil(t, state)
	require.Empty(t, exp.GetSpans())
}

// A replay is a span of the trace of the request asking for it, linked to
// the original's publish; the new event continues the replay's trace.
func TestReplayLinksToTheOriginalTrace(t *testing.T) {
	t.Parallel()
	svc, pool, exp, tenant := tracedService(t, true)
	ctx := tracing.Parent{TraceParent: producer}.Context(context.Background())
	orig, err := svc.Publish(ctx, tenant, event.Request{EventType: "order.created", Data: json.RawMessage(`{}`)})
	require.NoError(t, err)
	res, err := svc.Replay(context.Background(), tenant, orig.ID, nil)
	require.NoError(t, err)

	spans := exp.GetSpans()
	require.Len(t, spans, 2)
	pub, replay := spans[0], spans[1]
	require.Equal(t, "hookline.replay", replay.Name)
	require.NotEqual(t, pub.SpanContext.TraceID(), replay.SpanContext.TraceID(), "a trace of its own")
	require.Len(t, replay.Links, 1)
	require.Equal(t, pub.SpanContext.TraceID(), replay.Links[0].SpanContext.TraceID())
	require.Equal(t, pub.SpanContext.SpanID(), replay.Links[0].SpanContext.SpanID())
	parent, _ := storedParent(t, pool, res.ID)
	require.NotNil(t, parent)
	require.Contains(t, *parent, replay.SpanContext.TraceID().String()+"-"+replay.SpanContext.SpanID().String())
}
