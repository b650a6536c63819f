// Package breaker is the per-webhook circuit breaker of docs/DESIGN.md §7, kept
// in Redis so that every worker sees the same circuit.
//
// Each operation (Allow, Record, Snapshot) is one Lua script: the script
// reads the circuit, decides the transition and writes it back atomically,
// so any number of workers agree on when a circuit opens, which deliveries
// are the half-open probes and when it closes again. Time is never read from
// Redis: callers pass now, which keeps the breaker deterministic in tests.
//
// Keys, all under the prefix given to New and sharing the hash tag {id}:
//
//	<prefix>breaker:{<id>}:state   hash: state, opened_at, sleep_ms,
//	                               half_opened_at, probes_issued,
//	                               probe_successes, probe_failures
//	<prefix>breaker:{<id>}:window  hash: "<unix second>:s" and
//	                               "<unix second>:f" outcome counters
//
// A closed circuit has no state key. Every write refreshes the TTL of the
// key written (2 x Window + MaxSleepWindow + probeLease), so an idle webhook
// leaves nothing behind.
package breaker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hookline/hookline/internal/redisbatch"
)

// State is the state of a circuit.
type State string

// The states of a circuit.
const (
	// Closed: deliveries go ahead and their outcomes are counted.
	Closed State = "closed"
	// Open: no delivery is attempted until the sleep window has passed.
	Open State = "open"
	// HalfOpen: a few probe deliveries decide whether the circuit closes.
	HalfOpen State = "half_open"
)

// Transition names the state change an operation made, if any.
type Transition string

// The transitions a call can report.
const (
	// NoTransition: the state did not change.
	NoTransition Transition = ""
	// Opened: a closed circuit reached its error threshold.
	Opened Transition = "opened"
	// HalfOpened: the sleep window of an open circuit passed (or a half-open
	// period whose probes were lost was started over, see Allow).
	HalfOpened Transition = "half_opened"
	// ClosedAgain: enough probes succeeded; the circuit closed.
	ClosedAgain Transition = "closed"
	// Reopened: too many probes failed; the circuit opened again with a
	// doubled sleep window.
	Reopened Transition = "reopened"
)

// defaultMaxSleepWindow caps the doubling when Config.MaxSleepWindow is 0.
const defaultMaxSleepWindow = time.Hour

// halfOpenRetryIn is how long a delivery that is not a probe is postponed
// while the circuit is half-open (docs/DESIGN.md §7).
const halfOpenRetryIn = 5 * time.Second

// probeLease is how long a half-open period may wait for the results of its
// probes once all of them are issued. A probe whose worker died never
// reports; without the lease its circuit would stay half-open for good.
const probeLease = 5 * time.Minute

// ErrInvalidConfig is returned (wrapped) for a Config that Validate rejects.
var ErrInvalidConfig = errors.New("invalid circuit breaker config")

// Config is the breaker configuration of one webhook (docs/DESIGN.md §7). It is passed
// on every call, so a changed webhook configuration applies at once.
type Config struct {
	// ErrorThresholdPercentage opens the circuit when at least this share
	// of the outcomes in the window failed (1-100; default 60).
	ErrorThresholdPercentage int
	// MinimumThroughput is how many outcomes the window must hold before
	// the error rate is considered (>= 1; default 20).
	MinimumThroughput int
	// Window is the length of the sliding window, at one-second
	// resolution: outcomes older than Window never count (>= 1 s;
	// default 60 s).
	Window time.Duration
	// SleepWindow is how long a circuit stays open after it first opens
	// (> 0; default 30 s).
	SleepWindow time.Duration
	// HalfOpenMaxCalls is how many probes a half-open period allows (>= 1;
	// default 5).
	HalfOpenMaxCalls int
	// HalfOpenSuccessThreshold is the share of HalfOpenMaxCalls that must
	// succeed to close the circuit (1-100; default 60).
	HalfOpenSuccessThreshold int
	// MaxSleepWindow caps the doubling of the sleep window on each
	// re-opening; 0 means 1 h. A value below SleepWindow means SleepWindow.
	MaxSleepWindow time.Duration
}

// Validate reports whether c can drive a breaker.
func (c Config) Validate() error {
	switch {
	case c.ErrorThresholdPercentage < 1 || c.ErrorThresholdPercentage > 100:
		return fmt.Errorf("%w: error threshold %d%% not in 1-100", ErrInvalidConfig, c.ErrorThresholdPercentage)
	case c.MinimumThroughput < 1:
		return fmt.Errorf("%w: minimum throughput %d < 1", ErrInvalidConfig, c.MinimumThroughput)
	case c.Window < time.Second:
		return fmt.Errorf("%w: window %s < 1s", ErrInvalidConfig, c.Window)
	case c.SleepWindow <= 0:
		return fmt.Errorf("%w: sleep window %s <= 0", ErrInvalidConfig, c.SleepWindow)
	case c.HalfOpenMaxCalls < 1:
		return fmt.Errorf("%w: half-open max calls %d < 1", ErrInvalidConfig, c.HalfOpenMaxCalls)
	case c.HalfOpenSuccessThreshold < 1 || c.HalfOpenSuccessThreshold > 100:
		return fmt.Errorf("%w: half-open success threshold %d%% not in 1-100", ErrInvalidConfig, c.HalfOpenSuccessThreshold)
	case c.MaxSleepWindow < 0:
		return fmt.Errorf("%w: max sleep window %s < 0", ErrInvalidConfig, c.MaxSleepWindow)
	}
	return nil
}

// maxSleep is the effective cap of the sleep window.
func (c Config) maxSleep() time.Duration {
	m := c.MaxSleepWindow
	if m == 0 {
		m = defaultMaxSleepWindow
	}
	return max(m, c.SleepWindow)
}

// probeSuccessesNeeded is ceil(HalfOpenSuccessThreshold% of
// HalfOpenMaxCalls): 3 of 5 at 60 %.
func (c Config) probeSuccessesNeeded() int {
	n := (c.HalfOpenSuccessThreshold*c.HalfOpenMaxCalls + 99) / 100
	return min(max(n, 1), c.HalfOpenMaxCalls)
}

// ttl is the lifetime given to every key on write: long enough to outlive
// the window, the longest sleep window and a half-open period.
func (c Config) ttl() time.Duration {
	return 2*c.Window + c.maxSleep() + probeLease
}

// Verdict is the answer of Allow.
type Verdict struct {
	// Allowed: the delivery may be attempted now.
	Allowed bool
	// Probe: the delivery is allowed as a half-open probe; its outcome
	// must be recorded with probe=true.
	Probe bool
	// State is the state of the circuit after the call.
	State State
	// RetryIn, when not allowed, is how long to postpone the delivery: the
	// rest of the sleep window when open, 5 s for a delivery that is not a
	// probe when half-open.
	RetryIn time.Duration
}

// Snapshot is the state of one circuit, for the API and for persisting
// state changes to Postgres.
type Snapshot struct {
	// State as stored: an open circuit whose sleep window has passed still
	// reads open until the next Allow moves it to half-open.
	State State
	// OpenedAt is when the circuit last opened; zero when closed.
	OpenedAt time.Time
	// SleepWindow is the current sleep window: the base one when closed,
	// doubled for each failed half-open period since the last recovery.
	SleepWindow time.Duration
	// Successes and Failures are the outcomes in the current window.
	Successes, Failures int
	// ProbesIssued, ProbeSuccesses and ProbeFailures count the probes of
	// the current half-open period; zero in the other states.
	ProbesIssued, ProbeSuccesses, ProbeFailures int
}

// Breaker decides, for many workers at once, whether deliveries to a
// webhook may go ahead. It is safe for concurrent use.
type Breaker struct {
	rdb    redis.UniversalClient
	prefix string
}

// New returns a Breaker keeping its circuits in rdb under keys that start
// with prefix.
func New(rdb redis.UniversalClient, prefix string) *Breaker {
	return &Breaker{rdb: rdb, prefix: prefix}
}

// keys returns the state and window keys of a webhook's circuit.
func (b *Breaker) keys(webhookID string) []string {
	base := b.prefix + "breaker:{" + webhookID + "}:"
	return []string{base + "state", base + "window"}
}

// Allow reports whether a delivery to the webhook may be attempted at now.
//
// Closed: allowed. Open: refused with the rest of the sleep window, unless
// the sleep window has passed: then the circuit goes half-open (Transition
// "half_opened") and the call is handled as half-open. Half-open: the first
// HalfOpenMaxCalls calls of the period are allowed as probes, the others are
// refused with RetryIn 5 s. When every probe of a period was issued and the
// period is still undecided probeLease (5 min) after it began, a probe was
// lost (its worker died), and the period starts over ("half_opened").
func (b *Breaker) Allow(ctx context.Context, webhookID string, cfg Config, now time.Time) (Verdict, Transition, error) {
	if err := cfg.Validate(); err != nil {
		return Verdict{}, "", err
	}
	return allowResult(webhookID, allowScript.Run(ctx, b.rdb, b.keys(webhookID), allowArgs(cfg, now)...))
}

func allowArgs(cfg Config, now time.Time) []any {
	return []any{now.UnixMilli(), cfg.SleepWindow.Milliseconds(), cfg.HalfOpenMaxCalls,
		probeLease.Milliseconds(), cfg.ttl().Milliseconds(), halfOpenRetryIn.Milliseconds()}
}

// allowResult decodes allowScript's reply.
func allowResult(webhookID string, cmd *redis.Cmd) (Verdict, Transition, error) {
	res, err := cmd.Slice()
	if err != nil {
		return Verdict{}, "", fmt.Errorf("breaker allow %s: %w", webhookID, err)
	}
	r := reply{vals: res}
	v := Verdict{
		Allowed: r.int(0) == 1,
		Probe:   r.int(1) == 1,
		State:   State(r.str(2)),
		RetryIn: time.Duration(r.int(3)) * time.Millisecond,
	}
	tr := Transition(r.str(4))
	if r.err != nil {
		return Verdict{}, "", fmt.Errorf("breaker allow %s: %w", webhookID, r.err)
	}
	return v, tr, nil
}

// AllowCall is an Allow queued on a pipeline (QueueAllow); Result reads
// its reply once the pipeline has run.
type AllowCall struct {
	call      redisbatch.ScriptCall
	webhookID string
}

// QueueAllow queues Allow on pipe, so that it travels to Redis with other
// calls in one round trip (a pipeline from Pipeline).
func (b *Breaker) QueueAllow(ctx context.Context, pipe redis.Pipeliner, webhookID string, cfg Config, now time.Time) (*AllowCall, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &AllowCall{call: redisbatch.QueueScript(ctx, pipe, b.rdb, allowScript, b.keys(webhookID), allowArgs(cfg, now)...), webhookID: webhookID}, nil
}

// Result is the queued Allow's outcome, as Allow returns it.
func (c *AllowCall) Result() (Verdict, Transition, error) {
	return allowResult(c.webhookID, c.call.Reply())
}

// RecordCall is a Record queued on a pipeline (QueueRecord); Result reads
// its reply once the pipeline has run.
type RecordCall struct {
	call      redisbatch.ScriptCall
	webhookID string
}

// QueueRecord queues Record on pipe, so that it travels to Redis with
// other calls in one round trip.
func (b *Breaker) QueueRecord(ctx context.Context, pipe redis.Pipeliner, webhookID string, cfg Config, now time.Time, success, probe bool) (*RecordCall, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &RecordCall{call: redisbatch.QueueScript(ctx, pipe, b.rdb, recordScript, b.keys(webhookID), recordArgs(cfg, now, success, probe)...), webhookID: webhookID}, nil
}

// Result is the queued Record's outcome, as Record returns it.
func (c *RecordCall) Result() (State, Transition, error) {
	return recordResult(c.webhookID, c.call.Reply())
}

// QueueSuccesses queues on pipe n healthy outcomes of deliveries that were
// not probes, attempted in the unix second second while the circuit was
// closed: they go into the window, and change nothing else. It is Record
// for outcomes that a worker counts locally and sends together (see
// delivery.Guard): such an outcome cannot move a circuit, so it needs no
// answer, and the window counts it the same.
func (b *Breaker) QueueSuccesses(ctx context.Context, pipe redis.Pipeliner, webhookID string, cfg Config, second int64, n int) (*SuccessesCall, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	// Seconds at or before cutoff no longer count at any moment of second
	// or after; the window may be a fraction of a second longer than its
	// whole seconds.
	windowSeconds := int64((cfg.Window + time.Second - 1) / time.Second)
	cutoff := second - windowSeconds - 1
	return &SuccessesCall{call: redisbatch.QueueScript(ctx, pipe, b.rdb, successesScript, b.keys(webhookID)[1:],
		strconv.FormatInt(second, 10)+":s", n, cfg.ttl().Milliseconds(), cutoff, 2*windowSeconds+2), webhookID: webhookID}, nil
}

// SuccessesCall is a QueueSuccesses; Err reads its outcome once the
// pipeline has run.
type SuccessesCall struct {
	call      redisbatch.ScriptCall
	webhookID string
}

// Err is the queued call's error, if any.
func (c *SuccessesCall) Err() error {
	if err := c.call.Reply().Err(); err != nil {
		return fmt.Errorf("breaker successes %s: %w", c.webhookID, err)
	}
	return nil
}

// Pipeline returns a pipeline on the breaker's Redis client.
func (b *Breaker) Pipeline() redis.Pipeliner { return b.rdb.Pipeline() }

// Redis returns the breaker's Redis client.
func (b *Breaker) Redis() redis.UniversalClient { return b.rdb }

// Record counts the outcome of a delivery attempted at now; probe says
// whether Allow let it through as a probe.
//
// Every outcome goes into the sliding window. Closed: the circuit opens
// ("opened") when the window holds at least MinimumThroughput outcomes and
// the error rate reaches ErrorThresholdPercentage. Half-open, probe=true:
// the circuit closes ("closed": window cleared, sleep window back to base)
// once the probe successes reach ceil(HalfOpenSuccessThreshold% x
// HalfOpenMaxCalls), and re-opens ("reopened", sleep window doubled up to
// MaxSleepWindow) once so many probes failed that this can no longer
// happen. Outcomes of deliveries that are not probes, recorded while open or
// half-open, and probe outcomes arriving after their period ended change
// nothing but the window. It returns the state of the circuit after the
// call (read by the same script, so knowing it costs no round trip) and
// the transition made, if any.
func (b *Breaker) Record(ctx context.Context, webhookID string, cfg Config, now time.Time, success, probe bool) (State, Transition, error) {
	if err := cfg.Validate(); err != nil {
		return "", "", err
	}
	return recordResult(webhookID, recordScript.Run(ctx, b.rdb, b.keys(webhookID), recordArgs(cfg, now, success, probe)...))
}

func recordArgs(cfg Config, now time.Time, success, probe bool) []any {
	return []any{now.UnixMilli(), flag(success), flag(probe), cfg.Window.Milliseconds(),
		cfg.MinimumThroughput, cfg.ErrorThresholdPercentage, cfg.SleepWindow.Milliseconds(),
		cfg.maxSleep().Milliseconds(), cfg.probeSuccessesNeeded(), cfg.HalfOpenMaxCalls,
		cfg.ttl().Milliseconds()}
}

func recordResult(webhookID string, cmd *redis.Cmd) (State, Transition, error) {
	res, err := cmd.Slice()
	if err != nil {
		return "", "", fmt.Errorf("breaker record %s: %w", webhookID, err)
	}
	r := reply{vals: res}
	state, tr := State(r.str(0)), Transition(r.str(1))
	if r.err != nil {
		return "", "", fmt.Errorf("breaker record %s: %w", webhookID, r.err)
	}
	return state, tr, nil
}

// Snapshot returns the state of the webhook's circuit at now without
// changing it.
func (b *Breaker) Snapshot(ctx context.Context, webhookID string, cfg Config, now time.Time) (Snapshot, error) {
	if err := cfg.Validate(); err != nil {
		return Snapshot{}, err
	}
	res, err := snapshotScript.Run(ctx, b.rdb, b.keys(webhookID),
		now.UnixMilli(), cfg.Window.Milliseconds(),
	).Slice()
	if err != nil {
		return Snapshot{}, fmt.Errorf("breaker snapshot %s: %w", webhookID, err)
	}
	r := reply{vals: res}
	s := Snapshot{
		State:          State(r.str(0)),
		SleepWindow:    time.Duration(r.int(2)) * time.Millisecond,
		Successes:      int(r.int(3)),
		Failures:       int(r.int(4)),
		ProbesIssued:   int(r.int(5)),
		ProbeSuccesses: int(r.int(6)),
		ProbeFailures:  int(r.int(7)),
	}
	if s.State != Closed {
		s.OpenedAt = time.UnixMilli(r.int(1))
	}
	if s.SleepWindow == 0 {
		s.SleepWindow = cfg.SleepWindow
	}
	if r.err != nil {
		return Snapshot{}, fmt.Errorf("breaker snapshot %s: %w", webhookID, r.err)
	}
	return s, nil
}

// Reset closes the webhook's circuit: the window is cleared and the sleep
// window is back to base. It is the operator's "reset" action.
func (b *Breaker) Reset(ctx context.Context, webhookID string) error {
	if err := b.rdb.Del(ctx, b.keys(webhookID)...).Err(); err != nil {
		return fmt.Errorf("breaker reset %s: %w", webhookID, err)
	}
	return nil
}

// flag encodes a bool as a script argument.
func flag(v bool) int {
	if v {
		return 1
	}
	return 0
}

// reply reads the array a script returned, keeping the first error.
type reply struct {
	vals []any
	err  error
}

func (r *reply) int(i int) int64 {
	if i < len(r.vals) {
		if v, ok := r.vals[i].(int64); ok {
			return v
		}
	}
	if r.err == nil {
		r.err = fmt.Errorf("script reply %v: item %d is not an integer", r.vals, i)
	}
	return 0
}

func (r *reply) str(i int) string {
	if i < len(r.vals) {
		if v, ok := r.vals[i].(string); ok {
			return v
		}
	}
	if r.err == nil {
		r.err = fmt.Errorf("script reply %v: item %d is not a string", r.vals, i)
	}
	return ""
}

// luaWindow is shared by the scripts that read the window. Buckets are unix
// seconds; bucket b counts when b > floor((now - window) / 1000), so an
// outcome older than the window never counts. With prune, the buckets that
// fell out of the window are deleted (in chunks: unpack has a stack limit).
const luaWindow = `
local function window_sum(key, now, window_ms, prune)
  local cutoff = math.floor((now - window_ms) / 1000)
  local all = redis.call('HGETALL', key)
  local s, f, stale = 0, 0, {}
  for i = 1, #all, 2 do
    local field = all[i]
    local n = tonumber(all[i + 1]) or 0
    if (tonumber(string.sub(field, 1, -3)) or 0) <= cutoff then
      stale[#stale + 1] = field
    elseif string.sub(field, -1) == 's' then
      s = s + n
    else
      f = f + n
    end
  end
  if prune then
    for i = 1, #stale, 500 do
      redis.call('HDEL', key, unpack(stale, i, math.min(i + 499, #stale)))
    end
  end
  return s, f
end
`

// allowScript: KEYS = state, window. ARGV = now_ms, base_sleep_ms,
// max_calls, probe_lease_ms, ttl_ms, half_open_retry_ms. Returns {allowed,
// probe, state, retry_in_ms, transition}.
var allowScript = redis.NewScript(`
local now, base, max_calls = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local lease, ttl, retry = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local st = redis.call('HMGET', KEYS[1], 'state', 'opened_at', 'sleep_ms', 'probes_issued', 'half_opened_at')
local state = st[1] or 'closed'
if state == 'closed' then return {1, 0, 'closed', 0, ''} end
local transition, issued = '', tonumber(st[4]) or 0
if state == 'open' then
  local sleep = tonumber(st[3]) or base
  local rest = (tonumber(st[2]) or 0) + sleep - now
  if rest > 0 then return {0, 0, 'open', math.min(rest, sleep), ''} end
  transition = 'half_opened'
elseif issued >= max_calls and now - (tonumber(st[5]) or 0) >= lease then
  transition = 'half_opened'
end
if transition ~= '' then
  redis.call('HSET', KEYS[1], 'state', 'half_open', 'half_opened_at', now,
    'probes_issued', 0, 'probe_successes', 0, 'probe_failures', 0)
  redis.call('PEXPIRE', KEYS[1], ttl)
  issued = 0
end
if issued < max_calls then
  redis.call('HINCRBY', KEYS[1], 'probes_issued', 1)
  redis.call('PEXPIRE', KEYS[1], ttl)
  return {1, 1, 'half_open', 0, transition}
end
return {0, 0, 'half_open', retry, transition}
`)

// recordScript: KEYS = state, window. ARGV = now_ms, success, probe,
// window_ms, min_throughput, threshold_pct, base_sleep_ms, max_sleep_ms,
// probe_successes_needed, max_calls, ttl_ms. Returns {state after the
// call, transition}.
var recordScript = redis.NewScript(luaWindow + `
local now, success, probe = tonumber(ARGV[1]), ARGV[2] == '1', ARGV[3] == '1'
local window_ms, min_tp, threshold = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local base, max_sleep, needed = tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])
local max_calls, ttl = tonumber(ARGV[10]), tonumber(ARGV[11])
local field = string.format('%d', math.floor(now / 1000)) .. (success and ':s' or ':f')
redis.call('HINCRBY', KEYS[2], field, 1)
redis.call('PEXPIRE', KEYS[2], ttl)
local st = redis.call('HMGET', KEYS[1], 'state', 'sleep_ms')
local state = st[1] or 'closed'
if state == 'closed' then
  local s, f = window_sum(KEYS[2], now, window_ms, true)
  if s + f >= min_tp and f * 100 >= threshold * (s + f) then
    redis.call('HSET', KEYS[1], 'state', 'open', 'opened_at', now, 'sleep_ms', base)
    redis.call('PEXPIRE', KEYS[1], ttl)
    return {'open', 'opened'}
  end
  return {'closed', ''}
end
if state ~= 'half_open' or not probe then return {state, ''} end
local n = redis.call('HINCRBY', KEYS[1], success and 'probe_successes' or 'probe_failures', 1)
if success and n >= needed then
  redis.call('DEL', KEYS[1], KEYS[2])
  return {'closed', 'closed'}
end
if not success and n > max_calls - needed then
  local sleep = math.min(2 * (tonumber(st[2]) or base), max_sleep)
  redis.call('HSET', KEYS[1], 'state', 'open', 'opened_at', now, 'sleep_ms', sleep,
    'probes_issued', 0, 'probe_successes', 0, 'probe_failures', 0)
  redis.call('PEXPIRE', KEYS[1], ttl)
  return {'open', 'reopened'}
end
redis.call('PEXPIRE', KEYS[1], ttl)
return {'half_open', ''}
`)

// successesScript: KEYS = window. ARGV = field, n, ttl_ms, cutoff (unix
// second), prune_above. Adds n to the field; once the window holds more
// than prune_above fields, those of seconds at or before cutoff, which
// no longer count, are deleted (Record prunes as it sums; a webhook
// whose outcomes all arrive here needs its own pruning).
var successesScript = redis.NewScript(`
redis.call('HINCRBY', KEYS[1], ARGV[1], tonumber(ARGV[2]))
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[3]))
if redis.call('HLEN', KEYS[1]) > tonumber(ARGV[5]) then
  local cutoff, stale = tonumber(ARGV[4]), {}
  for _, field in ipairs(redis.call('HKEYS', KEYS[1])) do
    if (tonumber(string.sub(field, 1, -3)) or 0) <= cutoff then stale[#stale + 1] = field end
  end
  for i = 1, #stale, 500 do
    redis.call('HDEL', KEYS[1], unpack(stale, i, math.min(i + 499, #stale)))
  end
end
return 0
`)

// snapshotScript: KEYS = state, window. ARGV = now_ms, window_ms. Reads
// only. Returns {state, opened_at_ms, sleep_ms, successes, failures,
// probes_issued, probe_successes, probe_failures}.
var snapshotScript = redis.NewScript(luaWindow + `
local st = redis.call('HMGET', KEYS[1], 'state', 'opened_at', 'sleep_ms',
  'probes_issued', 'probe_successes', 'probe_failures')
local state = st[1] or 'closed'
local s, f = window_sum(KEYS[2], tonumber(ARGV[1]), tonumber(ARGV[2]), false)
local probes = {0, 0, 0}
if state == 'half_open' then
  probes = {tonumber(st[4]) or 0, tonumber(st[5]) or 0, tonumber(st[6]) or 0}
end
return {state, tonumber(st[2]) or 0, tonumber(st[3]) or 0, s, f, probes[1], probes[2], probes[3]}
`)

// releaseScript gives back a probe slot of the current half-open period.
var releaseScript = redis.NewScript(`
if redis.call('HGET', KEYS[1], 'state') == 'half_open' then
  local n = tonumber(redis.call('HGET', KEYS[1], 'probes_issued') or '0')
  if n > 0 then
    redis.call('HINCRBY', KEYS[1], 'probes_issued', -1)
  end
end
return 0
`)

// Release gives back a probe that Allow granted but that was never sent
// (the delivery was refused by a token bucket, its host was busy, or the
// worker shut down), so that the half-open period can still reach its
// verdict.
func (b *Breaker) Release(ctx context.Context, webhookID string) error {
	if err := releaseScript.Run(ctx, b.rdb, b.keys(webhookID)[:1]).Err(); err != nil {
		return fmt.Errorf("release probe of webhook %s: %w", webhookID, err)
	}
	return nil
}
