// Package otlptest is an OTLP/HTTP trace receiver for tests and load
// programs: it answers what exporters post to /v1/traces, decoding each
// application/x-protobuf ExportTraceServiceRequest, and keeps the spans
// for a test to look at, or only counts them.
package otlptest

import (
	"compress/gzip"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// Span is one received span, with ids in hex as W3C traceparent writes
// them.
type Span struct {
	// Service is the service.name of the process that exported it.
	Service            string
	TraceID, SpanID    string
	ParentSpanID       string
	Name               string
	Kind               tracepb.Span_SpanKind
	Attributes         map[string]string
	Events             []string
	Links              []Link
	StatusError        bool
	StartNano, EndNano uint64
	EventAttributes    map[string]map[string]string
}

// Link is a span link.
type Link struct{ TraceID, SpanID string }

// Receiver is an http.Handler receiving OTLP/HTTP traces.
type Receiver struct {
	keep  bool
	mu    sync.Mutex
	spans []Span
	count atomic.Int64
}

// New returns a receiver; keep says whether it keeps the spans (Spans) or
// only counts them (Count).
func New(keep bool) *Receiver { return &Receiver{keep: keep} }

// ServeHTTP implements http.Handler.
func (r *Receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" {
		http.NotFound(w, req)
		return
	}
	if ct := req.Header.Get("Content-Type"); ct != "application/x-protobuf" {
		http.Error(w, "content type "+ct+" is not application/x-protobuf", http.StatusUnsupportedMediaType)
		return
	}
	msg, err := decode(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.add(msg)
	w.Header().Set("Content-Type", "application/x-protobuf")
	out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
	_, _ = w.Write(out)
}

func decode(req *http.Request) (*collectortrace.ExportTraceServiceRequest, error) {
	body := io.Reader(req.Body)
	if req.Header.Get("Content-Encoding") == "gzip" {
		gz, err := gzip.NewReader(req.Body)
		if err != nil {
			return nil, fmt.Errorf("gzip: %w", err)
		}
		defer gz.Close()
		body = gz
	}
	raw, err := io.ReadAll(body)
	if err != nil {
		return nil, fmt.Errorf("read: %w", err)
	}
	var msg collectortrace.ExportTraceServiceRequest
	if err := proto.Unmarshal(raw, &msg); err != nil {
		return nil, fmt.Errorf("decode ExportTraceServiceRequest: %w", err)
	}
	return &msg, nil
}

func (r *Receiver) add(msg *collectortrace.ExportTraceServiceRequest) {
	var spans []Span
	n := 0
	for _, rs := range msg.GetResourceSpans() {
		service := attributes(rs.GetResource().GetAttributes())["service.name"]
		for _, ss := range rs.GetScopeSpans() {
			n += len(ss.GetSpans())
			if !r.keep {
				continue
			}
			for _, s := range ss.GetSpans() {
				spans = append(spans, convert(service, s))
			}
		}
	}
	r.count.Add(int64(n))
	if r.keep {
		r.mu.Lock()
		r.spans = append(r.spans, spans...)
		r.mu.Unlock()
	}
}

func convert(service string, s *tracepb.Span) Span {
	out := Span{Service: service, TraceID: hex.EncodeToString(s.GetTraceId()), SpanID: hex.EncodeToString(s.GetSpanId()),
		Name: s.GetName(), Kind: s.GetKind(), Attributes: attributes(s.GetAttributes()),
		StatusError: s.GetStatus().GetCode() == tracepb.Status_STATUS_CODE_ERROR,
		StartNano:   s.GetStartTimeUnixNano(), EndNano: s.GetEndTimeUnixNano(),
		EventAttributes: map[string]map[string]string{}}
	if p := s.GetParentSpanId(); len(p) > 0 {
		out.ParentSpanID = hex.EncodeToString(p)
	}
	for _, e := range s.GetEvents() {
		out.Events = append(out.Events, e.GetName())
		out.EventAttributes[e.GetName()] = attributes(e.GetAttributes())
	}
	for _, l := range s.GetLinks() {
		out.Links = append(out.Links, Link{TraceID: hex.EncodeToString(l.GetTraceId()), SpanID: hex.EncodeToString(l.GetSpanId())})
	}
	return out
}

// attributes renders attribute values as text: strings as they are,
// numbers and booleans in Go's notation.
func attributes(kvs []*commonpb.KeyValue) map[string]string {
	out := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		v := kv.GetValue()
		switch x := v.GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			out[kv.GetKey()] = x.StringValue
		case *commonpb.AnyValue_IntValue:
			out[kv.GetKey()] = fmt.Sprint(x.IntValue)
		case *commonpb.AnyValue_BoolValue:
			out[kv.GetKey()] = fmt.Sprint(x.BoolValue)
		case *commonpb.AnyValue_DoubleValue:
			out[kv.GetKey()] = fmt.Sprint(x.DoubleValue)
		default:
			out[kv.GetKey()] = v.String()
		}
	}
	return out
}

// Spans returns the spans received so far (New(true)).
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}

// Count is how many spans were received.
func (r *Receiver) Count() int64 { return r.count.Load() }
