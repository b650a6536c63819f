package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// A publish bucket is asked for a token at every publish, replay, single
// retry and test event: one Redis round trip per request would cost the
// api more than the rest of its work on the request's way to the group
// commit. So each process takes a tenant's publish tokens from Redis a few
// at a time, a lease, and hands them out locally:
//
//   - A lease holds at most leaseMax tokens and a tenth of the burst (so a
//     bucket of burst 9 or less is asked at every request, as before), and
//     starts at one token. It doubles each time the process uses a lease
//     up before it expires, and halves when one expires unused, so that it
//     follows the process's own rate of publishes.
//   - Leased tokens are good for leaseTTL. What a lease left unused then
//     goes back to the bucket with the process's next request to Redis, in
//     the same round trip.
//   - The bucket stays the one authority: a lease is tokens taken from it,
//     so all processes together never take more than its rate and burst.
//     A token may be used up to leaseTTL after it was taken, and tokens a
//     process stopped using (its tenant went quiet) stay off the bucket
//     until they refill.
//   - A refusal comes from the bucket, with its wait, exactly as without
//     leases: the lease asked for is cut to the whole tokens the bucket
//     holds, and refused only when it holds less than one.
const (
	leaseTTL = 100 * time.Millisecond
	leaseMax = 64
	// renewPause is how long after a failed renewal the bucket is not
	// asked again (its callers fail open meanwhile).
	renewPause = time.Second
)

// ErrLeasePaused answers the requests that arrive just after a lease's
// renewal failed (their callers fail open): the failure itself was
// returned to the request that met it.
var ErrLeasePaused = errors.New("rate limit lease: Redis did not answer just before")

// lease is one process's lease on one publish bucket, or on the slots of
// one set of reservation buckets (reserve_lease.go).
type lease struct {
	// mu is held while the lease is renewed, so that one round trip
	// serves the requests that arrive meanwhile.
	mu sync.Mutex
	// limits are the limits the lease was renewed under.
	limits  string
	tokens  int
	expires time.Time
	// size is how many tokens the next renewal asks for.
	size int
	// failed is when a renewal last failed: for renewPause after it,
	// requests fail at once instead of each waiting for Redis in turn.
	failed time.Time
}

func (l *Limiter) publishLease(now time.Time, tenantID string) *lease {
	return l.leaseOf(now, &l.leases, tenantID)
}

// leaseOf returns the lease of key in leases, a new one if there is none.
func (l *Limiter) leaseOf(now time.Time, leases *sync.Map, key string) *lease {
	l.sweepLeases(now)
	if v, ok := leases.Load(key); ok {
		return v.(*lease)
	}
	v, _ := leases.LoadOrStore(key, &lease{size: 1})
	return v.(*lease)
}

// leaseIdle is how long after its expiry a lease is forgotten, at the
// latest a leaseIdle later still (sweepLeases runs at most once per
// leaseIdle), so that the leases of tenants gone quiet take no memory.
const leaseIdle = time.Minute

// sweepLeases forgets the leases expired for leaseIdle, at most once per
// leaseIdle. A lease forgotten with tokens left (at most a tenth of its
// bucket's burst) leaves them off the bucket until it refills.
func (l *Limiter) sweepLeases(now time.Time) {
	last := l.swept.Load()
	if now.UnixNano()-last < int64(leaseIdle) || !l.swept.CompareAndSwap(last, now.UnixNano()) {
		return
	}
	for _, leases := range []*sync.Map{&l.leases, &l.slotLeases} {
		leases.Range(func(key, v any) bool {
			s := v.(*lease)
			if s.mu.TryLock() {
				if now.Sub(s.expires) > leaseIdle {
					leases.Delete(key)
				}
				s.mu.Unlock()
			}
			return true
		})
	}
}

// leaseCap is the largest lease of a bucket with limit.
func leaseCap(limit Limit) int {
	return max(1, min(leaseMax, limit.Burst/10))
}

// take hands out a leased token, or renews the lease with renew, which
// gives back back unused tokens and asks for up to want: it returns how
// many it got (zero: refused, and the refusal's details are renew's to
// keep). limits names the limits the lease is taken under (a change
// starts the lease over) and cap is the largest lease they allow.
func (s *lease) take(now time.Time, limits string, cap int, renew func(want, back int) (int, error)) (ok bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.limits != limits {
		// A changed limit starts over; tokens leased under the old one
		// are used up first when still good.
		s.limits, s.size = limits, 1
	}
	live := now.Before(s.expires)
	if live && s.tokens > 0 {
		s.tokens--
		return true, nil
	}
	if time.Since(s.failed) < renewPause {
		return false, ErrLeasePaused
	}
	back := 0
	switch {
	case !live && s.tokens > 0:
		back, s.size = s.tokens, s.size/2
	case live:
		s.size *= 2
	}
	s.size = max(1, min(s.size, cap))
	s.tokens = 0
	got, err := renew(s.size, back)
	if err != nil {
		s.failed = time.Now()
		return false, err
	}
	if got == 0 {
		return false, nil
	}
	s.tokens, s.expires = got-1, now.Add(leaseTTL)
	return true, nil
}

// takePublish hands out a token of publish bucket b.
func (s *lease) takePublish(ctx context.Context, l *Limiter, now time.Time, b Bucket) (ok bool, wait time.Duration, err error) {
	ok, err = s.take(now, limitsOf(b), leaseCap(b.Limit), func(want, back int) (got int, err error) {
		ctx, cancel := context.WithTimeout(ctx, l.publishTimeout)
		defer cancel()
		got, wait, err = l.renew(ctx, now, b, want, back)
		return got, err
	})
	return ok, wait, err
}

// limitsOf names the limits of buckets, to tell when they change.
func limitsOf(buckets ...Bucket) string {
	var b []byte
	for _, k := range buckets {
		b = strconv.AppendInt(b, int64(k.Limit.PerMinute), 10)
		b = append(b, '/')
		b = strconv.AppendInt(b, int64(k.Limit.Burst), 10)
		b = append(b, ' ')
	}
	return string(b)
}

// renew gives back tokens to b's bucket, then takes up to want of its
// whole tokens: got is how many (at least one), or zero and the wait for
// one.
func (l *Limiter) renew(ctx context.Context, now time.Time, b Bucket, want, back int) (got int, wait time.Duration, err error) {
	keys, args, err := l.scriptInput(takeSpace, clockArgs(now), []Bucket{b})
	if err != nil {
		return 0, 0, err
	}
	args = append(args, want, back)
	res, err := leaseScript.Run(ctx, l.rdb, keys, args...).Int64Slice()
	if err != nil {
		return 0, 0, fmt.Errorf("rate limit lease %s: %w", keys, err)
	}
	if len(res) != 2 {
		return 0, 0, fmt.Errorf("rate limit lease %s: unexpected reply %v", keys, res)
	}
	return int(res[0]), time.Duration(res[1]) * time.Millisecond, nil
}

// leaseScript: KEYS = one bucket of Take's. ARGV = now_ms, ttl_margin_ms,
// per_minute, burst, want, back. The bucket is refilled to now as in
// takeScript and given back back tokens (up to its burst); then up to want
// of its whole tokens are taken. Returns {got, wait_ms}: got >= 1, or 0
// with the wait until it holds one.
var leaseScript = redis.NewScript(`
local UNIT = ` + strconv.Itoa(unitsPerToken) + `
local now, margin = tonumber(ARGV[1]), tonumber(ARGV[2])
local rate, cap = tonumber(ARGV[3]), tonumber(ARGV[4]) * UNIT
local want, back = tonumber(ARGV[5]), tonumber(ARGV[6])
local key = KEYS[1]
local v = redis.call('HMGET', key, 't', 'ts')
local tokens, ts = tonumber(v[1]), tonumber(v[2])
if tokens == nil or ts == nil then tokens, ts = cap, now end
if now > ts then tokens, ts = tokens + (now - ts) * rate, now end
tokens = math.min(tokens + back * UNIT, cap)
local got = math.min(want, math.floor(tokens / UNIT))
local wait = 0
if got < 1 then
  got, wait = 0, math.ceil((UNIT - tokens) / rate)
  if back == 0 then return {0, wait} end
end
tokens = tokens - got * UNIT
redis.call('HSET', key, 't', string.format('%d', tokens), 'ts', string.format('%d', ts))
redis.call('PEXPIRE', key, math.ceil((cap - tokens) / rate) + margin)
return {got, wait}
`)
