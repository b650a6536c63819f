package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/hookline/hookline/internal/fielderr"
	"github.com/hookline/hookline/internal/netguard"
)

// Input is a create, replace or patch request. A nil field was not given.
type Input struct {
	URL                  *string            `json:"url"`
	Events               []string           `json:"events"`
	Filter               *string            `json:"filter"`
	Secret               *string            `json:"secret"`
	Active               *bool              `json:"active"`
	RetryConfig          *RetryInput        `json:"retry_config"`
	CircuitBreakerConfig *BreakerInput      `json:"circuit_breaker_config"`
	RateLimit            *RateLimitInput    `json:"rate_limit"`
	OrderingGuarantee    *string            `json:"ordering_guarantee"`
	Headers              *map[string]string `json:"headers"`
	Metadata             json.RawMessage    `json:"metadata"`
	// VerifyURL true (re)starts endpoint verification; false stops asking
	// for it (see Build).
	VerifyURL        *bool             `json:"verify_url"`
	TracePropagation *bool             `json:"trace_propagation"`
	AutoDisable      *AutoDisableInput `json:"auto_disable"`
}

// AutoDisableInput is a partial AutoDisable. FailingForMS is kept as
// given, so that null (back to the tenant's setting) is told from left
// out.
type AutoDisableInput struct {
	FailingForMS json.RawMessage `json:"failing_for_ms"`
}

// RetryInput is a partial RetryConfig.
type RetryInput struct {
	MaxAttempts         *int     `json:"max_attempts"`
	BaseDelayMS         *int64   `json:"base_delay_ms"`
	MaxDelayMS          *int64   `json:"max_delay_ms"`
	BackoffMultiplier   *float64 `json:"backoff_multiplier"`
	TimeoutMS           *int64   `json:"timeout_ms"`
	TimeoutGrowthFactor *float64 `json:"timeout_growth_factor"`
	ScheduleMS          *[]int64 `json:"schedule_ms"`
}

// BreakerInput is a partial BreakerConfig.
type BreakerInput struct {
	Enabled                  *bool  `json:"enabled"`
	ErrorThresholdPercentage *int   `json:"error_threshold_percentage"`
	MinimumThroughput        *int   `json:"minimum_throughput"`
	WindowSizeMS             *int64 `json:"window_size_ms"`
	SleepWindowMS            *int64 `json:"sleep_window_ms"`
	HalfOpenMaxCalls         *int   `json:"half_open_max_calls"`
	HalfOpenSuccessThreshold *int   `json:"half_open_success_threshold"`
}

// RateLimitInput is a partial RateLimit.
type RateLimitInput struct {
	RequestsPerMinute *int `json:"requests_per_minute"`
	Burst             *int `json:"burst"`
}

// Rules are the deployment settings that validation depends on.
type Rules struct {
	RequireHTTPS     bool
	Network          netguard.Policy
	Resolver         netguard.Resolver
	DefaultRateLimit RateLimit
}

const (
	maxURLLen        = 2048
	maxHeaders       = 20
	maxHeaderNameLen = 256
	maxHeaderValLen  = 4096
	maxMetadataBytes = 8 << 10
	resolveTimeout   = 2 * time.Second
)

// reservedHeaders are set by the delivery itself (or by the HTTP client)
// and may not be overridden; so may no X-Webhook-* or Webhook-* header,
// the namespaces of our signatures.
var reservedHeaders = map[string]bool{
	"Content-Type": true, "Content-Length": true, "User-Agent": true, "Host": true,
	"Connection": true, "Transfer-Encoding": true, "Te": true, "Trailer": true,
	"Upgrade": true, "Keep-Alive": true, "Proxy-Connection": true, "Expect": true,
	"Webhook-Id": true, "Webhook-Timestamp": true, "Webhook-Signature": true,
	"X-Idempotency-Key": true, "X-Correlation-Id": true,
}

// Build applies in to base (a zero Webhook for a create, the stored one for a
// patch), fills defaults, and validates the result. The returned webhook is
// complete and valid; nothing in base is modified. A URL moved to another
// origin than base's keeps only the header values given again (see
// Origin); ClearedHeaders names the others.
func (r Rules) Build(ctx context.Context, base Webhook, in Input, creating bool) (Webhook, error) {
	w := base
	if creating {
		w.Active = true
		w.RetryConfig = DefaultRetryConfig()
		w.CircuitBreakerConfig = DefaultBreakerConfig()
		w.RateLimit = r.DefaultRateLimit
		w.OrderingGuarantee = OrderingNone
		w.TracePropagation = true
		w.Headers = map[string]string{}
		w.Metadata = json.RawMessage(`{}`)
		if in.URL == nil {
			return Webhook{}, fielderr.New("url", "is required")
		}
		if in.Events == nil {
			return Webhook{}, fielderr.New("events", "is required")
		}
	}
	if in.URL != nil {
		u, err := r.checkURL(ctx, *in.URL)
		if err != nil {
			return Webhook{}, err
		}
		w.URL = u
	}
	w.Verification = verificationOf(base, w.URL, in.VerifyURL)
	if in.Events != nil {
		events, err := validateFilters(in.Events)
		if err != nil {
			return Webhook{}, fielderr.New("events", "%s", err.Error())
		}
		w.Events = events
	}
	if in.Filter != nil {
		f, err := checkFilter(*in.Filter)
		if err != nil {
			return Webhook{}, err
		}
		w.Filter = f
	}
	if in.Secret != nil {
		if creating {
			if _, err := DecodeSecret(*in.Secret); err != nil {
				return Webhook{}, fielderr.New("secret", "%s", err.Error())
			}
			w.Secret = *in.Secret
		} else {
			return Webhook{}, fielderr.New("secret", "cannot be changed by an update; use POST /v1/webhooks/{id}/secret/rotate")
		}
	}
	if creating && w.Secret == "" {
		w.Secret = NewSecret()
	}
	if in.Active != nil {
		w.Active = *in.Active
	}
	if in.TracePropagation != nil {
		w.TracePropagation = *in.TracePropagation
	}
	if in.AutoDisable != nil {
		ad, err := mergeAutoDisable(w.AutoDisable, *in.AutoDisable)
		if err != nil {
			return Webhook{}, err
		}
		w.AutoDisable = ad
	}
	if in.OrderingGuarantee != nil {
		switch *in.OrderingGuarantee {
		case OrderingNone, OrderingPerEventType, OrderingStrict:
			w.OrderingGuarantee = *in.OrderingGuarantee
		default:
			return Webhook{}, fielderr.New("ordering_guarantee", "must be none, per_event_type or strict, got %q", *in.OrderingGuarantee)
		}
	}
	if in.Headers != nil {
		h, err := checkHeaders(*in.Headers)
		if err != nil {
			return Webhook{}, err
		}
		w.Headers = h
	}
	w.ClearedHeaders = nil
	if base.URL != "" && Origin(w.URL) != Origin(base.URL) {
		w.Headers, w.ClearedHeaders = headersForNewOrigin(w.Headers, in.Headers)
	}
	if in.Metadata != nil {
		m, err := checkMetadata(in.Metadata)
		if err != nil {
			return Webhook{}, err
		}
		w.Metadata = m
	}
	if in.RetryConfig != nil {
		rc, err := mergeRetry(w.RetryConfig, *in.RetryConfig)
		if err != nil {
			return Webhook{}, err
		}
		w.RetryConfig = rc
	}
	if in.CircuitBreakerConfig != nil {
		bc, err := mergeBreaker(w.CircuitBreakerConfig, *in.CircuitBreakerConfig)
		if err != nil {
			return Webhook{}, err
		}
		w.CircuitBreakerConfig = bc
	}
	if in.RateLimit != nil {
		rl, err := mergeRateLimit(w.RateLimit, *in.RateLimit)
		if err != nil {
			return Webhook{}, err
		}
		w.RateLimit = rl
	}
	return w, nil
}

// verificationOf is the verification of a webhook built from base with
// url: verify_url true starts one (pending until the endpoint has echoed a
// challenge), false drops it, and leaving it out keeps base's, unless the
// url changed: what was verified was the old one, so the new one is
// verified again.
func verificationOf(base Webhook, url string, verify *bool) *Verification {
	switch {
	case verify != nil && *verify:
		return &Verification{State: VerificationPending}
	case verify != nil:
		return nil
	case base.Verification != nil && url != base.URL:
		return &Verification{State: VerificationPending}
	}
	return base.Verification
}

func (r Rules) checkURL(ctx context.Context, raw string) (string, error) {
	raw = strings.TrimSpace(raw)
	if raw == "" {
		return "", fielderr.New("url", "is required")
	}
	if len(raw) > maxURLLen {
		return "", fielderr.New("url", "must be at most %d characters, got %d", maxURLLen, len(raw))
	}
	if err := fielderr.Text("url", raw); err != nil {
		return "", err
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", fielderr.New("url", "is not a valid URL")
	}
	switch u.Scheme {
	case "https":
	case "http":
		if r.RequireHTTPS {
			return "", fielderr.New("url", "must use https")
		}
	default:
		return "", fielderr.New("url", "scheme must be http or https, got %q", u.Scheme)
	}
	if u.Hostname() == "" {
		return "", fielderr.New("url", "must name a host")
	}
	if port := u.Port(); port != "" {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return "", fielderr.New("url", "port must be between 1 and 65535, got %q", port)
		}
	}
	if u.User != nil {
		return "", fielderr.New("url", "must not carry credentials; use headers instead")
	}
	if u.Fragment != "" {
		return "", fielderr.New("url", "must not have a fragment")
	}
	if err := r.Network.CheckHost(ctx, r.Resolver, u.Hostname(), resolveTimeout); err != nil {
		return "", fielderr.New("url", "%s (private and loopback addresses are refused unless ALLOW_PRIVATE_NETWORKS is set)", err.Error())
	}
	return u.String(), nil
}

func checkHeaders(in map[string]string) (map[string]string, error) {
	if len(in) > maxHeaders {
		return nil, fielderr.New("headers", "at most %d headers, got %d", maxHeaders, len(in))
	}
	out := make(map[string]string, len(in))
	for name, value := range in {
		field := "headers." + name
		if name == "" || len(name) > maxHeaderNameLen || !isToken(name) {
			return nil, fielderr.New(field, "is not a valid header name")
		}
		canon := http.CanonicalHeaderKey(name)
		if reservedHeaders[canon] || strings.HasPrefix(canon, "X-Webhook-") || strings.HasPrefix(canon, "Webhook-") {
			return nil, fielderr.New(field, "is set by the delivery itself and cannot be overridden")
		}
		if len(value) > maxHeaderValLen {
			return nil, fielderr.New(field, "value must be at most %d characters", maxHeaderValLen)
		}
		if !utf8.ValidString(value) {
			return nil, fielderr.New(field, "value must be valid UTF-8")
		}
		for _, c := range value {
			if c == '\r' || c == '\n' || c == 0 || (c < ' ' && c != '\t') || c == 0x7f {
				return nil, fielderr.New(field, "value must not contain control characters (CR, LF, NUL)")
			}
		}
		if _, dup := out[canon]; dup {
			return nil, fielderr.New(field, "is given twice with different case")
		}
		out[canon] = value
	}
	return out, nil
}

// isToken reports whether s is an RFC 9110 token.
func isToken(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

func checkMetadata(raw json.RawMessage) (json.RawMessage, error) {
	if len(raw) > maxMetadataBytes {
		return nil, fielderr.New("metadata", "must be at most %d bytes", maxMetadataBytes)
	}
	// Check the shape without decoding values: a round trip through
	// map[string]any would turn every number into a float64 and corrupt
	// integers above 2^53 (ids, amounts in minor units).
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil || obj == nil {
		return nil, fielderr.New("metadata", "must be a JSON object")
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, raw); err != nil {
		return nil, fielderr.New("metadata", "must be a JSON object")
	}
	// metadata is jsonb: Postgres refuses \u0000, lone surrogate escapes
	// and invalid UTF-8 in it, which Go's decoder lets through.
	if err := fielderr.JSONText("metadata", compact.Bytes()); err != nil {
		return nil, err
	}
	return compact.Bytes(), nil
}

// Bounds of an auto-disable window other than 0 (never).
const (
	MinAutoDisableMS = 1000
	MaxAutoDisableMS = 90 * 24 * 60 * 60 * 1000
)

// CheckAutoDisableMS validates a window of field: 0 (never), or
// MinAutoDisableMS to MaxAutoDisableMS.
func CheckAutoDisableMS(field string, ms int64) *fielderr.Error {
	if ms != 0 && (ms < MinAutoDisableMS || ms > MaxAutoDisableMS) {
		return fielderr.New(field, "must be 0 (never) or between %d and %d", MinAutoDisableMS, MaxAutoDisableMS)
	}
	return nil
}

func mergeAutoDisable(base AutoDisable, in AutoDisableInput) (AutoDisable, error) {
	const field = "auto_disable.failing_for_ms"
	switch raw := bytes.TrimSpace(in.FailingForMS); {
	case len(raw) == 0:
	case string(raw) == "null":
		base.FailingForMS = nil
	default:
		var ms int64
		if err := json.Unmarshal(raw, &ms); err != nil {
			return AutoDisable{}, fielderr.New(field, "must be an integer number of milliseconds or null")
		}
		if err := CheckAutoDisableMS(field, ms); err != nil {
			return AutoDisable{}, err
		}
		base.FailingForMS = &ms
	}
	return base, nil
}
