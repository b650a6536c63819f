// Package retry is the retry policy of a delivery (docs/DESIGN.md §6): it
// classifies failed attempts, decides whether another attempt follows, and
// computes the backoff before it and the timeout of each attempt.
//
// Everything here is pure: no clock other than the one passed in, no global
// random source (callers pass the jitter source), no I/O.
package retry

import (
	"fmt"
	"math"
	"net/http"
	"strings"
	"time"
)

// Category is a failure_category value, recorded with every failed attempt.
type Category string

// The failure categories of docs/DESIGN.md §6.
const (
	// Timeout: the attempt's timeout elapsed before a response arrived.
	Timeout Category = "timeout"
	// ServerError: the endpoint answered 5xx.
	ServerError Category = "server_error"
	// ClientError: the endpoint answered 1xx, 3xx or a 4xx other than 413
	// and 429.
	ClientError Category = "client_error"
	// Network: the connection failed or broke (refused, reset, EOF).
	Network Category = "network"
	// DNS: the endpoint host did not resolve.
	DNS Category = "dns"
	// SSL: the TLS handshake or certificate verification failed.
	SSL Category = "ssl"
	// RateLimit: the endpoint answered 429.
	RateLimit Category = "rate_limit"
	// PayloadTooLarge: the endpoint answered 413.
	PayloadTooLarge Category = "payload_too_large"
	// CircuitOpen: the webhook's circuit breaker refused the attempt.
	CircuitOpen Category = "circuit_open"
	// SSRFBlocked: the endpoint resolved to an address deliveries may not
	// reach.
	SSRFBlocked Category = "ssrf_blocked"
)

// maxTLSRetries is how many times a TLS failure is retried (docs/DESIGN.md §6).
const maxTLSRetries = 3

// maxRetryAfter caps an absurd Retry-After.
const maxRetryAfter = 24 * time.Hour

// maxDuration is the largest time.Duration, the cap when none is configured.
const maxDuration = time.Duration(math.MaxInt64)

// minimumDelay is the smallest delay before retrying after a failure of the
// category (docs/DESIGN.md §6); categories not listed have none.
var minimumDelay = map[Category]time.Duration{
	RateLimit: 60 * time.Second,
	DNS:       5 * time.Second,
	Timeout:   2 * time.Second,
}

// Policy is a webhook's retry configuration in Go units.
//
// A MaxDelay of zero or less means no cap; a Multiplier or TimeoutGrowth
// below 1 (or NaN) counts as 1, so delays and timeouts never shrink.
type Policy struct {
	// MaxAttempts is the number of attempts, the first one included.
	MaxAttempts int
	// BaseDelay is the delay before the first retry, before jitter.
	BaseDelay time.Duration
	// MaxDelay caps the computed delay (before jitter) and a Retry-After.
	MaxDelay time.Duration
	// Multiplier grows the delay from one retry to the next.
	Multiplier float64
	// Schedule, when not empty, replaces the formula: retry n waits
	// Schedule[n-1], the last value repeating.
	Schedule []time.Duration
	// Timeout is the per-attempt timeout of attempt 1.
	Timeout time.Duration
	// TimeoutGrowth multiplies each attempt's timeout from the previous
	// one's, capped at 3 x Timeout.
	TimeoutGrowth float64
}

// CategoryOfStatus classifies a non-2xx HTTP status: 429 rate_limit, 413
// payload_too_large, 5xx server_error, everything else (3xx, other 4xx, 1xx)
// client_error.
func CategoryOfStatus(status int) Category {
	switch {
	case status == http.StatusTooManyRequests:
		return RateLimit
	case status == http.StatusRequestEntityTooLarge:
		return PayloadTooLarge
	case status >= 500 && status <= 599:
		return ServerError
	default:
		return ClientError
	}
}

// Permanent reports whether a status must not be retried: 400, 401, 403,
// 404, 410, 413, 414, 415, 451.
func Permanent(status int) bool {
	switch status {
	case http.StatusBadRequest,
		http.StatusUnauthorized,
		http.StatusForbidden,
		http.StatusNotFound,
		http.StatusGone,
		http.StatusRequestEntityTooLarge,
		http.StatusRequestURITooLong,
		http.StatusUnsupportedMediaType,
		http.StatusUnavailableForLegalReasons:
		return true
	}
	return false
}

// Outcome is what one attempt produced. StatusCode is 0 when no response
// arrived (Category then says why). RetryAfter is the parsed Retry-After of
// a 429 or 503 (0 when absent).
type Outcome struct {
	// StatusCode is the HTTP status, 0 when no response arrived.
	StatusCode int
	// Category classifies a failure; empty on success.
	Category Category
	// RetryAfter is the endpoint's Retry-After on a 429 or 503, else 0.
	RetryAfter time.Duration
}

// Succeeded reports a 2xx.
func (o Outcome) Succeeded() bool {
	return o.StatusCode >= 200 && o.StatusCode <= 299
}

// Decision is what follows an attempt.
type Decision struct {
	// Succeeded is set for a 2xx: the delivery is done.
	Succeeded bool
	// Retry is set when another attempt is to be scheduled after Delay.
	Retry bool
	// Delay is the wait before the next attempt when Retry is set.
	Delay time.Duration
	// Exhausted is set when no attempt follows: a permanent failure,
	// max_attempts reached, or TLS errors retried 3 times.
	Exhausted bool
	// Reason is a short human reason for an exhausted decision ("permanent
	// status 404", "max attempts (5) reached", "TLS failed 4 times").
	Reason string
}

// Decide applies docs/DESIGN.md §6: 2xx success; permanent statuses exhausted at once;
// TLS (ssl) errors retry at most 3 times (so attempt 4 with ssl is
// exhausted); otherwise retry while attempt < MaxAttempts. attempt is the
// 1-based number of the attempt that produced o. rnd returns a float in
// [0,1) (jitter source; tests pass a fixed one).
//
// The TLS limit counts attempts, not TLS failures: an ssl failure on attempt
// 4 or later is final whatever the earlier attempts failed with.
func (p Policy) Decide(o Outcome, attempt int, rnd func() float64) Decision {
	switch {
	case o.Succeeded():
		return Decision{Succeeded: true}
	case Permanent(o.StatusCode):
		return exhausted(fmt.Sprintf("permanent status %d", o.StatusCode))
	case o.Category == SSL && attempt > maxTLSRetries:
		return exhausted(fmt.Sprintf("TLS failed %d times", attempt))
	case attempt >= p.MaxAttempts:
		return exhausted(fmt.Sprintf("max attempts (%d) reached", p.MaxAttempts))
	}
	return Decision{Retry: true, Delay: p.Backoff(attempt, o.Category, o.RetryAfter, rnd)}
}

// exhausted is a final decision with its reason.
func exhausted(reason string) Decision {
	return Decision{Exhausted: true, Reason: reason}
}

// Backoff is the delay before retry n (n = 1 for the first retry):
// BaseDelay x Multiplier^(n-1) capped at MaxDelay, then +/-25 % jitter
// (rnd()=0 -> -25 %, 0.5 -> 0, just under 1 -> +25 %). With a Schedule, the
// schedule value without jitter. Minimums by category after that:
// rate_limit 60 s, dns 5 s, timeout 2 s. A Retry-After (retryAfter > 0, only
// meaningful on 429/503 — the caller passes 0 otherwise) replaces both the
// computed delay and the minimum, capped at MaxDelay. Never negative.
//
// As docs/DESIGN.md §6 orders it, jitter comes after the cap, so a capped delay may
// end up to 25 % above MaxDelay. n below 1 counts as 1; a nil rnd means no
// jitter.
func (p Policy) Backoff(n int, cat Category, retryAfter time.Duration, rnd func() float64) time.Duration {
	if retryAfter > 0 {
		return min(retryAfter, p.delayCap())
	}
	n = max(n, 1)
	var d time.Duration
	if len(p.Schedule) > 0 {
		d = max(p.Schedule[min(n, len(p.Schedule))-1], 0)
	} else {
		d = jitter(p.exponential(n), rnd)
	}
	return max(d, minimumDelay[cat])
}

// delayCap is MaxDelay, or the largest duration when none is set.
func (p Policy) delayCap() time.Duration {
	if p.MaxDelay <= 0 {
		return maxDuration
	}
	return p.MaxDelay
}

// exponential is BaseDelay x Multiplier^(n-1) capped at MaxDelay, computed in
// float64 so that a large n saturates at the cap instead of overflowing.
func (p Policy) exponential(n int) time.Duration {
	return grow(p.BaseDelay, atLeastOne(p.Multiplier), n-1, p.delayCap())
}

// grow is d x factor^steps, capped at limit; a d of zero or less gives 0.
// factor is at least 1 and d positive, so the float product is finite or
// +Inf, and the comparison with the cap catches +Inf before the conversion
// back to a Duration.
func grow(d time.Duration, factor float64, steps int, limit time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	f := float64(d) * math.Pow(factor, float64(steps))
	if !(f < float64(limit)) {
		return limit
	}
	return time.Duration(f)
}

// atLeastOne is f, or 1 when f is below 1 or NaN: delays and timeouts never
// shrink from one attempt to the next.
func atLeastOne(f float64) float64 {
	if !(f >= 1) {
		return 1
	}
	return f
}

// jitter spreads d by +/-25 %: r = 0 gives 0.75 d, 0.5 gives d, just under 1
// gives 1.25 d. r outside [0,1) is clamped; a nil rnd leaves d unchanged.
func jitter(d time.Duration, rnd func() float64) time.Duration {
	if rnd == nil || d <= 0 {
		return d
	}
	r := rnd()
	if math.IsNaN(r) || r < 0 {
		r = 0
	}
	r = min(r, 1)
	f := float64(d) * (0.75 + 0.5*r)
	if f >= float64(maxDuration) {
		return maxDuration
	}
	return time.Duration(f)
}

// AttemptTimeout is the timeout of 1-based attempt n: Timeout x
// TimeoutGrowth^(n-1), capped at 3 x Timeout. n below 1 counts as 1; a
// Timeout of zero or less gives 0 (no policy timeout).
func (p Policy) AttemptTimeout(n int) time.Duration {
	if p.Timeout <= 0 {
		return 0
	}
	limit := maxDuration
	if p.Timeout <= maxDuration/3 {
		limit = 3 * p.Timeout
	}
	return grow(p.Timeout, atLeastOne(p.TimeoutGrowth), max(n, 1)-1, limit)
}

// ParseRetryAfter reads a Retry-After header: delta-seconds or an HTTP-date
// (relative to now); false when absent, malformed, or in the past (a past
// date gives (0,false)). Values above 24 h are capped at 24 h.
//
// "0" is well formed and gives (0, true): the endpoint asks for no wait, and
// since Backoff only honours a positive Retry-After, the category minimum
// then applies.
func ParseRetryAfter(h string, now time.Time) (time.Duration, bool) {
	h = strings.TrimSpace(h)
	if h == "" {
		return 0, false
	}
	if isDigits(h) {
		return parseSeconds(h), true
	}
	t, err := http.ParseTime(h)
	if err != nil {
		return 0, false
	}
	d := t.Sub(now)
	if d <= 0 {
		return 0, false
	}
	return min(d, maxRetryAfter), true
}

// isDigits reports whether s is 1*DIGIT, the delta-seconds grammar (no sign,
// no fraction).
func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// parseSeconds reads delta-seconds already checked by isDigits, saturating
// at maxRetryAfter however many digits there are.
func parseSeconds(s string) time.Duration {
	limit := int64(maxRetryAfter / time.Second)
	var secs int64
	for i := 0; i < len(s); i++ {
		secs = secs*10 + int64(s[i]-'0')
		if secs >= limit {
			return maxRetryAfter
		}
	}
	return time.Duration(secs) * time.Second
}
