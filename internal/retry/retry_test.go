package retry_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/retry"
)

// defaultPolicy is the docs/DESIGN.md §6 default retry configuration.
func defaultPolicy() retry.Policy {
	return retry.Policy{
		MaxAttempts:   5,
		BaseDelay:     time.Second,
		MaxDelay:      300 * time.Second,
		Multiplier:    2,
		Timeout:       30 * time.Second,
		TimeoutGrowth: 1.5,
	}
}

// fixed is a jitter source that always returns r.
func fixed(r float64) func() float64 { return func() float64 { return r } }

// noJitter is the rnd value that leaves a delay unchanged.
var noJitter = fixed(0.5)

func TestCategoryOfStatus(t *testing.T) {
	t.Parallel()
	tests := []struct {
		status int
		want   retry.Category
	}{
		{100, retry.ClientError},
		{101, retry.ClientError},
		{199, retry.ClientError},
		{300, retry.ClientError},
		{301, retry.ClientError},
		{302, retry.ClientError},
		{304, retry.ClientError},
		{307, retry.ClientError},
		{308, retry.ClientError},
		{400, retry.ClientError},
		{401, retry.ClientError},
		{402, retry.ClientError},
		{403, retry.ClientError},
		{404, retry.ClientError},
		{405, retry.ClientError},
		{408, retry.ClientError},
		{409, retry.ClientError},
		{410, retry.ClientError},
		{413, retry.PayloadTooLarge},
		{414, retry.ClientError},
		{415, retry.ClientError},
		{422, retry.ClientError},
		{429, retry.RateLimit},
		{451, retry.ClientError},
		{499, retry.ClientError},
		{500, retry.ServerError},
		{501, retry.ServerError},
		{502, retry.ServerError},
		{503, retry.ServerError},
		{504, retry.ServerError},
		{599, retry.ServerError},
		{600, retry.ClientError},
		{0, retry.ClientError},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.status), func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, retry.CategoryOfStatus(tt.status))
		})
	}
}

// permanentStatuses are the docs/DESIGN.md §6 statuses that go straight to the DLQ.
var permanentStatuses = []int{400, 401, 403, 404, 410, 413, 414, 415, 451}

// retryableStatuses are non-2xx statuses that must be retried.
var retryableStatuses = []int{
	100, 301, 302, 304, 307, 308,
	402, 405, 406, 408, 409, 411, 412, 416, 418, 422, 425, 428, 429, 431, 499,
	500, 501, 502, 503, 504, 599,
}

func TestPermanent(t *testing.T) {
	t.Parallel()
	for _, status := range permanentStatuses {
		t.Run(fmt.Sprintf("permanent %d", status), func(t *testing.T) {
			t.Parallel()
			require.True(t, retry.Permanent(status))
		})
	}
	for _, status := range append([]int{0, 200, 201, 204}, retryableStatuses...) {
		t.Run(fmt.Sprintf("not permanent %d", status), func(t *testing.T) {
			t.Parallel()
			require.False(t, retry.Permanent(status))
		})
	}
}

func TestOutcomeSucceeded(t *testing.T) {
	t.Parallel()
	tests := []struct {
		status int
		want   bool
	}{
		{0, false}, {100, false}, {199, false}, {200, true}, {201, true},
		{202, true}, {204, true}, {299, true}, {300, false}, {404, false}, {500, false},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.status), func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, retry.Outcome{StatusCode: tt.status}.Succeeded())
		})
	}
}

// status is the Outcome of an HTTP answer, classified as the caller would.
func status(code int) retry.Outcome {
	if code >= 200 && code <= 299 {
		return retry.Outcome{StatusCode: code}
	}
	return retry.Outcome{StatusCode: code, Category: retry.CategoryOfStatus(code)}
}

// failure is the Outcome of an attempt that got no response.
func failure(cat retry.Category) retry.Outcome { return retry.Outcome{Category: cat} }

func TestDecide(t *testing.T) {
	t.Parallel()
	p := defaultPolicy()
	tests := []struct {
		name    string
		outcome retry.Outcome
		attempt int
		want    retry.Decision
	}{
		{"200 first attempt", status(200), 1, retry.Decision{Succeeded: true}},
		{"204 last attempt", status(204), 5, retry.Decision{Succeeded: true}},
		{"299 past max", status(299), 9, retry.Decision{Succeeded: true}},
		{"500 first", status(500), 1, retry.Decision{Retry: true, Delay: time.Second}},
		{"502 second", status(502), 2, retry.Decision{Retry: true, Delay: 2 * time.Second}},
		{"503 third", status(503), 3, retry.Decision{Retry: true, Delay: 4 * time.Second}},
		{"504 fourth", status(504), 4, retry.Decision{Retry: true, Delay: 8 * time.Second}},
		{"500 fifth", status(500), 5, retry.Decision{Exhausted: true, Reason: "max attempts (5) reached"}},
		{"500 past max", status(500), 6, retry.Decision{Exhausted: true, Reason: "max attempts (5) reached"}},
		{"302 redirect retries", status(302), 1, retry.Decision{Retry: true, Delay: time.Second}},
		{"408 retries", status(408), 2, retry.Decision{Retry: true, Delay: 2 * time.Second}},
		{"422 retries", status(422), 1, retry.Decision{Retry: true, Delay: time.Second}},
		{"429 minimum", status(429), 1, retry.Decision{Retry: true, Delay: 60 * time.Second}},
		{
			"429 retry-after", retry.Outcome{StatusCode: 429, Category: retry.RateLimit, RetryAfter: 3 * time.Second}, 1,
			retry.Decision{Retry: true, Delay: 3 * time.Second},
		},
		{
			"503 retry-after", retry.Outcome{StatusCode: 503, Category: retry.ServerError, RetryAfter: 42 * time.Second}, 2,
			retry.Decision{Retry: true, Delay: 42 * time.Second},
		},
		{"429 last attempt", status(429), 5, retry.Decision{Exhausted: true, Reason: "max attempts (5) reached"}},
		{"network", failure(retry.Network), 1, retry.Decision{Retry: true, Delay: time.Second}},
		{"network fourth", failure(retry.Network), 4, retry.Decision{Retry: true, Delay: 8 * time.Second}},
		{"network last", failure(retry.Network), 5, retry.Decision{Exhausted: true, Reason: "max attempts (5) reached"}},
		{"dns minimum", failure(retry.DNS), 1, retry.Decision{Retry: true, Delay: 5 * time.Second}},
		{"dns above minimum", failure(retry.DNS), 4, retry.Decision{Retry: true, Delay: 8 * time.Second}},
		{"timeout minimum", failure(retry.Timeout), 1, retry.Decision{Retry: true, Delay: 2 * time.Second}},
		{"timeout above minimum", failure(retry.Timeout), 3, retry.Decision{Retry: true, Delay: 4 * time.Second}},
		{"ssl first", failure(retry.SSL), 1, retry.Decision{Retry: true, Delay: time.Second}},
		{"circuit open retries", failure(retry.CircuitOpen), 1, retry.Decision{Retry: true, Delay: time.Second}},
		{"ssrf blocked retries", failure(retry.SSRFBlocked), 1, retry.Decision{Retry: true, Delay: time.Second}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, p.Decide(tt.outcome, tt.attempt, noJitter))
		})
	}
}

func TestDecidePermanent(t *testing.T) {
	t.Parallel()
	p := defaultPolicy()
	for _, code := range permanentStatuses {
		for _, attempt := range []int{1, 3, 5} {
			t.Run(fmt.Sprintf("%d attempt %d", code, attempt), func(t *testing.T) {
				t.Parallel()
				want := retry.Decision{Exhausted: true, Reason: fmt.Sprintf("permanent status %d", code)}
				require.Equal(t, want, p.Decide(status(code), attempt, noJitter))
			})
		}
	}
}

func TestDecideRetryableStatuses(t *testing.T) {
	t.Parallel()
	p := defaultPolicy()
	for _, code := range retryableStatuses {
		t.Run(fmt.Sprint(code), func(t *testing.T) {
			t.Parallel()
			o := status(code)
			for attempt := 1; attempt < p.MaxAttempts; attempt++ {
				d := p.Decide(o, attempt, noJitter)
				require.True(t, d.Retry, "attempt %d", attempt)
				require.False(t, d.Exhausted)
				require.False(t, d.Succeeded)
				require.Empty(t, d.Reason)
				require.Equal(t, p.Backoff(attempt, o.Category, 0, noJitter), d.Delay)
			}
			d := p.Decide(o, p.MaxAttempts, noJitter)
			require.Equal(t, retry.Decision{Exhausted: true, Reason: "max attempts (5) reached"}, d)
		})
	}
}

func TestDecideDefaultSequence(t *testing.T) {
	t.Parallel()
	p := defaultPolicy()
	var delays []time.Duration
	attempt := 1
	for ; ; attempt++ {
		d := p.Decide(status(503), attempt, noJitter)
		if !d.Retry {
			require.True(t, d.Exhausted)
			break
		}
		delays = append(delays, d.Delay)
	}
	require.Equal(t, 5, attempt)
	require.Equal(t, []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second}, delays)
}

func TestDecideSSL(t *testing.T) {
	t.Parallel()
	p := defaultPolicy()
	p.MaxAttempts = 10
	tests := []struct {
		attempt int
		want    retry.Decision
	}{
		{1, retry.Decision{Retry: true, Delay: time.Second}},
		{2, retry.Decision{Retry: true, Delay: 2 * time.Second}},
		{3, retry.Decision{Retry: true, Delay: 4 * time.Second}},
		{4, retry.Decision{Exhausted: true, Reason: "TLS failed 4 times"}},
		{5, retry.Decision{Exhausted: true, Reason: "TLS failed 5 times"}},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.attempt), func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, p.Decide(failure(retry.SSL), tt.attempt, noJitter))
		})
	}
}

func TestDecideRetryingCategories(t *testing.T) {
	t.Parallel()
	p := defaultPolicy()
	p.MaxAttempts = 10
	for _, cat := range []retry.Category{retry.Network, retry.DNS, retry.Timeout} {
		t.Run(string(cat), func(t *testing.T) {
			t.Parallel()
			for attempt := 1; attempt < 10; attempt++ {
				d := p.Decide(failure(cat), attempt, noJitter)
				require.Equal(t, retry.Decision{Retry: true, Delay: p.Backoff(attempt, cat, 0, noJitter)}, d,
					"attempt %d", attempt)
			}
			require.Equal(t, retry.Decision{Exhausted: true, Reason: "max attempts (10) reached"},
				p.Decide(failure(cat), 10, noJitter))
		})
	}
}

func TestDecideDelayIsBackoff(t *testing.T) {
	t.Parallel()
	p := defaultPolicy()
	p.MaxAttempts = 50
	rng := rand.New(rand.NewPCG(7, 11))
	cats := []retry.Category{retry.ServerError, retry.RateLimit, retry.DNS, retry.Timeout, retry.Network, retry.SSL}
	for range 2000 {
		cat := cats[rng.IntN(len(cats))]
		attempt := 1 + rng.IntN(3)
		var ra time.Duration
		if rng.IntN(2) == 0 {
			ra = time.Duration(rng.Int64N(int64(10 * time.Minute)))
		}
		r := rng.Float64()
		d := p.Decide(retry.Outcome{StatusCode: 0, Category: cat, RetryAfter: ra}, attempt, fixed(r))
		require.True(t, d.Retry)
		require.Equal(t, p.Backoff(attempt, cat, ra, fixed(r)), d.Delay)
	}
}

func TestDecideSmallMaxAttempts(t *testing.T) {
	t.Parallel()
	for _, maxAttempts := range []int{-1, 0, 1} {
		p := defaultPolicy()
		p.MaxAttempts = maxAttempts
		d := p.Decide(status(500), 1, noJitter)
		require.True(t, d.Exhausted, "max attempts %d", maxAttempts)
		require.False(t, d.Retry)
	}
}

func TestBackoff(t *testing.T) {
	t.Parallel()
	def := defaultPolicy()
	capped := def
	capped.MaxDelay = 10 * time.Second
	uncapped := def
	uncapped.MaxDelay = 0
	steep := def
	steep.Multiplier = 1e300
	schedule := def
	schedule.Schedule = []time.Duration{10 * time.Second, time.Minute, 5 * time.Minute}
	tinySchedule := def
	tinySchedule.Schedule = []time.Duration{100 * time.Millisecond}
	flat := def
	flat.Multiplier = 0
	nanMultiplier := def
	nanMultiplier.Multiplier = math.NaN()
	infMultiplier := def
	infMultiplier.Multiplier = math.Inf(1)
	zeroBase := def
	zeroBase.BaseDelay = 0
	zeroBase.Multiplier = math.Inf(1)

	tests := []struct {
		name string
		p    retry.Policy
		n    int
		cat  retry.Category
		ra   time.Duration
		rnd  func() float64
		want time.Duration
	}{
		// the default sequence, no jitter
		{"default 1", def, 1, retry.ServerError, 0, noJitter, time.Second},
		{"default 2", def, 2, retry.ServerError, 0, noJitter, 2 * time.Second},
		{"default 3", def, 3, retry.ServerError, 0, noJitter, 4 * time.Second},
		{"default 4", def, 4, retry.ServerError, 0, noJitter, 8 * time.Second},
		{"default 5", def, 5, retry.ServerError, 0, noJitter, 16 * time.Second},
		{"default 9 capped", def, 10, retry.ServerError, 0, noJitter, 300 * time.Second},
		{"n 0 counts as 1", def, 0, retry.ServerError, 0, noJitter, time.Second},
		{"n negative counts as 1", def, -3, retry.ServerError, 0, noJitter, time.Second},
		{"nil rnd no jitter", def, 3, retry.ServerError, 0, nil, 4 * time.Second},
		{"multiplier below 1 is flat", flat, 4, retry.ServerError, 0, noJitter, time.Second},
		{"multiplier NaN is flat", nanMultiplier, 4, retry.ServerError, 0, noJitter, time.Second},
		{"multiplier +Inf n 1", infMultiplier, 1, retry.ServerError, 0, noJitter, time.Second},
		{"multiplier +Inf n 2 capped", infMultiplier, 2, retry.ServerError, 0, noJitter, 300 * time.Second},
		{"zero base stays zero", zeroBase, 5, retry.ServerError, 0, noJitter, 0},
		{"zero base dns minimum", zeroBase, 5, retry.DNS, 0, noJitter, 5 * time.Second},

		// jitter bounds
		{"rnd 0 is -25%", def, 1, retry.ServerError, 0, fixed(0), 750 * time.Millisecond},
		{"rnd 0 is -25% n 4", def, 4, retry.ServerError, 0, fixed(0), 6 * time.Second},
		{"rnd 0.25 is -12.5%", def, 4, retry.ServerError, 0, fixed(0.25), 7 * time.Second},
		{"rnd 0.75 is +12.5%", def, 4, retry.ServerError, 0, fixed(0.75), 9 * time.Second},
		{"rnd 0.999999 just under +25%", def, 1, retry.ServerError, 0, fixed(0.999999), 1249999500 * time.Nanosecond},
		{"rnd 1 clamped to +25%", def, 1, retry.ServerError, 0, fixed(1), 1250 * time.Millisecond},
		{"rnd 7 clamped to +25%", def, 1, retry.ServerError, 0, fixed(7), 1250 * time.Millisecond},
		{"rnd negative clamped to -25%", def, 1, retry.ServerError, 0, fixed(-3), 750 * time.Millisecond},
		{"rnd NaN clamped to -25%", def, 1, retry.ServerError, 0, fixed(math.NaN()), 750 * time.Millisecond},

		// cap at MaxDelay, then jitter
		{"cap", capped, 5, retry.ServerError, 0, noJitter, 10 * time.Second},
		{"cap rnd 0", capped, 5, retry.ServerError, 0, fixed(0), 7500 * time.Millisecond},
		{"cap rnd 1", capped, 5, retry.ServerError, 0, fixed(1), 12500 * time.Millisecond},
		{"under cap", capped, 4, retry.ServerError, 0, noJitter, 8 * time.Second},

		// overflow
		{"overflow n 200", def, 200, retry.ServerError, 0, noJitter, 300 * time.Second},
		{"overflow n 200 rnd 0", def, 200, retry.ServerError, 0, fixed(0), 225 * time.Second},
		{"overflow n MaxInt", def, math.MaxInt, retry.ServerError, 0, noJitter, 300 * time.Second},
		{"overflow steep multiplier", steep, 3, retry.ServerError, 0, noJitter, 300 * time.Second},
		{"overflow no cap", uncapped, 200, retry.ServerError, 0, noJitter, time.Duration(math.MaxInt64)},
		{"overflow no cap rnd 1", uncapped, 200, retry.ServerError, 0, fixed(1), time.Duration(math.MaxInt64)},
		{"no cap small n", uncapped, 3, retry.ServerError, 0, noJitter, 4 * time.Second},

		// schedule: no jitter, last value repeats, minimums still apply
		{"schedule 1", schedule, 1, retry.ServerError, 0, fixed(0), 10 * time.Second},
		{"schedule 2", schedule, 2, retry.ServerError, 0, fixed(0.999999), time.Minute},
		{"schedule 3", schedule, 3, retry.ServerError, 0, fixed(0), 5 * time.Minute},
		{"schedule 4 repeats last", schedule, 4, retry.ServerError, 0, fixed(0), 5 * time.Minute},
		{"schedule 200 repeats last", schedule, 200, retry.ServerError, 0, fixed(1), 5 * time.Minute},
		{"schedule n 0", schedule, 0, retry.ServerError, 0, noJitter, 10 * time.Second},
		{"schedule dns minimum", tinySchedule, 1, retry.DNS, 0, noJitter, 5 * time.Second},
		{"schedule rate limit minimum", schedule, 1, retry.RateLimit, 0, noJitter, 60 * time.Second},
		{"schedule retry-after", schedule, 3, retry.RateLimit, 7 * time.Second, noJitter, 7 * time.Second},

		// category minimums, after jitter
		{"rate_limit raises 1s to 60s", def, 1, retry.RateLimit, 0, noJitter, 60 * time.Second},
		{"rate_limit raises jittered 1.25s", def, 1, retry.RateLimit, 0, fixed(1), 60 * time.Second},
		{"rate_limit keeps 64s", def, 7, retry.RateLimit, 0, noJitter, 64 * time.Second},
		{"rate_limit raises jittered 48s", def, 7, retry.RateLimit, 0, fixed(0), 60 * time.Second},
		{"rate_limit above MaxDelay", capped, 1, retry.RateLimit, 0, noJitter, 60 * time.Second},
		{"dns raises 1s to 5s", def, 1, retry.DNS, 0, noJitter, 5 * time.Second},
		{"dns raises 4s to 5s", def, 3, retry.DNS, 0, noJitter, 5 * time.Second},
		{"dns keeps 8s", def, 4, retry.DNS, 0, noJitter, 8 * time.Second},
		{"dns keeps jittered 6s", def, 4, retry.DNS, 0, fixed(0), 6 * time.Second},
		{"timeout raises 1s to 2s", def, 1, retry.Timeout, 0, noJitter, 2 * time.Second},
		{"timeout keeps 2s", def, 2, retry.Timeout, 0, noJitter, 2 * time.Second},
		{"timeout raises jittered 1.5s", def, 2, retry.Timeout, 0, fixed(0), 2 * time.Second},
		{"timeout keeps 4s", def, 3, retry.Timeout, 0, noJitter, 4 * time.Second},
		{"network has no minimum", def, 1, retry.Network, 0, fixed(0), 750 * time.Millisecond},
		{"ssl has no minimum", def, 1, retry.SSL, 0, noJitter, time.Second},
		{"server_error has no minimum", def, 1, retry.ServerError, 0, noJitter, time.Second},
		{"empty category has no minimum", def, 1, "", 0, noJitter, time.Second},

		// Retry-After replaces the delay and the minimum, capped at MaxDelay
		{"retry-after 3s beats rate_limit minimum", def, 1, retry.RateLimit, 3 * time.Second, noJitter, 3 * time.Second},
		{"retry-after not jittered", def, 1, retry.RateLimit, 3 * time.Second, fixed(0), 3 * time.Second},
		{"retry-after replaces longer delay", def, 8, retry.ServerError, 5 * time.Second, noJitter, 5 * time.Second},
		{"retry-after longer than delay", def, 1, retry.ServerError, 90 * time.Second, noJitter, 90 * time.Second},
		{"retry-after capped", def, 1, retry.RateLimit, time.Hour, noJitter, 300 * time.Second},
		{"retry-after capped small cap", capped, 1, retry.ServerError, 11 * time.Second, noJitter, 10 * time.Second},
		{"retry-after no cap", uncapped, 1, retry.ServerError, time.Hour, noJitter, time.Hour},
		{"retry-after 1ns", def, 1, retry.RateLimit, 1, noJitter, 1},
		{"retry-after negative ignored", def, 1, retry.RateLimit, -time.Second, noJitter, 60 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, tt.p.Backoff(tt.n, tt.cat, tt.ra, tt.rnd))
		})
	}
}

func TestBackoffNeverNegative(t *testing.T) {
	t.Parallel()
	policies := []retry.Policy{
		{},
		{BaseDelay: -time.Second, MaxDelay: time.Minute, Multiplier: 2},
		{BaseDelay: time.Second, MaxDelay: -time.Minute, Multiplier: -2},
		{BaseDelay: time.Second, Multiplier: math.Inf(1)},
		{BaseDelay: time.Second, Multiplier: math.NaN()},
		{Schedule: []time.Duration{-time.Second}},
		{BaseDelay: time.Duration(math.MaxInt64), Multiplier: 2},
	}
	for i, p := range policies {
		for _, n := range []int{math.MinInt, -1, 0, 1, 2, 64, 200, math.MaxInt} {
			for _, r := range []float64{0, 0.5, 0.999999, 1} {
				d := p.Backoff(n, retry.ServerError, 0, fixed(r))
				require.GreaterOrEqual(t, d, time.Duration(0), "policy %d n %d rnd %v", i, n, r)
			}
		}
	}
}

func TestBackoffJitterProperty(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		p := retry.Policy{
			BaseDelay:  time.Duration(1 + rng.Int64N(int64(10*time.Second))),
			MaxDelay:   time.Duration(1 + rng.Int64N(int64(time.Hour))),
			Multiplier: 1 + 3*rng.Float64(),
		}
		for n := 1; n <= 30; n++ {
			plain := p.Backoff(n, retry.ServerError, 0, nil)
			require.Equal(t, plain, p.Backoff(n, retry.ServerError, 0, noJitter))
			require.LessOrEqual(t, plain, p.MaxDelay)
			for range 20 {
				r := rng.Float64()
				got := p.Backoff(n, retry.ServerError, 0, fixed(r))
				require.GreaterOrEqual(t, float64(got), 0.75*float64(plain)-1, "n %d rnd %v", n, r)
				require.LessOrEqual(t, float64(got), 1.25*float64(plain)+1, "n %d rnd %v", n, r)
			}
		}
	}
}

func TestBackoffJitterIsMonotonicInRnd(t *testing.T) {
	t.Parallel()
	p := defaultPolicy()
	prev := time.Duration(0)
	for i := range 1000 {
		got := p.Backoff(4, retry.ServerError, 0, fixed(float64(i)/1000))
		require.GreaterOrEqual(t, got, prev)
		prev = got
	}
	require.Less(t, prev, 10*time.Second)
}

func TestAttemptTimeout(t *testing.T) {
	t.Parallel()
	def := defaultPolicy()
	noGrowth := def
	noGrowth.TimeoutGrowth = 1
	zeroGrowth := def
	zeroGrowth.TimeoutGrowth = 0
	shrinking := def
	shrinking.TimeoutGrowth = 0.5
	double := def
	double.TimeoutGrowth = 2
	steep := def
	steep.TimeoutGrowth = 1e300
	nanGrowth := def
	nanGrowth.TimeoutGrowth = math.NaN()
	none := def
	none.Timeout = 0
	negative := def
	negative.Timeout = -time.Second
	huge := def
	huge.Timeout = time.Duration(math.MaxInt64 / 2)

	tests := []struct {
		name string
		p    retry.Policy
		n    int
		want time.Duration
	}{
		{"growth 1.5 attempt 1", def, 1, 30 * time.Second},
		{"growth 1.5 attempt 2", def, 2, 45 * time.Second},
		{"growth 1.5 attempt 3", def, 3, 67500 * time.Millisecond},
		{"growth 1.5 attempt 4 capped", def, 4, 90 * time.Second},
		{"growth 1.5 attempt 5 capped", def, 5, 90 * time.Second},
		{"growth 1.5 attempt 200 capped", def, 200, 90 * time.Second},
		{"growth 1.5 attempt MaxInt capped", def, math.MaxInt, 90 * time.Second},
		{"attempt 0 counts as 1", def, 0, 30 * time.Second},
		{"attempt negative counts as 1", def, -5, 30 * time.Second},
		{"growth 1", noGrowth, 5, 30 * time.Second},
		{"growth 0 counts as 1", zeroGrowth, 5, 30 * time.Second},
		{"growth 0.5 counts as 1", shrinking, 5, 30 * time.Second},
		{"growth 2 attempt 2", double, 2, 60 * time.Second},
		{"growth 2 attempt 3 capped", double, 3, 90 * time.Second},
		{"steep growth capped", steep, 2, 90 * time.Second},
		{"growth NaN counts as 1", nanGrowth, 5, 30 * time.Second},
		{"no timeout", none, 3, 0},
		{"negative timeout", negative, 3, 0},
		{"huge timeout saturates", huge, 3, time.Duration(math.MaxInt64)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, tt.p.AttemptTimeout(tt.n))
		})
	}
}

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name   string
		header string
		want   time.Duration
		ok     bool
	}{
		{"seconds", "120", 120 * time.Second, true},
		{"one second", "1", time.Second, true},
		{"leading zeros", "007", 7 * time.Second, true},
		{"surrounding spaces", "  30 ", 30 * time.Second, true},
		{"zero", "0", 0, true},
		{"exactly 24h", "86400", 24 * time.Hour, true},
		{"just over 24h capped", "86401", 24 * time.Hour, true},
		{"huge capped", "999999999999", 24 * time.Hour, true},
		{"beyond int64 capped", "99999999999999999999999999999", 24 * time.Hour, true},
		{"absent", "", 0, false},
		{"blank", "   ", 0, false},
		{"negative", "-5", 0, false},
		{"plus sign", "+5", 0, false},
		{"fraction", "1.5", 0, false},
		{"unit", "5s", 0, false},
		{"inner space", "1 0", 0, false},
		{"garbage", "soon", 0, false},
		{"hex", "0x10", 0, false},
		{"date future", now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second, true},
		{"date future one second", now.Add(time.Second).Format(http.TimeFormat), time.Second, true},
		{"date far future capped", now.Add(48 * time.Hour).Format(http.TimeFormat), 24 * time.Hour, true},
		{"date now", now.Format(http.TimeFormat), 0, false},
		{"date past", now.Add(-time.Hour).Format(http.TimeFormat), 0, false},
		{"date long past", "Wed, 21 Oct 2015 07:28:00 GMT", 0, false},
		{"date RFC 850", "Saturday, 01-Mar-25 12:05:00 GMT", 5 * time.Minute, true},
		{"date asctime", "Sat Mar  1 12:00:10 2025", 10 * time.Second, true},
		{"date non-GMT zone", "Sat, 01 Mar 2025 13:00:00 CET", 0, false},
		{"date malformed", "Sat, 32 Mar 2025 12:00:00 GMT", 0, false},
		{"date with spaces", " " + now.Add(time.Minute).Format(http.TimeFormat) + " ", time.Minute, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, ok := retry.ParseRetryAfter(tt.header, now)
			require.Equal(t, tt.ok, ok)
			require.Equal(t, tt.want, got)
		})
	}
}
