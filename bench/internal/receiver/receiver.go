// Package receiver is a webhook endpoint for demos, tests and load runs. A
// Receiver verifies both of hookline's signatures on every POST, answers the
// way its Config tells it to (succeed, fail, fail the first attempts, hang,
// rate-limit, or any fixed status) and counts what it saw, including
// duplicate deliveries. It implements http.Handler; GET /stats returns the
// counts as JSON.
package receiver

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/hookline/hookline/internal/signature"
	"github.com/hookline/hookline/internal/webhook"
)

// Mode is how a Receiver answers POSTs.
type Mode string

// The modes a Receiver can be told to answer in.
const (
	// ModeOK answers 200 at once.
	ModeOK Mode = "ok"
	// ModeFail answers 500.
	ModeFail Mode = "fail"
	// ModeFlaky answers 500 to the first Config.FailFirst requests of each
	// delivery (keyed on X-Webhook-Delivery), then 200.
	ModeFlaky Mode = "flaky"
	// ModeHang never answers: it holds the request until the client gives
	// up or the Receiver is closed.
	ModeHang Mode = "hang"
	// ModeRateLimit answers 429 (with Retry-After when Config.RetryAfter is
	// set).
	ModeRateLimit Mode = "429"
)

// DefaultTolerance is how far a signed timestamp may be from now.
const DefaultTolerance = 5 * time.Minute

const maxBody = 16 << 20

// Config tells a Receiver how to behave.
type Config struct {
	// Secrets are the whsec_ secrets to verify with; a signature is good when
	// it matches any of them (a rotation). Empty: signatures are not checked
	// and requests count as unverified.
	Secrets []string
	// Mode is how to answer. Default ModeOK.
	Mode Mode
	// Status, when non-zero, is the status code of every answer, whatever
	// the Mode. Default 0.
	Status int
	// FailFirst is how many requests of each delivery ModeFlaky fails.
	// Default 0 (none).
	FailFirst int
	// RetryAfter, when positive, is sent as Retry-After (seconds) with every
	// 429 or 503 answer. Default 0: no Retry-After header.
	RetryAfter int
	// RejectBadSignatures answers 401 to a request whose signatures do not
	// verify, instead of answering by Mode. Default false: bad signatures
	// are counted and logged only.
	RejectBadSignatures bool
	// Tolerance is how far a signed timestamp may be from now. Default
	// DefaultTolerance.
	Tolerance time.Duration
	// Logger gets one line per request. Default nil: no per-request lines.
	Logger *slog.Logger
	// Now is the clock used to check timestamps. Default time.Now.
	Now func() time.Time
}

// Stats are the counts of what a Receiver has seen.
type Stats struct {
	Requests           int64 `json:"requests"`            // POSTs received
	GoodSignatures     int64 `json:"good_signatures"`     // both signatures verified
	BadSignatures      int64 `json:"bad_signatures"`      // a signature missing or not verified
	Unverified         int64 `json:"unverified"`          // received while no secret was configured
	Succeeded          int64 `json:"succeeded"`           // answered 2xx
	Failed             int64 `json:"failed"`              // answered anything else
	Hung               int64 `json:"hung"`                // held in ModeHang
	Deliveries         int64 `json:"deliveries"`          // distinct X-Webhook-Delivery values
	Delivered          int64 `json:"delivered"`           // distinct deliveries answered 2xx
	DuplicateAttempts  int64 `json:"duplicate_attempts"`  // same delivery and attempt received again
	DuplicateSuccesses int64 `json:"duplicate_successes"` // a delivery answered 2xx again
}

// Receiver is an http.Handler that verifies, answers and counts webhook
// requests. Build it with New; it is safe for concurrent use.
type Receiver struct {
	cfg       Config
	closed    chan struct{}
	closeOnce sync.Once

	mu         sync.Mutex
	stats      Stats
	deliveries map[string]*deliveryState
}

type deliveryState struct {
	requests  int
	attempts  map[string]struct{}
	succeeded bool
}

// New validates cfg, fills its defaults and returns a Receiver.
func New(cfg Config) (*Receiver, error) {
	switch cfg.Mode {
	case "":
		cfg.Mode = ModeOK
	case ModeOK, ModeFail, ModeFlaky, ModeHang, ModeRateLimit:
	default:
		return nil, fmt.Errorf("unknown mode %q (want ok, fail, flaky, hang or 429)", cfg.Mode)
	}
	if cfg.Status != 0 && (cfg.Status < 100 || cfg.Status > 999) {
		return nil, fmt.Errorf("status %d is not an HTTP status code", cfg.Status)
	}
	if cfg.FailFirst < 0 || cfg.RetryAfter < 0 || cfg.Tolerance < 0 {
		return nil, errors.New("fail-first, retry-after and tolerance must not be negative")
	}
	for i, s := range cfg.Secrets {
		if _, err := webhook.DecodeSecret(s); err != nil {
			return nil, fmt.Errorf("secret %d: %w", i+1, err)
		}
	}
	if cfg.Tolerance == 0 {
		cfg.Tolerance = DefaultTolerance
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Receiver{cfg: cfg, closed: make(chan struct{}), deliveries: make(map[string]*deliveryState)}, nil
}

// Stats returns a snapshot of the counts.
func (rc *Receiver) Stats() Stats {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.stats
}

// Close releases requests held in ModeHang (they are answered 503), so that
// a server can shut down. Later requests in ModeHang are answered at once.
func (rc *Receiver) Close() {
	rc.closeOnce.Do(func() { close(rc.closed) })
}

// ServeHTTP verifies, counts and answers one request.
func (rc *Receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet && r.URL.Path == "/stats" {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(rc.Stats())
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	delivery, attempt := r.Header.Get("X-Webhook-Delivery"), r.Header.Get("X-Webhook-Attempt")
	v, verr := rc.check(w, r)

	rc.mu.Lock()
	status := rc.record(delivery, attempt, v)
	rc.mu.Unlock()

	if rc.cfg.Logger != nil {
		attrs := []any{"method", r.Method, "path", r.URL.Path, "webhook", r.Header.Get("X-Webhook-ID"),
			"event", r.Header.Get("X-Webhook-Event"), "delivery", delivery, "attempt", attempt,
			"verdict", string(v), "status", statusText(status)}
		if verr != nil {
			attrs = append(attrs, "error", verr.Error())
		}
		rc.cfg.Logger.Info("request", attrs...)
	}
	rc.answer(w, r, status)
}

// verdict is the outcome of checking a request's signatures.
type verdict string

const (
	verdictGood       verdict = "good"
	verdictBad        verdict = "bad"
	verdictUnverified verdict = "unverified"
)

// check reads the body and verifies both signatures.
func (rc *Receiver) check(w http.ResponseWriter, r *http.Request) (verdict, error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		return verdictBad, fmt.Errorf("read body: %w", err)
	}
	if len(rc.cfg.Secrets) == 0 {
		return verdictUnverified, nil
	}
	if err := rc.verify(r.Header, body); err != nil {
		return verdictBad, err
	}
	return verdictGood, nil
}

// statusHang is the status record returns for a request to hold.
const statusHang = 0

// record counts one POST and decides its answer. rc.mu must be held.
func (rc *Receiver) record(delivery, attempt string, v verdict) int {
	rc.stats.Requests++
	switch v {
	case verdictGood:
		rc.stats.GoodSignatures++
	case verdictUnverified:
		rc.stats.Unverified++
	default:
		rc.stats.BadSignatures++
	}
	d := rc.deliveries[delivery]
	if d == nil {
		d = &deliveryState{attempts: make(map[string]struct{}, 1)}
		rc.deliveries[delivery] = d
		rc.stats.Deliveries++
	}
	d.requests++
	if _, seen := d.attempts[attempt]; seen {
		rc.stats.DuplicateAttempts++
	}
	d.attempts[attempt] = struct{}{}

	status := rc.status(d, v)
	switch {
	case status == statusHang:
		rc.stats.Hung++
	case status >= 200 && status < 300:
		rc.stats.Succeeded++
		if d.succeeded {
			rc.stats.DuplicateSuccesses++
		} else {
			rc.stats.Delivered++
		}
		d.succeeded = true
	default:
		rc.stats.Failed++
	}
	return status
}

// status decides the answer to the d.requests-th request of a delivery.
func (rc *Receiver) status(d *deliveryState, v verdict) int {
	if rc.cfg.RejectBadSignatures && v == verdictBad {
		return http.StatusUnauthorized
	}
	if rc.cfg.Status != 0 {
		return rc.cfg.Status
	}
	switch rc.cfg.Mode {
	case ModeFail:
		return http.StatusInternalServerError
	case ModeFlaky:
		if d.requests <= rc.cfg.FailFirst {
			return http.StatusInternalServerError
		}
		return http.StatusOK
	case ModeHang:
		return statusHang
	case ModeRateLimit:
		return http.StatusTooManyRequests
	default:
		return http.StatusOK
	}
}

func (rc *Receiver) answer(w http.ResponseWriter, r *http.Request, status int) {
	if status == statusHang {
		select {
		case <-r.Context().Done():
			return
		case <-rc.closed:
			http.Error(w, "receiver closed", http.StatusServiceUnavailable)
			return
		}
	}
	if rc.cfg.RetryAfter > 0 && (status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable) {
		w.Header().Set("Retry-After", strconv.Itoa(rc.cfg.RetryAfter))
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, http.StatusText(status)+"\n")
}

// verify checks both signatures; each must match one of the secrets.
func (rc *Receiver) verify(h http.Header, body []byte) error {
	now := rc.cfg.Now()
	err := rc.anySecret(func(secret string) error {
		return signature.VerifyStandard(secret, h.Get("webhook-id"), h.Get("webhook-timestamp"),
			h.Get("webhook-signature"), body, now, rc.cfg.Tolerance)
	})
	if err != nil {
		return fmt.Errorf("webhook-signature: %w", err)
	}
	err = rc.anySecret(func(secret string) error {
		return signature.VerifyLegacy(secret, h.Get("X-Webhook-Signature"), body, now, rc.cfg.Tolerance)
	})
	if err != nil {
		return fmt.Errorf("X-Webhook-Signature: %w", err)
	}
	return nil
}

// anySecret returns nil when verify accepts any secret, else its first error.
func (rc *Receiver) anySecret(verify func(secret string) error) error {
	var first error
	for _, s := range rc.cfg.Secrets {
		err := verify(s)
		if err == nil {
			return nil
		}
		if first == nil {
			first = err
		}
	}
	return first
}

func statusText(status int) string {
	if status == statusHang {
		return "hang"
	}
	return strconv.Itoa(status)
}
