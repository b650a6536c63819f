package delivery

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/hookline/hookline/internal/retry"
	"github.com/hookline/hookline/internal/schedule"
	"github.com/hookline/hookline/internal/tracing"
	"github.com/hookline/hookline/internal/wire"
)

// The worker's spans (docs/TRACING.md): one per attempt, a child of the
// event's publish, with the guard's decision, the outcome and what follows
// as attributes and events; the HTTP request inside it as a client span.
// Every helper here returns at once for a span that does not record, so
// that tracing off (or a trace not sampled) builds no attribute.

// Attributes of the attempt span besides the ids.
const (
	attrOutcome  = attribute.Key("hookline.outcome")
	attrCategory = attribute.Key("hookline.failure_category")
	attrReason   = attribute.Key("hookline.reason")
)

// startAttempt starts the span of attempt t.Attempt of j, continuing the
// trace of the event's publish.
func (w *Worker) startAttempt(ctx context.Context, t wire.Task, j job) (context.Context, trace.Span) {
	if !w.tracer.On() {
		return ctx, trace.SpanFromContext(ctx)
	}
	ctx, span := w.tracer.Start(j.Trace.Context(ctx), "hookline.attempt", trace.SpanKindConsumer)
	if span.IsRecording() {
		span.SetAttributes(tracing.TenantID.String(t.TenantID.String()), tracing.WebhookID.String(t.WebhookID.String()),
			tracing.EventID.String(t.EventID.String()), tracing.DeliveryID.String(t.DeliveryID.String()),
			tracing.Attempt.Int(t.Attempt), tracing.EventType.String(j.EventType))
	}
	return ctx, span
}

// traceAdmission records the guard's decision on the attempt span.
func traceAdmission(span trace.Span, adm admission) {
	if !span.IsRecording() {
		return
	}
	attrs := []attribute.KeyValue{attribute.Bool("hookline.allowed", adm.allowed)}
	if adm.state != "" {
		attrs = append(attrs, attribute.String("hookline.circuit_state", string(adm.state)))
	}
	if adm.probe {
		attrs = append(attrs, attribute.Bool("hookline.probe", true))
	}
	span.AddEvent("guard", trace.WithAttributes(attrs...))
}

// tracePostponed records a postponement: the delivery waits until until
// (zero: until released) without an attempt.
func tracePostponed(span trace.Span, reason schedule.Reason, until time.Time) {
	if !span.IsRecording() {
		return
	}
	attrs := []attribute.KeyValue{attrReason.String(string(reason))}
	if !until.IsZero() {
		attrs = append(attrs, attribute.String("hookline.until", until.UTC().Format(time.RFC3339Nano)))
	}
	span.AddEvent("postponed", trace.WithAttributes(attrs...))
	span.SetAttributes(attrOutcome.String("postponed"), attrReason.String(string(reason)))
}

// traceOutcome records what the attempt left the delivery in, and the
// retry scheduled.
func traceOutcome(span trace.Span, rec attemptRecord, d retry.Decision) {
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(attrOutcome.String(string(rec.Status)))
	if rec.Response.Category != "" {
		span.SetAttributes(attrCategory.String(string(rec.Response.Category)))
	}
	switch rec.Status {
	case wire.Succeeded:
		return
	case wire.Retrying:
		span.AddEvent("retry_scheduled", trace.WithAttributes(
			attribute.String("hookline.next_attempt_at", rec.NextAttemptAt.UTC().Format(time.RFC3339Nano)),
			attribute.Int64("hookline.retry_delay_ms", d.Delay.Milliseconds()),
			attribute.Bool("hookline.parked", rec.Park)))
	case wire.Exhausted:
		span.AddEvent("exhausted", trace.WithAttributes(attrReason.String(d.Reason)))
	}
	span.SetStatus(codes.Error, string(rec.Response.Category))
}

// traceCancelled records a delivery that can no longer be made.
func traceCancelled(span trace.Span, reason string) {
	if span.IsRecording() {
		span.SetAttributes(attrOutcome.String(string(wire.Cancelled)), attrReason.String(reason))
	}
}

// tracePutBack records our own failure: the delivery goes back without an
// attempt.
func tracePutBack(span trace.Span, stage string, cause error) {
	if !span.IsRecording() {
		return
	}
	span.AddEvent("put_back", trace.WithAttributes(attribute.String("hookline.stage", stage)))
	span.SetAttributes(attrOutcome.String("put_back"))
	span.RecordError(cause)
	span.SetStatus(codes.Error, "internal failure at "+stage)
}

// describeRequest puts the standard HTTP client attributes on span. The
// URL is given without its query, which may hold credentials.
func describeRequest(span trace.Span, req *http.Request, bodySize int, res Response) {
	u := req.URL
	attrs := []attribute.KeyValue{semconv.HTTPRequestMethodPost,
		semconv.URLFull((&url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path}).String()),
		semconv.ServerAddress(u.Hostname()), semconv.HTTPRequestBodySize(bodySize),
		semconv.UserAgentOriginal(req.Header.Get("User-Agent"))}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		port = 443
		if u.Scheme == "http" {
			port = 80
		}
	}
	attrs = append(attrs, semconv.ServerPort(port))
	if res.StatusCode != 0 {
		attrs = append(attrs, semconv.HTTPResponseStatusCode(res.StatusCode))
	}
	if v, ok := strings.CutPrefix(res.proto, "HTTP/"); ok {
		attrs = append(attrs, semconv.NetworkProtocolVersion(strings.TrimSuffix(v, ".0")))
	}
	switch {
	case res.StatusCode >= 400:
		attrs = append(attrs, semconv.ErrorTypeKey.String(strconv.Itoa(res.StatusCode)))
		span.SetStatus(codes.Error, "")
	case res.Category != "":
		attrs = append(attrs, semconv.ErrorTypeKey.String(string(res.Category)))
		span.SetStatus(codes.Error, res.Error)
	}
	span.SetAttributes(attrs...)
}
