// Package verify checks that a webhook endpoint is willing to receive
// hookline's deliveries before it gets any (verify_url). It POSTs a signed
// challenge,
//
//	{"type": "webhook.verification", "challenge": "<random>"}
//
// signed like a delivery (X-Webhook-Signature and the Standard Webhooks
// headers, with every active secret of the webhook) and carrying the
// webhook's custom headers, through a client that refuses blocked
// addresses at dial time and follows no redirect. The endpoint passes
// when it answers 2xx within Timeout with the challenge echoed, as
// {"challenge": "<random>"} or the bare value. Otherwise the result says
// what it answered: the status and the beginning of the body, or why no
// answer came.
package verify

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	answers "github.com/hookline/hookline/internal/endpoint"
	"github.com/hookline/hookline/internal/netguard"
	"github.com/hookline/hookline/internal/signature"
	"github.com/hookline/hookline/internal/webhook"
)

// EventType is the type of the challenge, in its body and in
// X-Webhook-Event.
const EventType = "webhook.verification"

// Timeout is how long an endpoint has to answer a challenge.
const Timeout = 10 * time.Second

// sampleBytes is how much of the answer is read: a challenge echo is far
// shorter.
const sampleBytes = 1024

// quotedBytes is how much of the answer a failure quotes.
const quotedBytes = 200

// Config sets up a Checker.
type Config struct {
	// Policy says which addresses may be dialled (as for deliveries).
	Policy netguard.Policy
	// UserAgent is sent with the challenge.
	UserAgent string
	// Timeout bounds a whole check; Timeout (10 s) when zero.
	Timeout time.Duration
}

// Checker sends challenges. Its client keeps no connection open between
// checks, which are rare.
type Checker struct {
	client  *http.Client
	ua      string
	timeout time.Duration
	now     func() time.Time
}

// New returns a Checker.
func New(cfg Config) *Checker {
	if cfg.Timeout <= 0 {
		cfg.Timeout = Timeout
	}
	dialer := &net.Dialer{Timeout: cfg.Timeout, Control: cfg.Policy.Control()}
	tr := &http.Transport{
		Proxy:                  nil,
		DialContext:            dialer.DialContext,
		TLSHandshakeTimeout:    cfg.Timeout,
		DisableKeepAlives:      true,
		ForceAttemptHTTP2:      true,
		MaxResponseHeaderBytes: answers.MaxHeaderBytes, // as for deliveries (package endpoint)
		HTTP2:                  &http.HTTP2Config{MaxReceiveBufferPerStream: answers.H2StreamWindow, MaxReceiveBufferPerConnection: answers.H2StreamWindow},
	}
	return &Checker{
		client: &http.Client{
			Transport:     tr,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		ua:      cfg.UserAgent,
		timeout: cfg.Timeout,
		now:     time.Now,
	}
}

// Result is the outcome of one check.
type Result struct {
	// Problem is empty when the endpoint echoed the challenge; otherwise
	// it says what the endpoint answered, or why no answer came.
	Problem string
	// StatusCode is the endpoint's answer; 0 when none came.
	StatusCode int
	Duration   time.Duration
}

// Verified reports whether the endpoint echoed the challenge.
func (r Result) Verified() bool { return r.Problem == "" }

// challenge is the body of a check.
type challenge struct {
	Type      string `json:"type"`
	Challenge string `json:"challenge"`
}

// Check sends one challenge to w's endpoint. An error is our own failure,
// not the endpoint's: the webhook's secret cannot be used, or ctx ended
// before the endpoint had its time to answer.
func (c *Checker) Check(ctx context.Context, w webhook.Webhook) (Result, error) {
	parent := ctx
	value, err := newChallenge()
	if err != nil {
		return Result{}, err
	}
	body, err := json.Marshal(challenge{Type: EventType, Challenge: value})
	if err != nil {
		return Result{}, fmt.Errorf("encode challenge: %w", err)
	}
	now := c.now()
	h, err := c.headers(w, body, now)
	if err != nil {
		return Result{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.URL, bytes.NewReader(body))
	if err != nil {
		return Result{Problem: "the url cannot be requested: " + err.Error()}, nil
	}
	req.Header = h
	var reached atomic.Bool
	res, err := c.client.Do(answers.TraceReached(req, &reached))
	if err != nil {
		if parent.Err() != nil {
			return Result{}, fmt.Errorf("check of webhook %s cut off: %w", w.ID, parent.Err())
		}
		return Result{Problem: c.noAnswer(ctx, err, reached.Load()), Duration: time.Since(now)}, nil
	}
	sample, _ := io.ReadAll(io.LimitReader(res.Body, sampleBytes))
	_ = res.Body.Close() // never read past the sample
	return Result{Problem: judge(res.StatusCode, sample, value), StatusCode: res.StatusCode, Duration: time.Since(now)}, nil
}

// headers are a delivery's, for the challenge: signatures by every active
// secret, the webhook's custom headers, and ours.
func (c *Checker) headers(w webhook.Webhook, body []byte, now time.Time) (http.Header, error) {
	secrets := w.ActiveSecrets(now)
	keys := make([][]byte, 0, len(secrets))
	for _, s := range secrets {
		k, err := webhook.DecodeSecret(s)
		if err != nil {
			return nil, fmt.Errorf("secret of webhook %s: %w", w.ID, err)
		}
		keys = append(keys, k)
	}
	ts := now.Unix()
	msgID := uuid.Must(uuid.NewV7()).String()
	h := make(http.Header, 12+len(w.Headers))
	for k, v := range w.Headers {
		h.Set(k, v)
	}
	h.Set("Content-Type", "application/json")
	h.Set("User-Agent", c.ua)
	h.Set("X-Webhook-ID", w.ID.String())
	h.Set("X-Webhook-Event", EventType)
	h.Set("X-Webhook-Timestamp", strconv.FormatInt(ts, 10))
	h.Set("X-Webhook-Signature", signature.Legacy(ts, body, keys...))
	h.Set("Webhook-Id", msgID)
	h.Set("Webhook-Timestamp", strconv.FormatInt(ts, 10))
	h.Set("Webhook-Signature", signature.Standard(msgID, ts, body, keys...))
	return h, nil
}

// noAnswer says why a request got no answer; reached says the request
// was written or an answer began.
func (c *Checker) noAnswer(ctx context.Context, err error, reached bool) string {
	var dnsErr *net.DNSError
	switch {
	case errors.Is(err, netguard.ErrBlocked):
		return "the endpoint's address is not allowed (loopback, private, link-local or otherwise reserved)"
	case ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded):
		return fmt.Sprintf("no answer within %s", c.timeout)
	case errors.As(err, &dnsErr):
		return "the endpoint's host name does not resolve: " + dnsErr.Error()
	case reached && !answers.BrokenConnection(err):
		return "the endpoint's answer could not be read (headers over 64 KiB, or not valid HTTP): " + answers.Cause(err)
	}
	return "the request failed: " + answers.Cause(err)
}

// judge returns what is wrong with an answer, or "" when it is a 2xx that
// echoes value.
func judge(status int, body []byte, value string) string {
	if status < 200 || status > 299 {
		msg := "the endpoint answered " + statusText(status)
		if status >= 300 && status < 400 {
			msg += " (redirects are not followed)"
		}
		return msg + ", " + quote(body)
	}
	echoed, found := echoOf(body)
	switch {
	case echoed == value:
		return ""
	case found:
		return "the endpoint answered " + statusText(status) + " with another challenge than the one sent, " + quote(body)
	}
	return "the endpoint answered " + statusText(status) + " without echoing the challenge, " + quote(body)
}

// echoOf reads the echo from an answer: the "challenge" member of a JSON
// object, a JSON string, or the whole body. found is true when the body
// was a JSON object with a challenge member.
func echoOf(body []byte) (echo string, found bool) {
	trimmed := bytes.TrimSpace(body)
	var obj struct {
		Challenge *string `json:"challenge"`
	}
	if bytes.HasPrefix(trimmed, []byte("{")) && json.Unmarshal(trimmed, &obj) == nil {
		if obj.Challenge == nil {
			return "", false
		}
		return *obj.Challenge, true
	}
	var s string
	if bytes.HasPrefix(trimmed, []byte(`"`)) && json.Unmarshal(trimmed, &s) == nil {
		return s, false
	}
	return string(trimmed), false
}

func statusText(status int) string {
	if t := http.StatusText(status); t != "" {
		return strconv.Itoa(status) + " " + t
	}
	return strconv.Itoa(status)
}

// quote shows the beginning of a body, escaped so that the text stays
// printable whatever the endpoint sent.
func quote(body []byte) string {
	if len(body) == 0 {
		return "with an empty body"
	}
	s := string(body)
	more := ""
	if len(s) > quotedBytes {
		s, more = s[:quotedBytes], "..."
	}
	return "body " + strconv.Quote(strings.ToValidUTF8(s, "\uFFFD")) + more
}

// newChallenge returns 32 random bytes in unpadded URL-safe base64.
func newChallenge() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("challenge: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// Finisher records verification outcomes (webhook.Store).
type Finisher interface {
	FinishVerification(ctx context.Context, tenantID, id uuid.UUID, url, errText string, now time.Time) (webhook.Webhook, error)
}

// Settle checks the endpoint of w when its verification is pending,
// records the outcome with store and returns the webhook as it then is. A
// check or a record that could not finish (the caller went away, the
// database failed) leaves it pending, as it is stored, and is logged. The
// REST API and the console both call it after a change that (re)starts
// verification.
func (c *Checker) Settle(ctx context.Context, store Finisher, w webhook.Webhook, now time.Time, log *slog.Logger) webhook.Webhook {
	if w.Verification == nil || w.Verification.State != webhook.VerificationPending {
		return w
	}
	log = log.With("webhook_id", w.ID.String())
	res, err := c.Check(ctx, w)
	if err != nil {
		log.Warn("webhook verification not finished; it stays pending", "error", err)
		return w
	}
	got, err := store.FinishVerification(context.WithoutCancel(ctx), w.TenantID, w.ID, w.URL, res.Problem, now)
	if err != nil {
		log.Error("webhook verification outcome not recorded; it stays pending", "error", err,
			"verified", res.Verified(), "problem", res.Problem)
		return w
	}
	log.Info("webhook verification", "verified", res.Verified(), "status_code", res.StatusCode,
		"duration_ms", res.Duration.Milliseconds(), "problem", res.Problem)
	return got
}
