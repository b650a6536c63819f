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
	"time"

	"github.com/hookline/hookline/internal/netguard"
	"github.com/hookline/hookline/internal/retry"
)

// SampleBytes is how much of a response body is read and kept.
const SampleBytes = 1024

// maxStoredHeaders bounds the response headers kept per attempt.
const (
	maxStoredHeaders  = 50
	maxStoredHeaderSz = 512
)

// SenderConfig tunes the shared HTTP client.
type SenderConfig struct {
	ConnectTimeout  time.Duration
	MaxConnsPerHost int
	UserAgent       string
}

// Sender POSTs deliveries. One Sender (one connection pool) serves a whole
// worker process.
type Sender struct {
	client *http.Client
	hosts  *hostLimiter
	ua     string
}

// NewSender builds the client: keep-alive, no redirects, a connect timeout
// separate from each attempt's, and every dialled address checked by policy
// after name resolution (so DNS rebinding cannot reach a private address).
func NewSender(cfg SenderConfig, policy netguard.Policy) *Sender {
	dialer := &net.Dialer{Timeout: cfg.ConnectTimeout, KeepAlive: 30 * time.Second, Control: policy.Control()}
	tr := &http.Transport{
		Proxy:                 nil,
		DialContext:           dialer.DialContext,
		TLSHandshakeTimeout:   cfg.ConnectTimeout,
		MaxIdleConns:          4096,
		MaxIdleConnsPerHost:   cfg.MaxConnsPerHost,
		IdleConnTimeout:       90 * time.Second,
		ExpectContinueTimeout: time.Second,
		ForceAttemptHTTP2:     true,
	}
	return &Sender{
		client: &http.Client{
			Transport:     tr,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		hosts: newHostLimiter(cfg.MaxConnsPerHost),
		ua:    cfg.UserAgent,
	}
}

// Request is one attempt to send.
type Request struct {
	URL     string
	Body    []byte
	Header  http.Header
	Timeout time.Duration
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
}

// Outcome is the retry package's view of the response.
func (r Response) Outcome() retry.Outcome {
	return retry.Outcome{StatusCode: r.StatusCode, Category: r.Category, RetryAfter: r.RetryAfter}
}

// errHostBusy means the endpoint host already has its maximum of requests
// in flight; the delivery is postponed, not attempted.
var errHostBusy = errors.New("endpoint host at its concurrent request limit")

// Send performs one attempt. It returns errHostBusy, without sending, when
// the endpoint's host is at its concurrency limit.
func (s *Sender) Send(ctx context.Context, r Request) (Response, error) {
	host := hostKey(r.URL)
	if !s.hosts.acquire(ctx, host) {
		return Response{}, errHostBusy
	}
	defer s.hosts.release(host)

	ctx, cancel := context.WithTimeout(ctx, r.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.URL, bytes.NewReader(r.Body))
	if err != nil {
		return Response{Category: retry.ClientError, Error: "invalid request: " + err.Error()}, nil
	}
	req.Header = r.Header
	req.Header.Set("User-Agent", s.ua)
	start := time.Now()
	res, err := s.client.Do(req)
	if err != nil {
		return Response{Category: classify(ctx, err), Error: sanitize(err.Error()), Duration: time.Since(start)}, nil
	}
	sample, readErr := io.ReadAll(io.LimitReader(res.Body, SampleBytes))
	_ = res.Body.Close() // never read past the sample
	out := Response{
		StatusCode: res.StatusCode,
		Duration:   time.Since(start),
		Header:     keepHeaders(res.Header),
		BodySample: sanitize(string(sample)),
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
	return out, nil
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
// host. A request waits a little for a free slot, so that a burst to a fast
// endpoint queues briefly instead of being postponed, while a slow endpoint
// holds at most max requests and only briefly delays the workers that try
// it.
type hostLimiter struct {
	max  int
	wait time.Duration
	mu   sync.Mutex
	sems map[string]chan struct{}
}

// hostWait is how long a request waits for a slot before it is postponed.
const hostWait = 200 * time.Millisecond

func newHostLimiter(max int) *hostLimiter {
	return &hostLimiter{max: max, wait: hostWait, sems: map[string]chan struct{}{}}
}

func (l *hostLimiter) sem(host string) chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	s, ok := l.sems[host]
	if !ok {
		s = make(chan struct{}, l.max)
		l.sems[host] = s
	}
	return s
}

// acquire takes a slot for host, waiting up to l.wait; false means none
// came free.
func (l *hostLimiter) acquire(ctx context.Context, host string) bool {
	s := l.sem(host)
	select {
	case s <- struct{}{}:
		return true
	default:
	}
	t := time.NewTimer(l.wait)
	defer t.Stop()
	select {
	case s <- struct{}{}:
		return true
	case <-t.C:
		return false
	case <-ctx.Done():
		return false
	}
}

func (l *hostLimiter) release(host string) { <-l.sem(host) }
