// Package ratelimit is the rate limits of docs/DESIGN.md §8, kept in Redis so
// that every worker and API instance draws from the same buckets. It offers
// two mechanisms over the same Limit, for two kinds of caller.
//
// Take is for callers that answer "not now": the API's publish limit takes a
// token or answers 429 with the wait. Take draws one token from several
// buckets at once (a webhook's and its tenant's) in one Lua script: either
// every bucket gives a token or none does.
//
// Reserve is for deliveries, which must go out eventually and should not
// spin through the broker asking again and again. Each Reserve is given its
// own slot, the earliest moment every bucket allows one more request after
// the reservations already made (GCRA's theoretical arrival time), and the
// delivery waits for exactly that slot once: 3,000 deliveries into a
// 60/minute webhook get 3,000 distinct slots a second apart instead of
// retrying thousands of times. CancelReservation gives a slot back when its
// delivery will not be sent.
//
// Time is never read from Redis: callers pass now, which keeps both
// mechanisms deterministic in tests.
//
// Take's buckets are hashes, <prefix>ratelimit:<key>, with two integer
// fields: t, the tokens held in units of 1/60000 token (so a limit of N per
// minute refills exactly N units per millisecond and no float is ever
// stored), and ts, the unix millisecond the tokens were counted at. A missing
// bucket is a full one. Every write sets the key's TTL to the time it takes
// to refill fully plus ttlMargin, after which the bucket would be full
// anyway.
//
// Reserve's buckets live apart, in <prefix>reserve:<key>, because they hold
// a time rather than tokens: the bucket's theoretical arrival time (tat),
// when its schedule is next free, as three integer fields: ms, u and p, for
// ms + u/p milliseconds, p being the PerMinute it was written with. In units
// of 1/p ms an emission interval (60000/p ms) is exactly 60000 units, the
// same scale as Take's tokens, so a limit such as 7 per minute never drifts
// however long the backlog, and no float is ever stored. A missing bucket, or
// one whose tat has passed, is idle. Every write sets the key's TTL to the
// time until tat plus ttlMargin, after which the bucket would be idle anyway.
//
// Because one script touches every bucket of a call, the buckets of a call
// must live on one Redis node: on a Redis Cluster, in one hash slot. So the
// keys of a call of several buckets must share one hash tag (the part of a
// key in braces, which alone decides its slot), and every call checks that
// they do, whatever the Redis, so that a call that works on one server
// works on a cluster too. A delivery's two buckets carry its tenant as their
// tag (TenantKey, WebhookKey): all the delivery buckets of a tenant are in
// one slot, each tenant's in its own.
package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hookline/hookline/internal/redisbatch"
)

// unitsPerToken is the fixed-point scale of stored tokens: a bucket
// refilling PerMinute tokens a minute gains PerMinute units a millisecond.
const unitsPerToken = 60_000

// ttlMargin is added to the time until a bucket would be full (Take) or idle
// (Reserve) when setting its key's TTL.
const ttlMargin = 10 * time.Second

// ErrInvalidBucket is returned (wrapped) by every call given a bucket with
// no key, a key given twice, or a limit below one request.
var ErrInvalidBucket = errors.New("invalid rate limit bucket")

// Limit is the size and refill rate of a token bucket.
type Limit struct {
	// PerMinute is how many tokens the bucket regains per minute (>= 1),
	// continuously: 60 per minute is one every second.
	PerMinute int
	// Burst is how many tokens the bucket holds at most (>= 1); a new or
	// idle bucket is full.
	Burst int
}

// PerSecond returns the Limit of rps tokens per second holding at most
// burst.
func PerSecond(rps, burst int) Limit {
	return Limit{PerMinute: rps * 60, Burst: burst}
}

// defaultPublishTimeout bounds asking for a publish token: a publish that
// cannot be limited in time goes ahead (its caller fails open).
const defaultPublishTimeout = 100 * time.Millisecond

// TakePublish takes a token from the bucket of tenantID's publish rate
// limit (rps, burst), which every publish, replay, single retry and test
// event of the tenant takes from, waiting at most defaultPublishTimeout for Redis.
// Tokens come from the process's lease on the bucket when it holds one
// (see lease.go), so that most publishes need no Redis round trip.
func (l *Limiter) TakePublish(ctx context.Context, now time.Time, tenantID string, rps, burst int) (ok bool, wait time.Duration, err error) {
	return l.publishLease(now, tenantID).takePublish(ctx, l, now, Bucket{Key: "publish:" + tenantID, Limit: PerSecond(rps, burst)})
}

// TenantKey is the key of tenantID's delivery bucket.
func TenantKey(tenantID string) string { return "{" + tenantID + "}:tenant" }

// WebhookKey is the key of the delivery bucket of webhookID, a webhook of
// tenantID. It carries the tenant's hash tag, as TenantKey does, so that a
// delivery draws from both buckets in one script on a cluster too.
func WebhookKey(tenantID, webhookID string) string {
	return "{" + tenantID + "}:webhook:" + webhookID
}

// Bucket names one token bucket and its limit.
type Bucket struct {
	// Key identifies the bucket under the Limiter's prefix, for example
	// WebhookKey or TenantKey. The buckets of one call must share a hash
	// tag (see the package doc); a call of one bucket needs none.
	Key string
	// Limit is applied on every call, so a changed limit applies at once.
	Limit Limit
}

// Limiter takes tokens from, and reserves slots in, buckets kept in Redis.
// It is safe for concurrent use.
type Limiter struct {
	rdb    redis.UniversalClient
	prefix string
	// leases are the publish buckets' leases of this process, by tenant;
	// slotLeases its leases on reservation slots, by set of buckets;
	// swept is when they were last swept (unix ns).
	leases     sync.Map
	slotLeases sync.Map
	swept      atomic.Int64
	// publishTimeout is how long TakePublish waits for Redis:
	// defaultPublishTimeout.
	publishTimeout time.Duration
}

// New returns a Limiter keeping its buckets in rdb under keys that start
// with prefix.
func New(rdb redis.UniversalClient, prefix string) *Limiter {
	return &Limiter{rdb: rdb, prefix: prefix, publishTimeout: defaultPublishTimeout}
}

// Take takes one token from every bucket at now, atomically: ok when every
// bucket had a token and one was taken from each. Otherwise nothing is
// taken, and wait is how long until every bucket will have a token again
// (the longest of their waits). Take with no bucket is always ok.
func (l *Limiter) Take(ctx context.Context, now time.Time, buckets ...Bucket) (ok bool, wait time.Duration, err error) {
	if len(buckets) == 0 {
		return true, 0, nil
	}
	keys, args, err := l.scriptInput(takeSpace, clockArgs(now), buckets)
	if err != nil {
		return false, 0, err
	}
	return (&TakeCall{call: redisbatch.RunScript(ctx, l.rdb, takeScript, keys, args...), keys: keys}).Result()
}

// TakeCall is a Take queued on a pipeline (QueueTake); Result reads its
// reply once the pipeline has run.
type TakeCall struct {
	call redisbatch.ScriptCall
	keys []string
}

// QueueTake queues a Take of one token from every bucket on pipe, so that
// it travels to Redis with other calls in one round trip. With no bucket
// it returns nil: nothing to take.
func (l *Limiter) QueueTake(ctx context.Context, pipe redis.Pipeliner, now time.Time, buckets ...Bucket) (*TakeCall, error) {
	if len(buckets) == 0 {
		return nil, nil
	}
	keys, args, err := l.scriptInput(takeSpace, clockArgs(now), buckets)
	if err != nil {
		return nil, err
	}
	return &TakeCall{call: redisbatch.QueueScript(ctx, pipe, l.rdb, takeScript, keys, args...), keys: keys}, nil
}

// Result is the queued Take's outcome, as Take returns it.
func (c *TakeCall) Result() (ok bool, wait time.Duration, err error) {
	res, err := c.call.Reply().Int64Slice()
	if err != nil {
		return false, 0, fmt.Errorf("rate limit take %s: %w", c.keys, err)
	}
	if len(res) != 2 {
		return false, 0, fmt.Errorf("rate limit take %s: unexpected reply %v", c.keys, res)
	}
	return res[0] == 1, time.Duration(res[1]) * time.Millisecond, nil
}

// Refund gives back the token a successful Take drew from every bucket
// (the attempt it was for did not happen). A bucket never exceeds its
// burst, and a bucket whose key has expired is full already.
func (l *Limiter) Refund(ctx context.Context, now time.Time, buckets ...Bucket) error {
	if len(buckets) == 0 {
		return nil
	}
	keys, args, err := l.scriptInput(takeSpace, clockArgs(now), buckets)
	if err != nil {
		return err
	}
	if err := refundScript.Run(ctx, l.rdb, keys, args...).Err(); err != nil {
		return fmt.Errorf("rate limit refund %s: %w", keys, err)
	}
	return nil
}

// The key namespaces of the two mechanisms, under the Limiter's prefix.
const (
	takeSpace    = "ratelimit:"
	reserveSpace = "reserve:"
)

// clockArgs is the head of every script's ARGV: now and the TTL margin, in
// milliseconds.
func clockArgs(now time.Time) []any {
	return []any{now.UnixMilli(), ttlMargin.Milliseconds()}
}

// scriptInput validates the buckets and lays them out for a script: KEYS
// are the buckets under space, ARGV is head followed by each bucket's
// per_minute and burst.
func (l *Limiter) scriptInput(space string, head []any, buckets []Bucket) ([]string, []any, error) {
	keys := make([]string, len(buckets))
	args := make([]any, 0, len(head)+2*len(buckets))
	args = append(args, head...)
	seen := make(map[string]bool, len(buckets))
	for i, b := range buckets {
		switch {
		case b.Key == "":
			return nil, nil, fmt.Errorf("%w: empty key", ErrInvalidBucket)
		case seen[b.Key]:
			return nil, nil, fmt.Errorf("%w: %q given twice", ErrInvalidBucket, b.Key)
		case b.Limit.PerMinute < 1 || b.Limit.Burst < 1:
			return nil, nil, fmt.Errorf("%w: %q: %d per minute, burst %d", ErrInvalidBucket, b.Key, b.Limit.PerMinute, b.Limit.Burst)
		}
		seen[b.Key] = true
		keys[i] = l.prefix + space + b.Key
		if tag := hashTag(keys[i]); i > 0 && (tag == "" || tag != hashTag(keys[0])) {
			return nil, nil, fmt.Errorf("%w: %q and %q do not share a hash tag, and one script must find them in one cluster slot",
				ErrInvalidBucket, buckets[0].Key, b.Key)
		}
		args = append(args, b.Limit.PerMinute, b.Limit.Burst)
	}
	return keys, args, nil
}

// hashTag is the part of key that decides its Redis Cluster slot when it
// is not the whole key: what lies between the first "{" and the first "}"
// after it, if that is not empty. Keys with the same tag share a slot.
func hashTag(key string) string {
	open := strings.IndexByte(key, '{')
	if open < 0 {
		return ""
	}
	n := strings.IndexByte(key[open+1:], '}')
	if n <= 0 {
		return ""
	}
	return key[open+1 : open+1+n]
}

// takeScript: KEYS = the buckets. ARGV = now_ms, ttl_margin_ms, then per
// bucket per_minute, burst. Each bucket is refilled to now (never back in
// time: ts only moves forward), then either all buckets hold a token and
// each loses one, or nothing is written and the reply carries the wait.
// Returns {ok, wait_ms}.
var takeScript = redis.NewScript(`
local UNIT = ` + strconv.Itoa(unitsPerToken) + `
local now, margin = tonumber(ARGV[1]), tonumber(ARGV[2])
local buckets, wait = {}, 0
for i, key in ipairs(KEYS) do
  local rate, cap = tonumber(ARGV[1 + 2 * i]), tonumber(ARGV[2 + 2 * i]) * UNIT
  local v = redis.call('HMGET', key, 't', 'ts')
  local tokens, ts = tonumber(v[1]), tonumber(v[2])
  if tokens == nil or ts == nil then tokens, ts = cap, now end
  if now > ts then tokens, ts = tokens + (now - ts) * rate, now end
  tokens = math.min(tokens, cap)
  if tokens < UNIT then
    wait = math.max(wait, math.ceil((UNIT - tokens) / rate))
  end
  buckets[i] = {tokens - UNIT, ts, cap, rate}
end
if wait > 0 then return {0, wait} end
for i, key in ipairs(KEYS) do
  local b = buckets[i]
  redis.call('HSET', key, 't', string.format('%d', b[1]), 'ts', string.format('%d', b[2]))
  redis.call('PEXPIRE', key, math.ceil((b[3] - b[1]) / b[4]) + margin)
end
return {1, 0}
`)

// refundScript: the input of takeScript. Adds one token to every bucket
// that exists, up to its burst; the refill time ts is left alone.
var refundScript = redis.NewScript(`
local UNIT = ` + strconv.Itoa(unitsPerToken) + `
for i, key in ipairs(KEYS) do
  local cap = tonumber(ARGV[2 + 2 * i]) * UNIT
  local t = tonumber(redis.call('HGET', key, 't'))
  if t ~= nil then
    redis.call('HSET', key, 't', string.format('%d', math.min(t + UNIT, cap)))
  end
end
return 0
`)
