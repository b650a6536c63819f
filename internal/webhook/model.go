// Package webhook holds webhook endpoints: their model and defaults, the
// validation of what tenants register, event filters, signing secrets and
// the Postgres store.
package webhook

import (
	"encoding/json"
	"time"

	"github.com/google/uuid"

	"github.com/hookline/hookline/internal/breaker"
)

// Ordering guarantees a webhook may ask for.
const (
	OrderingNone         = "none"
	OrderingPerEventType = "per_event_type"
	OrderingStrict       = "strict"
)

// Webhook is an endpoint registered by a tenant. Secret fields are never
// serialised by default; responses that may show the secret set it
// explicitly (see Created).
type Webhook struct {
	ID                   uuid.UUID     `json:"id"`
	TenantID             uuid.UUID     `json:"-"`
	URL                  string        `json:"url"`
	Events               []string      `json:"events"`
	Filter               string        `json:"filter"` // a CEL payload filter (package filter); empty for none
	Active               bool          `json:"active"`
	RetryConfig          RetryConfig   `json:"retry_config"`
	CircuitBreakerConfig BreakerConfig `json:"circuit_breaker_config"`
	RateLimit            RateLimit     `json:"rate_limit"`
	OrderingGuarantee    string        `json:"ordering_guarantee"`
	// Headers hold the real values, which deliveries and verifications
	// send; JSON shows them masked (see Headers).
	Headers  Headers         `json:"headers"`
	Metadata json.RawMessage `json:"metadata"`
	// Verification is the endpoint verification asked for by verify_url;
	// nil when none was.
	Verification *Verification `json:"verification"`
	// TracePropagation sends the trace context of each attempt
	// (traceparent, tracestate) with the deliveries when tracing is on, so
	// that the endpoint's tracing continues the trace. Default true.
	TracePropagation bool `json:"trace_propagation"`
	// AutoDisable is the webhook's own setting for being disabled
	// automatically when it keeps failing.
	AutoDisable AutoDisable `json:"auto_disable"`
	// DisabledReason says why an inactive webhook is disabled (Disabled*
	// constants); empty while it is active. DisabledAt is when.
	DisabledReason string     `json:"disabled_reason"`
	DisabledAt     *time.Time `json:"disabled_at"`
	CreatedAt      time.Time  `json:"created_at"`
	UpdatedAt      time.Time  `json:"updated_at"`
	// ClearedHeaders names the custom headers whose values an update
	// removed because the URL moved to another origin without them
	// (see Origin); only in the answer to that update.
	ClearedHeaders []string `json:"cleared_headers,omitempty"`

	Secret                  string     `json:"-"`
	PreviousSecret          string     `json:"-"`
	PreviousSecretExpiresAt *time.Time `json:"-"`
}

// Why a webhook is disabled: paused by its tenant (a create or update
// with active false), or by hookline because the endpoint kept failing.
const (
	DisabledManual = "manual"
	DisabledAuto   = "auto_disabled"
)

// AutoDisable is a webhook's setting for being disabled automatically.
type AutoDisable struct {
	// FailingForMS: the webhook is disabled once it has failed without a
	// single success for this long; 0 never; nil takes its tenant's
	// setting.
	FailingForMS *int64 `json:"failing_for_ms"`
}

// Headers are a webhook's custom request headers. Their values are often
// the endpoint's credentials (Authorization, an API key), so they are
// treated like the signing secret: sealed at rest (see SealHeaders) and
// never serialised in clear. MarshalJSON masks every value, so that every
// API and console response, whatever its shape, shows only the masked form;
// code that sends them ranges over the map.
type Headers map[string]string

// MarshalJSON writes the header names with masked values (MaskHeaderValue).
func (h Headers) MarshalJSON() ([]byte, error) {
	masked := make(map[string]string, len(h))
	for name, v := range h {
		masked[name] = MaskHeaderValue(v)
	}
	return json.Marshal(masked)
}

// A masked header value shows maskShown characters of a value of at least
// maskMinLen characters ("Bear…" for a bearer token), and nothing of a
// shorter one ("****"), which a few characters would give away.
const (
	maskShown  = 4
	maskMinLen = 12
	maskShort  = "****"
)

// MaskHeaderValue is how responses show a header value: its first four
// characters and "…" when it has at least twelve, "****" otherwise.
func MaskHeaderValue(v string) string {
	r := []rune(v)
	if len(r) < maskMinLen {
		return maskShort
	}
	return string(r[:maskShown]) + "…"
}

// RetryConfig says how often and how patiently a delivery is retried.
type RetryConfig struct {
	MaxAttempts         int     `json:"max_attempts"`
	BaseDelayMS         int64   `json:"base_delay_ms"`
	MaxDelayMS          int64   `json:"max_delay_ms"`
	BackoffMultiplier   float64 `json:"backoff_multiplier"`
	TimeoutMS           int64   `json:"timeout_ms"`
	TimeoutGrowthFactor float64 `json:"timeout_growth_factor"`
	// ScheduleMS, when not empty, replaces the exponential formula: retry n
	// waits ScheduleMS[n-1] (the last value repeats).
	ScheduleMS []int64 `json:"schedule_ms"`
}

// BreakerConfig tunes the per-webhook circuit breaker.
type BreakerConfig struct {
	Enabled                  bool  `json:"enabled"`
	ErrorThresholdPercentage int   `json:"error_threshold_percentage"`
	MinimumThroughput        int   `json:"minimum_throughput"`
	WindowSizeMS             int64 `json:"window_size_ms"`
	SleepWindowMS            int64 `json:"sleep_window_ms"`
	HalfOpenMaxCalls         int   `json:"half_open_max_calls"`
	HalfOpenSuccessThreshold int   `json:"half_open_success_threshold"`
}

// RateLimit is the webhook's token bucket.
type RateLimit struct {
	RequestsPerMinute int `json:"requests_per_minute"`
	Burst             int `json:"burst"`
}

// DefaultRetryConfig is applied when a webhook is created without one:
// 5 attempts, 1 s base doubling up to 300 s, 30 s timeout.
func DefaultRetryConfig() RetryConfig {
	return RetryConfig{
		MaxAttempts:         5,
		BaseDelayMS:         1000,
		MaxDelayMS:          300_000,
		BackoffMultiplier:   2,
		TimeoutMS:           30_000,
		TimeoutGrowthFactor: 1.5,
		ScheduleMS:          []int64{},
	}
}

// Breaker converts the stored settings into the breaker's own; the worker,
// the API and the console use the same conversion.
func (c BreakerConfig) Breaker() breaker.Config {
	return breaker.Config{
		ErrorThresholdPercentage: c.ErrorThresholdPercentage,
		MinimumThroughput:        c.MinimumThroughput,
		Window:                   time.Duration(c.WindowSizeMS) * time.Millisecond,
		SleepWindow:              time.Duration(c.SleepWindowMS) * time.Millisecond,
		HalfOpenMaxCalls:         c.HalfOpenMaxCalls,
		HalfOpenSuccessThreshold: c.HalfOpenSuccessThreshold,
		MaxSleepWindow:           time.Hour,
	}
}

// DefaultBreakerConfig is applied when a webhook is created without one.
func DefaultBreakerConfig() BreakerConfig {
	return BreakerConfig{
		Enabled:                  true,
		ErrorThresholdPercentage: 60,
		MinimumThroughput:        20,
		WindowSizeMS:             60_000,
		SleepWindowMS:            30_000,
		HalfOpenMaxCalls:         5,
		HalfOpenSuccessThreshold: 60,
	}
}

// Verification states. A webhook whose verification is pending or failed
// receives nothing: its deliveries wait, without an attempt, until it is
// verified (or the verification is no longer asked for).
const (
	VerificationPending  = "pending"
	VerificationVerified = "verified"
	VerificationFailed   = "failed"
)

// Verification is the state of a webhook's endpoint verification: a
// signed challenge the endpoint must echo (see package verify).
type Verification struct {
	State string `json:"state"`
	// VerifiedAt is when the endpoint last echoed the challenge; nil
	// unless the state is verified.
	VerifiedAt *time.Time `json:"verified_at"`
	// LastError says what the endpoint answered when the last check
	// failed; nil unless the state is failed.
	LastError *string `json:"last_error"`
}

// AwaitsVerification reports whether a webhook in verification state
// (empty when none is asked for) must not be delivered to yet.
func AwaitsVerification(state string) bool {
	return state == VerificationPending || state == VerificationFailed
}
