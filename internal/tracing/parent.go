package tracing

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Parent is a W3C trace context, as the traceparent and tracestate headers
// carry it: what a producer sends with a publish, what an event stores
// (once, for all its deliveries), and what a delivery sends its endpoint.
// The zero Parent is no trace context.
type Parent struct {
	TraceParent string
	TraceState  string
}

var w3c = propagation.TraceContext{}

// maxTraceState is the longest tracestate kept: the W3C advises
// propagating at least 512 characters, and a longer one is dropped whole
// rather than cut in the middle of an entry.
const maxTraceState = 512

// ParentOf returns the trace context of the span in ctx; the zero Parent
// when ctx holds no valid span context.
func ParentOf(ctx context.Context) Parent {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return Parent{}
	}
	var c carrier
	w3c.Inject(ctx, &c)
	if len(c.p.TraceState) > maxTraceState {
		c.p.TraceState = ""
	}
	return c.p
}

// ParentFromHeader reads the traceparent and tracestate headers of h.
func ParentFromHeader(h http.Header) Parent {
	return Parent{TraceParent: h.Get("traceparent"), TraceState: h.Get("tracestate")}
}

// Context returns ctx with p as the remote parent of the spans started in
// it; ctx itself when p is empty or malformed.
func (p Parent) Context(ctx context.Context) context.Context {
	if p.TraceParent == "" {
		return ctx
	}
	return w3c.Extract(ctx, &carrier{p: p})
}

// SpanContext is the span context p names; not valid when p is empty or
// malformed.
func (p Parent) SpanContext() trace.SpanContext {
	return trace.SpanContextFromContext(p.Context(context.Background()))
}

// LinkFrom links the span in ctx, when it records, to the span p names:
// the span of a retry or a replay to the publish of the event it comes
// from.
func LinkFrom(ctx context.Context, p Parent) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	if sc := p.SpanContext(); sc.IsValid() {
		span.AddLink(trace.Link{SpanContext: sc})
	}
}

// SetHeader writes p into h as traceparent and tracestate.
func (p Parent) SetHeader(h http.Header) {
	if p.TraceParent == "" {
		return
	}
	h.Set("traceparent", p.TraceParent)
	if p.TraceState != "" {
		h.Set("tracestate", p.TraceState)
	}
}

// carrier is a propagation.TextMapCarrier over one Parent.
type carrier struct{ p Parent }

func (c *carrier) Get(key string) string {
	switch key {
	case "traceparent":
		return c.p.TraceParent
	case "tracestate":
		return c.p.TraceState
	}
	return ""
}

func (c *carrier) Set(key, value string) {
	switch key {
	case "traceparent":
		c.p.TraceParent = value
	case "tracestate":
		c.p.TraceState = value
	}
}

func (c *carrier) Keys() []string { return []string{"traceparent", "tracestate"} }
