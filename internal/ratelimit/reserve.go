package ratelimit

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hookline/hookline/internal/redisbatch"
)

// Reserve reserves one request in every bucket at now and returns when it
// may be sent: the earliest time at or after now at which every bucket
// allows one more request given the reservations already made. Each
// bucket's schedule moves one emission interval past that time, so the next
// Reserve gets the slot after it; a fresh or idle bucket gives Burst slots
// at now before spacing them. All buckets are reserved in one script,
// atomically, so concurrent callers each get their own place in the
// schedule.
//
// at is now itself when the request may go at once; a later slot is a whole
// unix millisecond. Reserve with no bucket returns now.
func (l *Limiter) Reserve(ctx context.Context, now time.Time, buckets ...Bucket) (at time.Time, err error) {
	if len(buckets) == 0 {
		return now, nil
	}
	keys, args, err := l.scriptInput(reserveSpace, clockArgs(now), buckets)
	if err != nil {
		return time.Time{}, err
	}
	return (&ReserveCall{call: redisbatch.RunScript(ctx, l.rdb, reserveScript, keys, args...), now: now, keys: keys}).Result()
}

// ReserveCall is a Reserve queued on a pipeline (QueueReserve); Result reads
// its reply once the pipeline has run.
type ReserveCall struct {
	call redisbatch.ScriptCall
	now  time.Time
	keys []string
}

// QueueReserve queues a Reserve in every bucket on pipe, so that it travels
// to Redis with other calls in one round trip. With no bucket it returns
// nil: nothing to reserve, send now.
//
// The reservation goes by the script's digest (redisbatch.ScriptCall).
func (l *Limiter) QueueReserve(ctx context.Context, pipe redis.Pipeliner, now time.Time, buckets ...Bucket) (*ReserveCall, error) {
	if len(buckets) == 0 {
		return nil, nil
	}
	keys, args, err := l.scriptInput(reserveSpace, clockArgs(now), buckets)
	if err != nil {
		return nil, err
	}
	return &ReserveCall{call: redisbatch.QueueScript(ctx, pipe, l.rdb, reserveScript, keys, args...), now: now, keys: keys}, nil
}

// Result is the queued Reserve's outcome, as Reserve returns it. If Redis
// did not have the script, nothing was reserved, and Result makes the
// reservation itself in one more round trip (with the context given to
// QueueReserve).
func (c *ReserveCall) Result() (at time.Time, err error) {
	ms, err := c.call.Reply().Int64()
	if err != nil {
		return time.Time{}, fmt.Errorf("rate limit reserve %s: %w", c.keys, err)
	}
	if ms <= c.now.UnixMilli() {
		return c.now, nil
	}
	return time.UnixMilli(ms), nil
}

// CancelReservation gives back, in every bucket, the slot a Reserve returned
// as at for a request that will not be sent (its delivery was held back by
// an open circuit, or deleted). Slots handed out to other reservations do
// not move; only the schedule for the next Reserve does, one emission
// interval earlier but never to before now. A schedule at or before now is
// an idle bucket, which allows its burst and no more, so cancels cannot bank
// unused slots however many there are.
//
// One interval back is exactly the schedule the bucket would have without
// the cancelled reservation when that was the bucket's latest, or when every
// later one waited for its slot in this bucket. Otherwise:
//
//   - With Burst 1, a later reservation sits a whole interval after the
//     cancelled one and keeps the schedule where it is: the bucket is left
//     alone unless at is its latest slot (at + interval >= schedule), or the
//     next Reserve would share that later reservation's slot.
//   - With a larger burst, a later reservation that found room to spare
//     (the bucket was idle, or another bucket set its slot) would have
//     absorbed part of the interval, so the bucket may let one request per
//     cancelled reservation through up to one interval early. Doing better
//     would take remembering every slot.
//
// A missing bucket, or one whose schedule has passed, is left alone. The
// limits given apply, as on Reserve, even if they changed since at was
// reserved.
func (l *Limiter) CancelReservation(ctx context.Context, now, at time.Time, buckets ...Bucket) error {
	if len(buckets) == 0 {
		return nil
	}
	head := append(clockArgs(now), at.UnixMilli())
	keys, args, err := l.scriptInput(reserveSpace, head, buckets)
	if err != nil {
		return err
	}
	if err := cancelScript.Run(ctx, l.rdb, keys, args...).Err(); err != nil {
		return fmt.Errorf("rate limit cancel reservation %s: %w", keys, err)
	}
	return nil
}

// luaTat is the arithmetic of a bucket's theoretical arrival time, shared
// by the reservation scripts. A time is {ms, u, p}: ms + u/p milliseconds
// with 0 <= u < p, p being the bucket's per_minute, so an emission interval
// is exactly EI units. Every value stays an integer a double holds exactly
// (below 2^53) for per_minute values below 90 million, products of two of
// them included.
const luaTat = `
local EI = 60000
local function norm(ms, u, p)
  local r = u % p
  return {ms + (u - r) / p, r, p}
end
local function add(t, units) return norm(t[1], t[2] + units, t[3]) end
local function before(a, b)
  return a[1] < b[1] or (a[1] == b[1] and a[2] * b[3] < b[2] * a[3])
end
-- rescale counts t in 1/p ms, rounding up: later, never earlier.
local function rescale(t, p)
  if t[3] == p then return t end
  local n = t[2] * p
  local r = n % t[3]
  local u = (n - r) / t[3]
  if r > 0 then u = u + 1 end
  return norm(t[1], u, p)
end
local function read(key, p)
  local v = redis.call('HMGET', key, 'ms', 'u', 'p')
  local ms, u, q = tonumber(v[1]), tonumber(v[2]), tonumber(v[3])
  if ms == nil or u == nil or q == nil then return nil end
  return rescale({ms, u, q}, p)
end
local function save(key, tat, now, margin)
  redis.call('HSET', key, 'ms', string.format('%d', tat[1]),
    'u', string.format('%d', tat[2]), 'p', string.format('%d', tat[3]))
  local left = tat[1] - now
  if tat[2] > 0 then left = left + 1 end
  redis.call('PEXPIRE', key, math.max(left, 0) + margin)
end
-- reserve gives one request its slot in the buckets keys, whose tats and
-- bursts are given: the latest time at which each allows it, never before
-- now; each tat becomes max(tat, slot) + interval. Returns the slot in
-- unix ms, rounded up to a whole millisecond; tats keep the exact slot so
-- that the rounding never accumulates.
local function reserve(keys, tats, bursts, now, margin)
  local slot = {now, 0, 1}
  for i = 1, #keys do
    local allowed = add(tats[i], -(bursts[i] - 1) * EI)
    if before(slot, allowed) then slot = allowed end
  end
  for i, key in ipairs(keys) do
    local tat = tats[i]
    if before(tat, slot) then tat = rescale(slot, tat[3]) end
    save(key, add(tat, EI), now, margin)
  end
  if slot[2] > 0 then return slot[1] + 1 end
  return slot[1]
end
`

// reserveScript: KEYS = the buckets. ARGV = now_ms, ttl_margin_ms, then per
// bucket per_minute, burst. A bucket allows its next request at
// tat - (burst-1) interval, never before now; the slot is the latest of
// these (luaTat's reserve). Returns the slot in unix ms.
var reserveScript = redis.NewScript(luaTat + `
local now, margin = tonumber(ARGV[1]), tonumber(ARGV[2])
local tats, bursts = {}, {}
for i, key in ipairs(KEYS) do
  local p = tonumber(ARGV[1 + 2 * i])
  -- A tat before now needs no clamping: slot is never before now.
  tats[i], bursts[i] = read(key, p) or {now, 0, p}, tonumber(ARGV[2 + 2 * i])
end
return reserve(KEYS, tats, bursts, now, margin)
`)

// cancelScript: KEYS = the buckets. ARGV = now_ms, ttl_margin_ms, at_ms,
// then per bucket per_minute, burst. Moves each bucket's tat back one
// interval, not below now, as CancelReservation describes. Returns 0.
var cancelScript = redis.NewScript(luaTat + `
local now, margin, at = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
for i, key in ipairs(KEYS) do
  local p, burst = tonumber(ARGV[2 + 2 * i]), tonumber(ARGV[3 + 2 * i])
  local floor = {now, 0, p}
  local tat = read(key, p)
  if tat ~= nil and before(floor, tat) then
    local back = add(tat, -EI)
    -- Burst 1: a slot before tat - interval is not the latest (see above;
    -- at is rounded up to a millisecond, less than one interval).
    if burst == 1 and before({at, 0, 1}, back) then back = tat end
    if before(back, floor) then back = floor end
    save(key, back, now, margin)
  end
end
return 0
`)
