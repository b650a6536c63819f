package ratelimit

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/redistest"
)

// t0 is the fake clock's origin; tests pass t0.Add(offset) as now.
var t0 = time.UnixMilli(1_700_000_000_000)

type fixture struct {
	t      *testing.T
	ctx    context.Context
	rdb    redis.UniversalClient
	mode   redistest.Mode
	prefix string
	l      *Limiter
}

func newFixture(t *testing.T, mode redistest.Mode) *fixture {
	t.Helper()
	t.Parallel()
	rdb := redistest.Client(t, mode)
	prefix := redistest.PrefixOn(t, rdb)
	return &fixture{t: t, ctx: context.Background(), rdb: rdb, mode: mode, prefix: prefix, l: New(rdb, prefix)}
}

func (f *fixture) take(now time.Time, buckets ...Bucket) (bool, time.Duration) {
	f.t.Helper()
	ok, wait, err := f.l.Take(f.ctx, now, buckets...)
	require.NoError(f.t, err)
	return ok, wait
}

// requireTakes requires n successful Takes at now.
func (f *fixture) requireTakes(n int, now time.Time, buckets ...Bucket) {
	f.t.Helper()
	for i := range n {
		ok, wait := f.take(now, buckets...)
		require.True(f.t, ok, "take %d of %d", i+1, n)
		require.Zero(f.t, wait)
	}
}

// requireRefused requires a refused Take at now with the given wait.
func (f *fixture) requireRefused(wait time.Duration, now time.Time, buckets ...Bucket) {
	f.t.Helper()
	ok, got := f.take(now, buckets...)
	require.False(f.t, ok)
	require.Equal(f.t, wait, got)
}

var webhookLimit = Limit{PerMinute: 100, Burst: 20} // docs/DESIGN.md §8 default: a token every 600 ms

func TestBurstThenRefusedWithTheWait(t *testing.T) {
	redistest.EachMode(t, func(t *testing.T, mode redistest.Mode) {
		f := newFixture(t, mode)
		wh := Bucket{Key: WebhookKey("1", "1"), Limit: webhookLimit}
		f.requireTakes(20, t0, wh)
		f.requireRefused(600*time.Millisecond, t0, wh)
		f.requireRefused(300*time.Millisecond, t0.Add(300*time.Millisecond), wh)
		f.requireRefused(time.Millisecond, t0.Add(599*time.Millisecond), wh)
		f.requireTakes(1, t0.Add(600*time.Millisecond), wh)
		f.requireRefused(600*time.Millisecond, t0.Add(600*time.Millisecond), wh)
	})
}

func TestRefillOverTime(t *testing.T) {
	redistest.EachMode(t, func(t *testing.T, mode redistest.Mode) {
		f := newFixture(t, mode)
		wh := Bucket{Key: WebhookKey("1", "1"), Limit: webhookLimit}
		f.requireTakes(20, t0, wh)
		now := t0.Add(6 * time.Second)
		f.requireTakes(10, now, wh)
		f.requireRefused(600*time.Millisecond, now, wh)
		f.requireRefused(600*time.Millisecond, t0, wh) // the clock going back refills nothing

		now = now.Add(time.Hour)
		f.requireTakes(20, now, wh)
		f.requireRefused(600*time.Millisecond, now, wh) // refill stops at Burst
	})
}

func TestAtMostBurstPlusRate(t *testing.T) {
	redistest.EachMode(t, func(t *testing.T, mode redistest.Mode) {
		t.Parallel()
		for _, burst := range []int{1, 5, 20} {
			t.Run(fmt.Sprintf("burst %d", burst), func(t *testing.T) {
				f := newFixture(t, mode)
				b := Bucket{Key: WebhookKey("1", "1"), Limit: Limit{PerMinute: 60, Burst: burst}}
				var grants []time.Duration
				for at := time.Duration(0); at <= time.Minute; at += 10 * time.Millisecond {
					if ok, _ := f.take(t0.Add(at), b); ok {
						grants = append(grants, at)
					}
				}
				require.Len(t, grants, burst+60, "a minute holds the burst and 60 refills")
				for i, from := range grants {
					inSecond := 0
					for _, g := range grants[i:] {
						if g < from+time.Second {
							inSecond++
						}
					}
					require.LessOrEqual(t, inSecond, burst+1, "the second from %s", from)
				}
			})
		}
	})
}

func TestTwoBucketsAllOrNothing(t *testing.T) {
	redistest.EachMode(t, func(t *testing.T, mode redistest.Mode) {
		t.Parallel()
		t.Run("the tenant refuses", func(t *testing.T) {
			f := newFixture(t, mode)
			wh := Bucket{Key: WebhookKey("1", "1"), Limit: Limit{PerMinute: 100, Burst: 5}}
			tenant := Bucket{Key: TenantKey("1"), Limit: Limit{PerMinute: 1000, Burst: 3}}
			f.requireTakes(3, t0, wh, tenant)
			f.requireRefused(60*time.Millisecond, t0, wh, tenant)
			f.requireRefused(60*time.Millisecond, t0, tenant, wh)
			f.requireTakes(2, t0, wh) // the refusals took nothing from the webhook
			f.requireRefused(600*time.Millisecond, t0, wh)
			f.requireRefused(600*time.Millisecond, t0, wh, tenant) // the longest wait
		})
		t.Run("the webhook refuses", func(t *testing.T) {
			f := newFixture(t, mode)
			wh := Bucket{Key: WebhookKey("1", "1"), Limit: Limit{PerMinute: 100, Burst: 1}}
			tenant := Bucket{Key: TenantKey("1"), Limit: Limit{PerMinute: 1000, Burst: 5}}
			f.requireTakes(1, t0, wh, tenant)
			for range 10 {
				f.requireRefused(600*time.Millisecond, t0, wh, tenant)
			}
			f.requireTakes(4, t0, tenant) // the refusals took nothing from the tenant
			f.requireRefused(60*time.Millisecond, t0, tenant)
		})
	})
}

func TestTenantBucketHoldsAcrossWebhooks(t *testing.T) {
	redistest.EachMode(t, func(t *testing.T, mode redistest.Mode) {
		f := newFixture(t, mode)
		tenant := Bucket{Key: TenantKey("1"), Limit: Limit{PerMinute: 60, Burst: 10}}
		perWebhook := map[string]int{}
		for i := range 40 {
			wh := Bucket{Key: WebhookKey("1", fmt.Sprint(i%4)), Limit: Limit{PerMinute: 600, Burst: 5}}
			ok, wait := f.take(t0, wh, tenant)
			if ok {
				perWebhook[wh.Key]++
				continue
			}
			require.Equal(t, time.Second, wait, "refused by the tenant")
		}
		require.Equal(t, map[string]int{WebhookKey("1", "0"): 3, WebhookKey("1", "1"): 3, WebhookKey("1", "2"): 2, WebhookKey("1", "3"): 2}, perWebhook)
		f.requireTakes(1, t0.Add(time.Second), Bucket{Key: WebhookKey("1", "3"), Limit: Limit{PerMinute: 600, Burst: 5}}, tenant)
	})
}

func TestConcurrentTakeNeverOverGrants(t *testing.T) {
	redistest.EachMode(t, func(t *testing.T, mode redistest.Mode) {
		t.Parallel()
		const workers, attempts = 8, 150
		t.Run("fixed clock", func(t *testing.T) {
			f := newFixture(t, mode)
			b := Bucket{Key: WebhookKey("1", "1"), Limit: Limit{PerMinute: 600, Burst: 20}}
			grants := hammer(t, workers, attempts, f.takeAt(func() time.Time { return t0 }, b))
			require.Equal(t, int64(20), grants)
		})
		t.Run("advancing clock", func(t *testing.T) {
			f := newFixture(t, mode)
			b := Bucket{Key: WebhookKey("1", "1"), Limit: Limit{PerMinute: 600, Burst: 20}} // one token each 100 ms
			var clock atomic.Int64
			grants := hammer(t, workers, attempts, f.takeAt(func() time.Time {
				return t0.Add(time.Duration(clock.Add(5)) * time.Millisecond)
			}, b))
			elapsed := time.Duration(clock.Load()-5) * time.Millisecond
			most := int64(20 + elapsed/(100*time.Millisecond))
			require.LessOrEqual(t, grants, most)
			require.GreaterOrEqual(t, grants, most-2, "the tokens that came due were granted")
		})
	})
}

// hammer runs workers goroutines per take, each calling its take attempts
// times, and returns how many calls were granted.
func hammer(t *testing.T, workers, attempts int, takes ...func() (bool, error)) int64 {
	t.Helper()
	var grants atomic.Int64
	errs := make(chan error, workers*len(takes))
	var wg sync.WaitGroup
	for _, take := range takes {
		for range workers {
			wg.Go(func() {
				for range attempts {
					ok, err := take()
					if err != nil {
						errs <- err
						return
					}
					if ok {
						grants.Add(1)
					}
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	return grants.Load()
}

// takeAt is a Take of f's Limiter at clock().
func (f *fixture) takeAt(clock func() time.Time, buckets ...Bucket) func() (bool, error) {
	return func() (bool, error) {
		ok, _, err := f.l.Take(f.ctx, clock(), buckets...)
		return ok, err
	}
}

func TestKeysHaveTTLs(t *testing.T) {
	redistest.EachMode(t, func(t *testing.T, mode redistest.Mode) {
		f := newFixture(t, mode)
		wh := Bucket{Key: WebhookKey("1", "1"), Limit: webhookLimit}
		tenant := Bucket{Key: TenantKey("1"), Limit: Limit{PerMinute: 1000, Burst: 1000}}
		f.requireTakes(20, t0, wh, tenant)
		requireTTL := func(key string, most time.Duration) {
			t.Helper()
			ttl, err := f.rdb.PTTL(f.ctx, f.prefix+"ratelimit:"+key).Result()
			require.NoError(t, err)
			require.Greater(t, ttl, time.Duration(0), key)
			require.LessOrEqual(t, ttl, most, key)
		}
		requireTTL(WebhookKey("1", "1"), 12*time.Second+ttlMargin)  // 20 tokens at 600 ms
		requireTTL(TenantKey("1"), 1200*time.Millisecond+ttlMargin) // 20 tokens at 60 ms
		keys, err := redistest.Keys(f.ctx, f.rdb, f.prefix)
		require.NoError(t, err)
		require.ElementsMatch(t, []string{f.prefix + "ratelimit:{1}:webhook:1", f.prefix + "ratelimit:{1}:tenant"}, keys)
	})
}

func TestInvalidBuckets(t *testing.T) {
	redistest.EachMode(t, func(t *testing.T, mode redistest.Mode) {
		f := newFixture(t, mode)
		ok, wait := f.take(t0)
		require.True(t, ok, "no bucket, no limit")
		require.Zero(t, wait)
		tests := invalidBuckets()
		tests["one hash tag"] = []Bucket{{Key: "webhook:1", Limit: webhookLimit}, {Key: TenantKey("1"), Limit: webhookLimit}}
		for name, buckets := range tests {
			_, _, err := f.l.Take(f.ctx, t0, buckets...)
			require.ErrorIs(t, err, ErrInvalidBucket, name)
		}
	})
}

func TestHashTag(t *testing.T) {
	t.Parallel()
	for key, want := range map[string]string{
		"p:ratelimit:{t1}:webhook:w": "t1",
		"p:reserve:{t1}:tenant":      "t1",
		"{a}{b}":                     "a",
		"x{}{b}":                     "", // an empty tag: the whole key decides
		"{a":                         "",
		"a}{b}":                      "b",
		"plain":                      "",
		"{{a}}":                      "{a",
	} {
		require.Equal(t, want, hashTag(key), key)
	}
}

func TestPerSecond(t *testing.T) {
	t.Parallel()
	require.Equal(t, Limit{PerMinute: 60_000, Burst: 1000}, PerSecond(1000, 1000))
}

// A Take queued on a pipeline decides as Take does; Refund gives the token
// back, never beyond the burst.
func TestQueuedTakeAndRefund(t *testing.T) {
	redistest.EachMode(t, func(t *testing.T, mode redistest.Mode) {
		f := newFixture(t, mode)
		b := Bucket{Key: WebhookKey("1", "q"), Limit: Limit{PerMinute: 1, Burst: 2}}
		pipe := f.rdb.Pipeline()
		first, err := f.l.QueueTake(f.ctx, pipe, t0, b)
		require.NoError(t, err)
		second, err := f.l.QueueTake(f.ctx, pipe, t0, b)
		require.NoError(t, err)
		third, err := f.l.QueueTake(f.ctx, pipe, t0, b)
		require.NoError(t, err)
		_, _ = pipe.Exec(f.ctx) // each call's error is read from its result
		for i, c := range []*TakeCall{first, second} {
			ok, wait, err := c.Result()
			require.NoError(t, err)
			require.True(t, ok, "take %d", i+1)
			require.Zero(t, wait)
		}
		ok, wait, err := third.Result()
		require.NoError(t, err)
		require.False(t, ok)
		require.Equal(t, time.Minute, wait)

		require.NoError(t, f.l.Refund(f.ctx, t0, b))
		f.requireTakes(1, t0, b)
		f.requireRefused(time.Minute, t0, b)

		// A full bucket stays at its burst.
		full := Bucket{Key: WebhookKey("1", "full"), Limit: Limit{PerMinute: 1, Burst: 1}}
		f.requireTakes(1, t0, full)
		require.NoError(t, f.l.Refund(f.ctx, t0, full))
		require.NoError(t, f.l.Refund(f.ctx, t0, full))
		f.requireTakes(1, t0, full)
		f.requireRefused(time.Minute, t0, full)

		none, err := f.l.QueueTake(f.ctx, f.rdb.Pipeline(), t0)
		require.NoError(t, err)
		require.Nil(t, none, "no bucket, nothing queued")
	})
}

// A queued Take sends the script's digest only; when Redis has lost the
// script, Result takes the token with the script itself, once. (See
// TestQueueReserveAfterScriptFlush for why it tries a few times.)
func TestQueueTakeAfterScriptFlush(t *testing.T) {
	redistest.EachMode(t, func(t *testing.T, mode redistest.Mode) {
		f := newFixture(t, mode)
		metNoScript := false
		for i := 0; i < 100 && !metNoScript; i++ {
			b := Bucket{Key: fmt.Sprintf("publish:%d", i), Limit: Limit{PerMinute: 1, Burst: 1}}
			require.NoError(t, f.rdb.ScriptFlush(f.ctx).Err())
			pipe := f.rdb.Pipeline()
			call, err := f.l.QueueTake(f.ctx, pipe, t0, b)
			require.NoError(t, err)
			_, _ = pipe.Exec(f.ctx)
			metNoScript = call.call.MetNoScript()
			ok, _, err := call.Result()
			require.NoError(t, err)
			require.True(t, ok)
			ok, _, err = f.l.Take(f.ctx, t0, b)
			require.NoError(t, err)
			require.False(t, ok, "the token was taken exactly once")
		}
		require.True(t, metNoScript, "no pipeline met an empty script cache")
	})
}

// invalidBuckets are sets of buckets every call refuses: a key missing
// or repeated, a limit that never refills or holds nothing, and buckets
// that share no hash tag, so that one script could not find them in one
// cluster slot.
func invalidBuckets() map[string][]Bucket {
	good := Bucket{Key: WebhookKey("1", "1"), Limit: webhookLimit}
	return map[string][]Bucket{
		"empty key":   {{Limit: webhookLimit}},
		"same key":    {good, good},
		"no refill":   {{Key: WebhookKey("1", "2"), Limit: Limit{Burst: 1}}},
		"no capacity": {{Key: WebhookKey("1", "2"), Limit: Limit{PerMinute: 1}}},
		"two tenants": {good, {Key: TenantKey("2"), Limit: webhookLimit}},
		"no hash tag": {{Key: "webhook:1", Limit: webhookLimit}, {Key: "tenant:1", Limit: webhookLimit}},
	}
}
