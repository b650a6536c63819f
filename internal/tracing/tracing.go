// Package tracing is hookline's OpenTelemetry tracing: the tracer provider
// each process builds from its configuration (spans exported over
// OTLP/HTTP), the Tracer the publish path, the workers and the dlq start
// their spans with, the W3C trace context an event carries from its
// publish to every attempt (Parent), and a log handler that stamps log
// lines with the trace and span they belong to.
//
// Tracing is off by default, and off it costs nothing: the zero Tracer
// starts no span and allocates nothing, and callers build attributes only
// for a span that records (trace.Span.IsRecording). See docs/TRACING.md.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/hookline/hookline/internal/config"
)

// Scope is the instrumentation scope of hookline's spans.
const Scope = "github.com/hookline/hookline"

// The attributes hookline puts on its spans. Ids only: never a secret,
// never a payload.
const (
	TenantID   = attribute.Key("hookline.tenant_id")
	WebhookID  = attribute.Key("hookline.webhook_id")
	EventID    = attribute.Key("hookline.event_id")
	EventType  = attribute.Key("hookline.event_type")
	DeliveryID = attribute.Key("hookline.delivery_id")
	Attempt    = attribute.Key("hookline.attempt")
)

// Provider is a process's tracer provider. A Provider for a configuration
// with tracing off holds nothing, and its Tracer is the zero Tracer.
type Provider struct {
	sdk *sdktrace.TracerProvider
}

// Setup builds the tracer provider of process (api, worker or dlq) from
// cfg. Spans are batched and posted to cfg.ExportURL(); an export that
// fails is logged on log at most once a minute, and the spans are dropped
// (tracing never holds up a delivery). Shutdown flushes what is buffered.
func Setup(ctx context.Context, cfg config.Tracing, process string, log *slog.Logger) (*Provider, error) {
	if !cfg.Enabled {
		return &Provider{}, nil
	}
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(cfg.ExportURL()))
	if err != nil {
		return nil, fmt.Errorf("trace exporter: %w", err)
	}
	name := cfg.ServiceName
	if name == "" {
		name = "hookline-" + process
	}
	res, err := resource.New(ctx, resource.WithTelemetrySDK(), resource.WithFromEnv(),
		resource.WithAttributes(semconv.ServiceName(name)))
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("trace resource: %w", err)
	}
	otel.SetErrorHandler(exportErrors(log))
	return &Provider{sdk: sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(Sampler(cfg)),
	)}, nil
}

// Sampler is the sampler cfg names (config.Samplers).
func Sampler(cfg config.Tracing) sdktrace.Sampler {
	switch cfg.Sampler {
	case "always_on":
		return sdktrace.AlwaysSample()
	case "always_off":
		return sdktrace.NeverSample()
	case "traceidratio":
		return sdktrace.TraceIDRatioBased(cfg.SamplerArg)
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample())
	case "parentbased_traceidratio":
		return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(cfg.SamplerArg))
	}
	return sdktrace.ParentBased(sdktrace.AlwaysSample())
}

// exportErrors reports the SDK's errors (a receiver that cannot be
// reached, mostly) as warnings, at most one a minute.
func exportErrors(log *slog.Logger) otel.ErrorHandler {
	var last atomic.Int64
	return otel.ErrorHandlerFunc(func(err error) {
		now := time.Now().Unix()
		if prev := last.Load(); now-prev >= 60 && last.CompareAndSwap(prev, now) {
			log.Warn("tracing: spans not exported", "error", err)
		}
	})
}

// On reports whether the provider records and exports spans.
func (p *Provider) On() bool { return p != nil && p.sdk != nil }

// Tracer returns the tracer hookline's spans start with: the zero Tracer
// when tracing is off.
func (p *Provider) Tracer() Tracer {
	if !p.On() {
		return Tracer{}
	}
	return NewTracer(p.sdk)
}

// ForceFlush exports the spans buffered so far, within ctx.
func (p *Provider) ForceFlush(ctx context.Context) error {
	if !p.On() {
		return nil
	}
	if err := p.sdk.ForceFlush(ctx); err != nil {
		return fmt.Errorf("tracing flush: %w", err)
	}
	return nil
}

// Shutdown exports the spans still buffered, within ctx, and stops the
// provider.
func (p *Provider) Shutdown(ctx context.Context) error {
	if !p.On() {
		return nil
	}
	if err := p.sdk.Shutdown(ctx); err != nil {
		return fmt.Errorf("tracing shutdown: %w", err)
	}
	return nil
}

// Tracer starts hookline's spans. The zero Tracer is tracing off: it
// starts no span, returns the context it is given and a span that records
// nothing, and allocates nothing.
type Tracer struct {
	t trace.Tracer
}

// NewTracer returns a Tracer of tp; nil tp is the zero Tracer. Processes
// get theirs from Provider.Tracer; tests and programs with a provider of
// their own (the publisher package) use this.
func NewTracer(tp trace.TracerProvider) Tracer {
	if tp == nil {
		return Tracer{}
	}
	return Tracer{t: tp.Tracer(Scope)}
}

// On reports whether t starts spans.
func (t Tracer) On() bool { return t.t != nil }

// noSpan is the span of the zero Tracer: it records nothing.
var noSpan = trace.SpanFromContext(context.Background())

// Start starts a span of kind named name, a child of the span in ctx (or
// of the remote parent Parent.Context put there), and returns ctx with it.
func (t Tracer) Start(ctx context.Context, name string, kind trace.SpanKind) (context.Context, trace.Span) {
	if t.t == nil {
		return ctx, noSpan
	}
	return t.t.Start(ctx, name, trace.WithSpanKind(kind))
}

// Fail marks span as failed with err, when it records.
func Fail(span trace.Span, err error) {
	if err == nil || !span.IsRecording() {
		return
	}
	span.RecordError(err)
	span.SetStatus(codes.Error, err.Error())
}
