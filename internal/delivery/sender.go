// Package delivery is the worker's side of hookline: it loads a delivery,
// builds and signs the request, POSTs it through an SSRF-guarded client,
// classifies the outcome, records the attempt and decides what follows
// (success, a retry on the delay queues, or the dead-letter queue).
package delivery

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/trace"

	"github.com/hookline/hookline/internal/endpoint"
	"github.com/hookline/hookline/internal/netguard"
	"github.com/hookline/hookline/internal/retry"
	"github.com/hookline/hookline/internal/schedule"
	"github.com/hookline/hookline/internal/tracing"
)

// SampleBytes is how much of a response body is read and kept.
const SampleBytes = 1024

// maxStoredHeaders bounds the response headers kept per attempt.
const (
	maxStoredHeaders  = 50
	maxStoredHeaderSz = 512
)

// What the client reads of an answer is bounded, whatever the endpoint
// sends: the headers and HTTP/2's read-ahead per stream as package
// endpoint says, the body to SampleBytes, and HTTP/2's read-ahead per
// connection to h2ConnWindow (Go's default: 1 GiB).
const h2ConnWindow = 1 << 20

// SenderConfig tunes the shared HTTP client.
type SenderConfig struct {
	ConnectTimeout  time.Duration
	MaxConnsPerHost int
	// HostQueueWait is how long a request waits for a free connection to
	// its host before it is deferred. Default 500ms.
	HostQueueWait time.Duration
	UserAgent     string
	// Tracer makes each request a client span; the zero Tracer: none.
	Tracer tracing.Tracer
}

// Sender POSTs deliveries. One Sender (one connection pool) serves a whole
// worker process.
type Sender struct {
	client *http.Client
	hosts  *hostLimiter
	ua     string
	tracer tracing.Tracer
}

// NewSender builds the client: keep-alive, no redirects, a connect timeout
// separate from each attempt's, and every dialled address checked by policy
// after name resolution (so DNS rebinding cannot reach a private address).
func NewSender(cfg SenderConfig, policy netguard.Policy) *Sender {
	dialer := &net.Dialer{Timeout: cfg.ConnectTimeout, KeepAlive: 30 * time.Second, Control: policy.Control()}
	tr := &http.Transport{
		Proxy:                  nil,
		DialContext:            dialer.DialContext,
		TLSHandshakeTimeout:    cfg.ConnectTimeout,
		MaxIdleConns:           4096,
		MaxIdleConnsPerHost:    cfg.MaxConnsPerHost,
		IdleConnTimeout:        90 * time.Second,
		ExpectContinueTimeout:  time.Second,
		ForceAttemptHTTP2:      true,
		MaxResponseHeaderBytes: endpoint.MaxHeaderBytes,
		HTTP2: &http.HTTP2Config{
			MaxReceiveBufferPerStream:     endpoint.H2StreamWindow,
			MaxReceiveBufferPerConnection: h2ConnWindow,
		},
	}
	return &Sender{
		client: &http.Client{
			Transport:     tr,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		hosts:  newHostLimiter(cfg.MaxConnsPerHost, cfg.HostQueueWait),
		ua:     cfg.UserAgent,
		tracer: cfg.Tracer,
	}
}

// HostFreeAt returns when a delivery of webhook to url that found its host
// busy should try again (see hostLimiter.freeAt), and whether that is a
// ParkAfter or more ahead: its parking is then counted as being written
// until ParkWritten is called for it.
func (s *Sender) HostFreeAt(url string, webhook uuid.UUID, now time.Time) (time.Time, bool) {
	return s.hosts.freeAt(hostKey(url), webhook, now)
}

// ParkWritten ends the writing of a parking counted by HostFreeAt (written
// or not), and reports what OutdatedReservations would then.
func (s *Sender) ParkWritten(url string, now time.Time) ([]uuid.UUID, time.Duration) {
	return s.hosts.written(hostKey(url), now)
}

// OutdatedReservations reports, once, the webhooks whose deliveries are
// parked for url's host with reservations it no longer needs, and the
// host's current pace to space their new times by (see
// hostLimiter.outdated).
func (s *Sender) OutdatedReservations(url string, now time.Time) ([]uuid.UUID, time.Duration) {
	return s.hosts.outdated(hostKey(url), now)
}

// Request is one attempt to send.
type Request struct {
	URL     string
	Body    []byte
	Header  http.Header
	Timeout time.Duration
	// Propagate sends the request's trace context (traceparent and
	// tracestate, naming its client span) when tracing is on, so that the
	// endpoint's own tracing continues the trace.
	Propagate bool
}

// Response is what an attempt produced. Category is empty on a 2xx.
type Response struct {
	StatusCode int
	Category   retry.Category
	Error      string
	Duration   time.Duration
	Header     map[string]string
	BodySample string
	RetryAfter time.Duration
	// proto is the answer's protocol ("HTTP/1.1"), for the client span.
	proto string
}

// Outcome is the retry package's view of the response.
func (r Response) Outcome() retry.Outcome {
	return retry.Outcome{StatusCode: r.StatusCode, Category: r.Category, RetryAfter: r.RetryAfter}
}

// errHostBusy means the endpoint host kept its maximum of requests in
// flight for as long as a request may wait; the delivery is deferred to
// HostFreeAt, not attempted.
var errHostBusy = errors.New("endpoint host at its concurrent request limit")

// Send performs one attempt. It returns errHostBusy, without sending, when
// the endpoint's host is at its concurrency limit. With tracing on, the
// request is a client span, a child of the span in ctx.
func (s *Sender) Send(ctx context.Context, r Request) (Response, error) {
	host := hostKey(r.URL)
	token := s.hosts.acquire(ctx, host)
	if token == nil {
		return Response{}, errHostBusy
	}
	defer s.hosts.release(host, token)

	ctx, span := s.tracer.Start(ctx, http.MethodPost, trace.SpanKindClient)
	defer span.End()
	ctx, cancel := context.WithTimeout(ctx, r.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.URL, bytes.NewReader(r.Body))
	if err != nil {
		return Response{Category: retry.ClientError, Error: "invalid request: " + err.Error()}, nil
	}
	req.Header = r.Header
	req.Header.Set("User-Agent", s.ua)
	if r.Propagate && s.tracer.On() {
		tracing.ParentOf(ctx).SetHeader(req.Header)
	}
	out := s.do(ctx, req)
	if span.IsRecording() {
		describeRequest(span, req, len(r.Body), out)
	}
	return out, nil
}

// do sends req and reads what is kept of the answer.
func (s *Sender) do(ctx context.Context, req *http.Request) Response {
	var reached atomic.Bool
	start := time.Now()
	res, err := s.client.Do(endpoint.TraceReached(req, &reached))
	if err != nil {
		out := Response{Category: classify(ctx, err), Error: sanitize(err.Error()), Duration: time.Since(start)}
		if reached.Load() && unreadable(out.Category, err) {
			out.Category, out.Error = retry.ServerError, unreadableResponse+sanitize(endpoint.Cause(err))
		}
		return out
	}
	sample, readErr := io.ReadAll(io.LimitReader(res.Body, SampleBytes))
	_ = res.Body.Close() // never read past the sample
	out := Response{
		StatusCode: res.StatusCode,
		Duration:   time.Since(start),
		Header:     keepHeaders(res.Header),
		BodySample: sanitize(string(sample)),
		proto:      res.Proto,
	}
	if readErr != nil && ctx.Err() != nil {
		out.Error = "reading response: " + readErr.Error()
	}
	if res.StatusCode < 200 || res.StatusCode > 299 {
		out.Category = retry.CategoryOfStatus(res.StatusCode)
		out.Error = sanitize(res.Status)
		if res.StatusCode == http.StatusTooManyRequests || res.StatusCode == http.StatusServiceUnavailable {
			if d, ok := retry.ParseRetryAfter(res.Header.Get("Retry-After"), time.Now()); ok {
				out.RetryAfter = d
			}
		}
	}
	return out
}

// classify names the failure of a request that got no response.
func classify(ctx context.Context, err error) retry.Category {
	var dnsErr *net.DNSError
	var recErr tls.RecordHeaderError
	var certErr *tls.CertificateVerificationError
	var alert tls.AlertError
	var unknownAuth x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	var invalid x509.CertificateInvalidError
	var netErr net.Error
	switch {
	case errors.Is(err, netguard.ErrBlocked):
		return retry.SSRFBlocked
	case errors.As(err, &dnsErr):
		if dnsErr.IsTimeout {
			return retry.Timeout
		}
		return retry.DNS
	case errors.As(err, &certErr), errors.As(err, &recErr), errors.As(err, &alert),
		errors.As(err, &unknownAuth), errors.As(err, &hostErr), errors.As(err, &invalid):
		return retry.SSL
	case errors.Is(err, context.DeadlineExceeded), ctx.Err() != nil:
		return retry.Timeout
	case errors.As(err, &netErr) && netErr.Timeout():
		return retry.Timeout
	}
	return retry.Network
}

// unreadableResponse begins the error of an attempt whose endpoint began
// to answer with something that is not a readable HTTP response: headers
// over the limit, or not HTTP at all. Such an attempt is a server_error:
// the endpoint was reached and answered, wrongly, as with a 5xx; it is not
// the network's failure.
const unreadableResponse = "unreadable response (headers over 64 KiB, or not valid HTTP): "

// unreadable reports whether a request that reached its endpoint (and got
// category cat) failed on what the endpoint sent rather than on the
// connection: the connection did not break or time out, so the client
// refused the answer (an HTTP/2 header block over the limit is a
// connection error of the protocol, not of the network).
func unreadable(cat retry.Category, err error) bool {
	return cat == retry.Network && !endpoint.BrokenConnection(err)
}

func keepHeaders(h http.Header) map[string]string {
	out := make(map[string]string, min(len(h), maxStoredHeaders))
	for k, v := range h {
		if len(out) == maxStoredHeaders {
			break
		}
		val := strings.Join(v, ", ")
		if len(val) > maxStoredHeaderSz {
			val = val[:maxStoredHeaderSz]
		}
		out[sanitize(k)] = sanitize(val)
	}
	return out
}

// sanitize makes text from an endpoint storable in Postgres: invalid UTF-8
// becomes U+FFFD and NUL bytes (refused by text columns) are dropped.
func sanitize(s string) string {
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "")
}

// hostKey is the scheme-qualified host:port of a URL, the unit of the
// per-host concurrency limit.
func hostKey(raw string) string {
	rest, ok := strings.CutPrefix(raw, "https://")
	scheme := "https"
	if !ok {
		rest, _ = strings.CutPrefix(raw, "http://")
		scheme = "http"
	}
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		rest = rest[:i]
	}
	return scheme + "://" + strings.ToLower(rest)
}

// hostLimiter bounds requests in flight per host with one semaphore per
// host. A request waits up to wait for a free connection, so that a burst to
// a fast endpoint queues briefly in the worker instead of going back
// through the broker, while a slow endpoint holds at most max requests.
// A request that found none is deferred to the host's next estimated free
// connection (freeAt); reservations made while the host was slower than it
// is now are found by outdated.
type hostLimiter struct {
	max   int
	wait  time.Duration
	mu    sync.Mutex
	hosts map[string]*hostSlots
}

type hostSlots struct {
	sem chan struct{}
	// hold is the moving average of how long a request holds a
	// connection; started are the start times of those in flight.
	hold    time.Duration
	started map[*time.Time]struct{}
	// last is how long the latest request to come back held its
	// connection.
	last time.Duration
	// backlog counts the deferred requests still waiting for a
	// connection, served one every step (see freeAt) at its current pace.
	backlog schedule.Backlog
	// parked are the webhooks of requests deferred a ParkAfter or more
	// (parked in Postgres, their reservation revisable by outdated), and
	// parkedUntil the latest of those reservations.
	parked      map[uuid.UUID]struct{}
	parkedUntil time.Time
	// writing counts the parkings handed out by freeAt and not yet
	// written (see written).
	writing int
	// hastenedAt is when outdated last reported the host, and cooldown
	// how long it waits before it reports the host again: doubled when a
	// report comes within twice the cooldown of the one before (a host
	// whose answers are uneven, fast ones among slow, looks fast again
	// and again), back to hastenCooldown otherwise.
	hastenedAt time.Time
	cooldown   time.Duration
}

// defaultHostWait is how long a request waits for a connection when the
// configuration says nothing.
const defaultHostWait = 500 * time.Millisecond

// hastenCooldown is the shortest time between two reports of a host by
// outdated, maxHastenCooldown the longest.
const (
	hastenCooldown    = 10 * schedule.ParkAfter
	maxHastenCooldown = 5 * time.Minute
)

// maxParkedWebhooks bounds the webhooks a host remembers for revising its
// parked reservations; deliveries of others keep their reservation.
const maxParkedWebhooks = 1024

func newHostLimiter(max int, wait time.Duration) *hostLimiter {
	if wait <= 0 {
		wait = defaultHostWait
	}
	return &hostLimiter{max: max, wait: wait, hosts: map[string]*hostSlots{}}
}

func (l *hostLimiter) host(host string) *hostSlots {
	l.mu.Lock()
	defer l.mu.Unlock()
	h, ok := l.hosts[host]
	if !ok {
		h = &hostSlots{sem: make(chan struct{}, l.max), started: map[*time.Time]struct{}{}}
		l.hosts[host] = h
	}
	return h
}

// acquire takes a connection slot for host, waiting up to l.wait; nil
// means none came free. The returned token goes back through release.
func (l *hostLimiter) acquire(ctx context.Context, host string) *time.Time {
	h := l.host(host)
	select {
	case h.sem <- struct{}{}:
		return l.started(h)
	default:
	}
	t := time.NewTimer(l.wait)
	defer t.Stop()
	select {
	case h.sem <- struct{}{}:
		return l.started(h)
	case <-t.C:
		return nil
	case <-ctx.Done():
		return nil
	}
}

func (l *hostLimiter) started(h *hostSlots) *time.Time {
	now := time.Now()
	l.mu.Lock()
	h.started[&now] = struct{}{}
	l.mu.Unlock()
	return &now
}

// release gives the slot back and feeds its duration into the estimate.
func (l *hostLimiter) release(host string, token *time.Time) {
	h := l.host(host)
	l.mu.Lock()
	delete(h.started, token)
	held := time.Since(*token)
	h.last = held
	if h.hold == 0 {
		h.hold = held
	} else {
		h.hold += (held - h.hold) / 8
	}
	l.mu.Unlock()
	<-h.sem
}

// pace is how long a request to h holds its connection, judged from base
// (the moving average, or the latest request to come back): a request in
// flight for longer stands for it (until requests have come back from a
// host that turned slow, their age is all there is to go by). Call with
// l.mu held.
func pace(h *hostSlots, base time.Duration, now time.Time) time.Duration {
	for start := range h.started {
		base = max(base, now.Sub(*start))
	}
	return max(base, time.Millisecond)
}

// step is how often a host frees one of its max connections when each is
// held for pace.
func (l *hostLimiter) step(pace time.Duration) time.Duration {
	return pace / time.Duration(max(l.max, 1))
}

// freeAt returns when a request of webhook that found host busy should try
// again: the host frees a connection every step, and each deferred request
// gets the one after those reserved before it, like a reservation. The
// reservations still waiting are counted at the host's current pace, so
// that a stall (the host's, or this machine's) that slowed it for a moment
// does not put later requests behind reservations it no longer needs.
// parked says the reservation is a ParkAfter or more ahead: the request
// is parked in Postgres, and counted as being written until written is
// called for it.
func (l *hostLimiter) freeAt(host string, webhook uuid.UUID, now time.Time) (at time.Time, parked bool) {
	h := l.host(host)
	l.mu.Lock()
	defer l.mu.Unlock()
	at = h.backlog.Reserve(now, l.step(pace(h, h.hold, now)))
	parked = at.Sub(now) >= schedule.ParkAfter
	if parked {
		h.writing++
		if h.parked == nil {
			h.parked = map[uuid.UUID]struct{}{}
		}
		if len(h.parked) < maxParkedWebhooks {
			h.parked[webhook] = struct{}{}
		}
		if at.After(h.parkedUntil) {
			h.parkedUntil = at
		}
	}
	return at, parked
}

// written counts a parking that freeAt handed out as written (or given
// up), and reports what outdated would then: the reservations a host
// turned fast again no longer needs are brought forward only once every
// parking that holds one is in Postgres, where they can be found.
func (l *hostLimiter) written(host string, now time.Time) (webhooks []uuid.UUID, step time.Duration) {
	l.mu.Lock()
	if h := l.hosts[host]; h != nil && h.writing > 0 {
		h.writing--
	}
	l.mu.Unlock()
	return l.outdated(host, now)
}

// outdated reports, once, the webhooks whose deliveries host's parked
// reservations hold for longer than it now needs, and its current pace
// (step) to space their new times by. They are outdated when, while a
// request parked a ParkAfter or more ahead still waits, the host has
// become fast enough to serve every reservation still waiting within half
// of ParkAfter, judged by the latest request to come back and by the
// requests in flight (none may be older): a stall that made the host look
// slow is over. The moving average that freeAt goes by still remembers
// the stall; it is set to the host's pace when the host is reported.
// Nothing while a request in flight is as old as the host was slow, so a
// hanging host's deferred deliveries keep their turn; and a host is
// reported at most once per cooldown, so that one whose answers are
// uneven does not have its parked deliveries brought forward, to be
// deferred again, at every fast answer. Nothing either while a parking is
// still being written (written reports the host once none is).
func (l *hostLimiter) outdated(host string, now time.Time) (webhooks []uuid.UUID, step time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	h := l.hosts[host]
	if h == nil || len(h.parked) == 0 || h.writing > 0 {
		return nil, 0
	}
	if !h.parkedUntil.After(now.Add(schedule.ParkAfter)) {
		// The last parked reservation is near: nothing to gain.
		h.parked = nil
		return nil, 0
	}
	current := pace(h, h.last, now)
	step = l.step(current)
	if time.Duration(h.backlog.Waiting(now, step)*float64(step)) >= schedule.ParkAfter/2 {
		return nil, 0
	}
	since := now.Sub(h.hastenedAt)
	if since < h.cooldown {
		return nil, 0
	}
	if h.hastenedAt.IsZero() || since >= 2*h.cooldown {
		h.cooldown = hastenCooldown
	} else {
		h.cooldown = min(2*h.cooldown, maxHastenCooldown)
	}
	h.hastenedAt = now
	for id := range h.parked {
		webhooks = append(webhooks, id)
	}
	h.parked, h.parkedUntil = nil, time.Time{}
	h.hold = current
	h.backlog.Drain(now, step)
	return webhooks, step
}
