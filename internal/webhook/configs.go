package webhook

import "github.com/hookline/hookline/internal/fielderr"

// Bounds of every numeric setting, checked on create and update.
const (
	maxAttemptsLimit   = 50
	minDelayMS         = 100
	maxDelayMSLimit    = 24 * 60 * 60 * 1000
	minTimeoutMS       = 100
	maxTimeoutMS       = 120_000
	maxScheduleEntries = 50
	minWindowMS        = 1000
	maxWindowMS        = 60 * 60 * 1000
	maxThroughput      = 100_000
	maxHalfOpenCalls   = 1000
	maxRequestsPerMin  = 1_000_000
	maxBurst           = 100_000
)

func set[T any](dst *T, src *T) {
	if src != nil {
		*dst = *src
	}
}

func mergeRetry(c RetryConfig, in RetryInput) (RetryConfig, error) {
	set(&c.MaxAttempts, in.MaxAttempts)
	set(&c.BaseDelayMS, in.BaseDelayMS)
	set(&c.MaxDelayMS, in.MaxDelayMS)
	set(&c.BackoffMultiplier, in.BackoffMultiplier)
	set(&c.TimeoutMS, in.TimeoutMS)
	set(&c.TimeoutGrowthFactor, in.TimeoutGrowthFactor)
	if in.ScheduleMS != nil {
		c.ScheduleMS = append([]int64{}, (*in.ScheduleMS)...)
	}
	const p = "retry_config."
	err := fielderr.First(
		fielderr.InRange(p+"max_attempts", c.MaxAttempts, 1, maxAttemptsLimit),
		fielderr.InRange(p+"base_delay_ms", c.BaseDelayMS, minDelayMS, maxDelayMSLimit),
		fielderr.InRange(p+"max_delay_ms", c.MaxDelayMS, minDelayMS, maxDelayMSLimit),
		fielderr.InRange(p+"backoff_multiplier", c.BackoffMultiplier, 1, 10),
		fielderr.InRange(p+"timeout_ms", c.TimeoutMS, minTimeoutMS, maxTimeoutMS),
		fielderr.InRange(p+"timeout_growth_factor", c.TimeoutGrowthFactor, 1, 3),
	)
	if err != nil {
		return c, err
	}
	if c.MaxDelayMS < c.BaseDelayMS {
		return c, fielderr.New(p+"max_delay_ms", "must not be less than base_delay_ms (%d)", c.BaseDelayMS)
	}
	if len(c.ScheduleMS) > maxScheduleEntries {
		return c, fielderr.New(p+"schedule_ms", "at most %d entries, got %d", maxScheduleEntries, len(c.ScheduleMS))
	}
	for i, d := range c.ScheduleMS {
		if e := fielderr.InRange(p+"schedule_ms", d, 0, maxDelayMSLimit); e != nil {
			return c, fielderr.New(p+"schedule_ms", "entry %d: %s", i, e.Message)
		}
	}
	return c, nil
}

func mergeBreaker(c BreakerConfig, in BreakerInput) (BreakerConfig, error) {
	set(&c.Enabled, in.Enabled)
	set(&c.ErrorThresholdPercentage, in.ErrorThresholdPercentage)
	set(&c.MinimumThroughput, in.MinimumThroughput)
	set(&c.WindowSizeMS, in.WindowSizeMS)
	set(&c.SleepWindowMS, in.SleepWindowMS)
	set(&c.HalfOpenMaxCalls, in.HalfOpenMaxCalls)
	set(&c.HalfOpenSuccessThreshold, in.HalfOpenSuccessThreshold)
	const p = "circuit_breaker_config."
	return c, fielderr.First(
		fielderr.InRange(p+"error_threshold_percentage", c.ErrorThresholdPercentage, 1, 100),
		fielderr.InRange(p+"minimum_throughput", c.MinimumThroughput, 1, maxThroughput),
		fielderr.InRange(p+"window_size_ms", c.WindowSizeMS, minWindowMS, maxWindowMS),
		fielderr.InRange(p+"sleep_window_ms", c.SleepWindowMS, minWindowMS, maxWindowMS),
		fielderr.InRange(p+"half_open_max_calls", c.HalfOpenMaxCalls, 1, maxHalfOpenCalls),
		fielderr.InRange(p+"half_open_success_threshold", c.HalfOpenSuccessThreshold, 1, 100),
	)
}

func mergeRateLimit(c RateLimit, in RateLimitInput) (RateLimit, error) {
	set(&c.RequestsPerMinute, in.RequestsPerMinute)
	set(&c.Burst, in.Burst)
	return c, fielderr.First(
		fielderr.InRange("rate_limit.requests_per_minute", c.RequestsPerMinute, 1, maxRequestsPerMin),
		fielderr.InRange("rate_limit.burst", c.Burst, 1, maxBurst),
	)
}
