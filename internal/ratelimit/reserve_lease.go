package ratelimit

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hookline/hookline/internal/redisbatch"
)

// Every delivery reserves a slot in its webhook's and its tenant's
// buckets. Most slots are at once, and asking Redis for each one would be
// a round trip per delivery; so, as for publish tokens (lease.go), each
// worker leases slots at once a few at a time, per set of buckets, and
// hands them out locally:
//
//   - A lease is slots at the moment it is renewed, taken from every
//     bucket of the set in one script: as many as every bucket allows at
//     once (each bucket's schedule moves one emission interval per slot,
//     as if each had been reserved), up to the lease's size. Its size
//     follows the worker's use of it as a publish lease's does, bounded
//     by a tenth of the smallest burst of the set, so a set with a burst
//     under 20 is asked at every delivery, exactly as before leases.
//   - A slot is used up to leaseTTL after it was taken. What a lease left
//     unused goes back with its next renewal: each bucket's schedule moves
//     back one interval per slot, never to before now, as
//     CancelReservation does.
//   - When a bucket allows no slot at once, the renewal reserves the next
//     slot for the delivery in the same script, exactly as Reserve.

// ReserveLeased is Reserve from the worker's lease on buckets: at is now
// (leased true) when the lease holds a slot, or when its renewal took
// some; otherwise the renewal reserved the delivery's own slot, later than
// now, as Reserve would have. send runs the renewal's queued call in a
// pipeline (the caller's, to share the round trip with its other calls),
// and is called only when the lease needs renewing; nil sends it alone.
// After a renewal failed, calls fail at once for a while (the caller
// fails open).
//
// A slot that will not be used, leased or not, goes back with
// CancelReservation (at: the slot, or now for a leased one).
func (l *Limiter) ReserveLeased(ctx context.Context, now time.Time, send func(queue func(redis.Pipeliner)), buckets ...Bucket) (at time.Time, leased bool, err error) {
	if len(buckets) == 0 {
		return now, false, nil
	}
	keys, args, err := l.scriptInput(reserveSpace, clockArgs(now), buckets)
	if err != nil {
		return time.Time{}, false, err
	}
	if send == nil {
		send = func(queue func(redis.Pipeliner)) {
			pipe := l.rdb.Pipeline()
			queue(pipe)
			_, _ = pipe.Exec(ctx)
		}
	}
	limits := limitsOf(buckets...)
	at = now
	ok, err := l.leaseOf(now, &l.slotLeases, strings.Join(keys, " ")).take(now, limits, slotLeaseCap(buckets),
		func(want, back int) (int, error) {
			// ARGV: now, margin, want, back, then the buckets' limits.
			a := append(append(append(make([]any, 0, len(args)+2), args[:2]...), want, back), args[2:]...)
			var call redisbatch.ScriptCall
			send(func(pipe redis.Pipeliner) {
				call = redisbatch.QueueScript(ctx, pipe, l.rdb, reserveLeaseScript, keys, a...)
			})
			res, err := call.Reply().Int64Slice()
			if err != nil {
				return 0, fmt.Errorf("rate limit lease %s: %w", keys, err)
			}
			if len(res) != 2 {
				return 0, fmt.Errorf("rate limit lease %s: unexpected reply %v", keys, res)
			}
			if res[0] == 0 && res[1] > now.UnixMilli() {
				at = time.UnixMilli(res[1])
			}
			return int(res[0]), nil
		})
	if err != nil {
		return time.Time{}, false, err
	}
	return at, ok, nil
}

// slotLeaseCap is the largest lease on buckets: a tenth of the smallest
// burst, at most leaseMax, at least one.
func slotLeaseCap(buckets []Bucket) int {
	c := leaseMax
	for _, b := range buckets {
		c = min(c, leaseCap(b.Limit))
	}
	return c
}

// reserveLeaseScript: KEYS = the buckets. ARGV = now_ms, ttl_margin_ms,
// want, back, then per bucket per_minute, burst. Each bucket's tat is
// first moved back back intervals, never to before now (a tat at or
// before now is idle and left alone). A bucket allows n slots at once,
// n = burst - ceil((tat - now) / interval); got is the least of these and
// want. With got >= 1 every tat moves got intervals on (from now if it was
// before) and the reply is {got, 0}; otherwise one slot is reserved
// (luaTat's reserve, as reserveScript) and the reply is {0, slot_ms}.
var reserveLeaseScript = redis.NewScript(luaTat + `
local now, margin = tonumber(ARGV[1]), tonumber(ARGV[2])
local want, back = tonumber(ARGV[3]), tonumber(ARGV[4])
local got, tats, bursts = want, {}, {}
for i, key in ipairs(KEYS) do
  local p, burst = tonumber(ARGV[3 + 2 * i]), tonumber(ARGV[4 + 2 * i])
  local floor = {now, 0, p}
  local tat = read(key, p) or floor
  if before(tat, floor) then tat = floor end
  if back > 0 then
    tat = add(tat, -back * EI)
    if before(tat, floor) then tat = floor end
  end
  tats[i], bursts[i] = tat, burst
  local free = burst - math.ceil(((tat[1] - now) * p + tat[2]) / EI)
  if free < got then got = free end
end
if got >= 1 then
  for i, key in ipairs(KEYS) do save(key, add(tats[i], got * EI), now, margin) end
  return {got, 0}
end
return {0, reserve(KEYS, tats, bursts, now, margin)}
`)
