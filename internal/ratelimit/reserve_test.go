package ratelimit

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/redistest"
)

// ms is an offset from t0 in milliseconds.
func ms(n int64) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }

// reserve makes n Reserves at now and returns their slots as milliseconds
// after t0.
func (f *fixture) reserve(n int, now time.Time, buckets ...Bucket) []int64 {
	f.t.Helper()
	slots := make([]int64, n)
	for i := range slots {
		at, err := f.l.Reserve(f.ctx, now, buckets...)
		require.NoError(f.t, err)
		require.False(f.t, at.Before(now), "reservation %d is before now", i)
		slots[i] = at.Sub(t0).Milliseconds()
	}
	return slots
}

// tat reads the whole milliseconds of b's stored schedule.
func (f *fixture) tat(b Bucket) int64 {
	f.t.Helper()
	v, err := f.rdb.HGet(f.ctx, f.prefix+"reserve:"+b.Key, "ms").Int64()
	require.NoError(f.t, err)
	return v
}

func (f *fixture) cancel(now time.Time, at int64, buckets ...Bucket) {
	f.t.Helper()
	require.NoError(f.t, f.l.CancelReservation(f.ctx, now, ms(at), buckets...))
}

// spaced returns n slots from start: burst of them at start, then one
// every interval.
func spaced(n, burst int, start, interval int64) []int64 {
	slots := make([]int64, n)
	for i := range slots {
		slots[i] = start + int64(max(0, i-burst+1))*interval
	}
	return slots
}

func TestReservePacing(t *testing.T) {
	redistest.EachMode(t, func(t *testing.T, mode redistest.Mode) {
		f := newFixture(t, mode)
		b := Bucket{Key: WebhookKey("1", "1"), Limit: Limit{PerMinute: 60, Burst: 3}}
		require.Equal(t, []int64{0, 0, 0, 1000, 2000, 3000}, f.reserve(6, t0, b))
		require.Equal(t, spaced(500, 1, 4000, 1000), f.reserve(500, t0, b), "one a second, however long the backlog")

		// Reserving later in the backlog changes nothing: the schedule is full.
		require.Equal(t, []int64{504_000}, f.reserve(1, ms(250_000), b))
		// Once now is past what the backlog allows, now itself is the slot.
		require.Equal(t, []int64{505_500, 506_000}, f.reserve(2, ms(505_500), b))
		// Idle long enough to refill the burst: Burst at now, then spaced again.
		require.Equal(t, []int64{600_000, 600_000, 600_000, 601_000}, f.reserve(4, ms(600_000), b))
	})
}

// 7 a minute is an interval of 8571.43 ms: slots round up to the
// millisecond, but the schedule does not, so 70 slots take ten minutes
// exactly.
func TestReserveDoesNotDrift(t *testing.T) {
	redistest.EachMode(t, func(t *testing.T, mode redistest.Mode) {
		f := newFixture(t, mode)
		b := Bucket{Key: WebhookKey("1", "1"), Limit: Limit{PerMinute: 7, Burst: 1}}
		want := make([]int64, 71)
		for k := range want {
			want[k] = (int64(k)*60_000 + 6) / 7 // ceil(k * 60000 / 7)
		}
		got := f.reserve(71, t0, b)
		require.Equal(t, want, got)
		require.Equal(t, int64(60_000), got[7])
		require.Equal(t, int64(600_000), got[70])
	})
}

// With sub-millisecond now, a slot available at once is now itself.
func TestReserveNowIsNow(t *testing.T) {
	redistest.EachMode(t, func(t *testing.T, mode redistest.Mode) {
		f := newFixture(t, mode)
		b := Bucket{Key: WebhookKey("1", "1"), Limit: Limit{PerMinute: 60, Burst: 1}}
		now := t0.Add(300 * time.Microsecond)
		at, err := f.l.Reserve(f.ctx, now, b)
		require.NoError(t, err)
		require.Equal(t, now, at)
		at, err = f.l.Reserve(f.ctx, now, b)
		require.NoError(t, err)
		require.Equal(t, ms(1000), at)
	})
}

func TestReserveTwoBuckets(t *testing.T) {
	redistest.EachMode(t, func(t *testing.T, mode redistest.Mode) {
		f := newFixture(t, mode)
		wh := Bucket{Key: WebhookKey("1", "1"), Limit: Limit{PerMinute: 60, Burst: 2}} // 1000 ms
		tenant := Bucket{Key: TenantKey("1"), Limit: Limit{PerMinute: 600, Burst: 1}}  // 100 ms
		// The tenant spaces the webhook's burst; then the webhook sets the pace.
		require.Equal(t, []int64{0, 100, 1000, 2000}, f.reserve(4, t0, wh, tenant))
		// Both advanced past every slot given: each alone continues from there.
		require.Equal(t, []int64{2100}, f.reserve(1, t0, tenant))
		require.Equal(t, []int64{3000}, f.reserve(1, t0, wh))
		require.Equal(t, []int64{4000}, f.reserve(1, t0, tenant, wh))
		require.Equal(t, []int64{4100, 4200}, f.reserve(2, t0, tenant))
	})
}

// Rates that share no factor: b spaces a's burst, then a sets the pace,
// and neither allows more than its rate.
func TestReserveTwoBucketsUnevenRates(t *testing.T) {
	redistest.EachMode(t, func(t *testing.T, mode redistest.Mode) {
		f := newFixture(t, mode)
		a := Bucket{Key: "{t}a", Limit: Limit{PerMinute: 7, Burst: 2}}  // 8571.43 ms
		b := Bucket{Key: "{t}b", Limit: Limit{PerMinute: 11, Burst: 1}} // 5454.55 ms
		got := f.reserve(50, t0, a, b)
		require.Equal(t, []int64{0, 5455, 10_910, 17_143}, got[:4])
		for i := 1; i < len(got); i++ {
			require.GreaterOrEqual(t, got[i]-got[i-1], int64(5454), "b: slot %d", i)
			if i > 1 {
				require.GreaterOrEqual(t, got[i]-got[i-2], int64(8571), "a: slot %d", i)
			}
		}
		require.Equal(t, int64(411_429), got[49], "a's schedule, 48 x 60000/7 ms, rounded up once")
	})
}

func TestReserveLimitChange(t *testing.T) {
	redistest.EachMode(t, func(t *testing.T, mode redistest.Mode) {
		t.Parallel()
		t.Run("rate", func(t *testing.T) {
			f := newFixture(t, mode)
			b := Bucket{Key: WebhookKey("1", "1"), Limit: Limit{PerMinute: 60, Burst: 1}}
			require.Equal(t, []int64{0, 1000}, f.reserve(2, t0, b))
			b.Limit.PerMinute = 600 // the slots given stay; new ones come 100 ms apart
			require.Equal(t, []int64{2000, 2100, 2200}, f.reserve(3, t0, b))
			b.Limit.PerMinute = 6
			require.Equal(t, []int64{2300, 12_300}, f.reserve(2, t0, b))
		})
		t.Run("burst", func(t *testing.T) {
			f := newFixture(t, mode)
			b := Bucket{Key: WebhookKey("1", "1"), Limit: Limit{PerMinute: 60, Burst: 1}}
			require.Equal(t, []int64{0, 1000}, f.reserve(2, t0, b))
			b.Limit.Burst = 3 // the schedule (2000) may now run two intervals ahead
			require.Equal(t, []int64{0, 1000, 2000}, f.reserve(3, t0, b))
		})
		t.Run("a rate sharing no factor", func(t *testing.T) {
			f := newFixture(t, mode)
			b := Bucket{Key: WebhookKey("1", "1"), Limit: Limit{PerMinute: 7, Burst: 1}}
			require.Equal(t, []int64{0, 8572}, f.reserve(2, t0, b)) // schedule 17142 6/7
			b.Limit.PerMinute = 11                                  // 17142 10/11, rounded up
			require.Equal(t, []int64{17_143, 22_598}, f.reserve(2, t0, b))
		})
	})
}

func TestCancelReservation(t *testing.T) {
	redistest.EachMode(t, func(t *testing.T, mode redistest.Mode) {
		t.Parallel()
		t.Run("the latest slot goes to the next Reserve", func(t *testing.T) {
			f := newFixture(t, mode)
			wh := Bucket{Key: WebhookKey("1", "1"), Limit: Limit{PerMinute: 60, Burst: 1}}
			tenant := Bucket{Key: TenantKey("1"), Limit: Limit{PerMinute: 60, Burst: 3}}
			require.Equal(t, []int64{0, 1000, 2000}, f.reserve(3, t0, wh, tenant))
			f.cancel(t0, 2000, wh, tenant)
			require.Equal(t, []int64{2000, 3000}, f.reserve(2, t0, wh, tenant))
		})
		t.Run("a larger burst gives back any slot", func(t *testing.T) {
			f := newFixture(t, mode)
			b := Bucket{Key: WebhookKey("1", "1"), Limit: Limit{PerMinute: 60, Burst: 3}}
			require.Equal(t, []int64{0, 0, 0, 1000, 2000}, f.reserve(5, t0, b))
			f.cancel(t0, 0, b) // as if only 0, 0, 1000, 2000 had been reserved
			require.Equal(t, []int64{2000, 3000}, f.reserve(2, t0, b))
		})
		t.Run("burst 1 keeps a slot held by a later reservation", func(t *testing.T) {
			f := newFixture(t, mode)
			b := Bucket{Key: WebhookKey("1", "1"), Limit: Limit{PerMinute: 60, Burst: 1}}
			require.Equal(t, []int64{0, 1000, 2000}, f.reserve(3, t0, b))
			f.cancel(t0, 1000, b) // 2000 is still reserved: 3000 is the next free slot
			require.Equal(t, []int64{3000}, f.reserve(1, t0, b))
			f.cancel(t0, 3000, b)
			f.cancel(t0, 2000, b)
			require.Equal(t, []int64{2000}, f.reserve(1, t0, b), "cancelled latest first, each is given back")
		})
		t.Run("never below now", func(t *testing.T) {
			f := newFixture(t, mode)
			b := Bucket{Key: WebhookKey("1", "1"), Limit: Limit{PerMinute: 60, Burst: 2}}
			require.Equal(t, []int64{0, 0, 1000}, f.reserve(3, t0, b))
			for range 5 {
				f.cancel(ms(500), 1000, b)
			}
			require.Equal(t, ms(500).UnixMilli(), f.tat(b), "three cancels reached now, two more went no further")
			require.Equal(t, []int64{500, 500, 1500}, f.reserve(3, ms(500), b), "nothing banked beyond the burst")
		})
		t.Run("an idle or missing bucket is left alone", func(t *testing.T) {
			f := newFixture(t, mode)
			b := Bucket{Key: WebhookKey("1", "1"), Limit: Limit{PerMinute: 60, Burst: 1}}
			f.cancel(t0, 0, b)
			keys, err := redistest.Keys(f.ctx, f.rdb, f.prefix)
			require.NoError(t, err)
			require.Empty(t, keys)
			require.Equal(t, []int64{0}, f.reserve(1, t0, b))
			f.cancel(ms(5000), 0, b)
			require.Equal(t, ms(1000).UnixMilli(), f.tat(b), "a schedule that has passed is not moved")
			require.Equal(t, []int64{5000, 6000}, f.reserve(2, ms(5000), b))
		})
	})
}

// Every one of many concurrent Reserves gets its own slot.
func TestConcurrentReserve(t *testing.T) {
	redistest.EachMode(t, func(t *testing.T, mode redistest.Mode) {
		f := newFixture(t, mode)
		b := Bucket{Key: WebhookKey("1", "1"), Limit: Limit{PerMinute: 600, Burst: 5}} // 100 ms
		const n = 200
		slots := make(chan time.Time, n)
		errs := make(chan error, n)
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() {
				at, err := f.l.Reserve(f.ctx, t0, b)
				if err != nil {
					errs <- err
					return
				}
				slots <- at
			})
		}
		wg.Wait()
		close(slots)
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		var got []int64
		for at := range slots {
			got = append(got, at.Sub(t0).Milliseconds())
		}
		slices.Sort(got)
		require.Equal(t, spaced(n, 5, 0, 100), got)
	})
}

// A Reserve queued on a pipeline travels with other commands and decides
// as Reserve does.
func TestQueueReserve(t *testing.T) {
	redistest.EachMode(t, func(t *testing.T, mode redistest.Mode) {
		f := newFixture(t, mode)
		b := Bucket{Key: WebhookKey("1", "q"), Limit: Limit{PerMinute: 60, Burst: 1}}
		pipe := f.rdb.Pipeline()
		incr := pipe.Incr(f.ctx, f.prefix+"other")
		first, err := f.l.QueueReserve(f.ctx, pipe, t0, b)
		require.NoError(t, err)
		second, err := f.l.QueueReserve(f.ctx, pipe, t0, b)
		require.NoError(t, err)
		// As the worker does, each command's outcome is read from the command:
		// a test of this package flushing the script cache at this moment makes
		// Exec report NOSCRIPT, which Result recovers from.
		_, _ = pipe.Exec(f.ctx)
		require.Equal(t, int64(1), incr.Val())
		at, err := first.Result()
		require.NoError(t, err)
		require.Equal(t, t0, at)
		at, err = second.Result()
		require.NoError(t, err)
		require.Equal(t, ms(1000), at)
		require.Equal(t, []int64{2000}, f.reserve(1, t0, b))

		none, err := f.l.QueueReserve(f.ctx, f.rdb.Pipeline(), t0)
		require.NoError(t, err)
		require.Nil(t, none, "no bucket, nothing queued")
	})
}

// A pipeline sends the script's digest only; when Redis has lost the script
// (a restart, SCRIPT FLUSH), Result makes the reservation with the script
// itself. Flushing the shared script cache is safe for parallel tests:
// every script in this repository falls back to EVAL. A parallel test may
// load the script again between the flush and the pipeline, so the test
// tries a few times until the pipeline has met NOSCRIPT.
func TestQueueReserveAfterScriptFlush(t *testing.T) {
	redistest.EachMode(t, func(t *testing.T, mode redistest.Mode) {
		f := newFixture(t, mode)
		metNoScript := false
		for i := 0; i < 10 && !metNoScript; i++ {
			b := Bucket{Key: WebhookKey("1", fmt.Sprint(i)), Limit: Limit{PerMinute: 60, Burst: 1}}
			require.NoError(t, f.rdb.ScriptFlush(f.ctx).Err())
			pipe := f.rdb.Pipeline()
			call, err := f.l.QueueReserve(f.ctx, pipe, t0, b)
			require.NoError(t, err)
			_, _ = pipe.Exec(f.ctx)
			metNoScript = call.call.MetNoScript()
			at, err := call.Result()
			require.NoError(t, err)
			require.Equal(t, t0, at)
			require.Equal(t, []int64{1000}, f.reserve(1, t0, b), "reserved exactly once")
		}
		require.True(t, metNoScript, "no pipeline met an empty script cache")
	})
}

func TestReserveKeysHaveTTLs(t *testing.T) {
	redistest.EachMode(t, func(t *testing.T, mode redistest.Mode) {
		f := newFixture(t, mode)
		wh := Bucket{Key: WebhookKey("1", "1"), Limit: Limit{PerMinute: 60, Burst: 1}}
		tenant := Bucket{Key: TenantKey("1"), Limit: Limit{PerMinute: 600, Burst: 10}}
		f.reserve(20, t0, wh, tenant)
		requireTTL := func(key string, most time.Duration) {
			t.Helper()
			ttl, err := f.rdb.PTTL(f.ctx, f.prefix+"reserve:"+key).Result()
			require.NoError(t, err)
			require.Greater(t, ttl, most-time.Second, key)
			require.LessOrEqual(t, ttl, most, key)
		}
		requireTTL(WebhookKey("1", "1"), 20*time.Second+ttlMargin) // the schedule is 20 s ahead
		requireTTL(TenantKey("1"), 19100*time.Millisecond+ttlMargin)
		keys, err := redistest.Keys(f.ctx, f.rdb, f.prefix)
		require.NoError(t, err)
		require.ElementsMatch(t, []string{f.prefix + "reserve:{1}:webhook:1", f.prefix + "reserve:{1}:tenant"}, keys)
		require.Equal(t, map[string]string{"ms": "1700000020000", "u": "0", "p": "60"},
			f.rdb.HGetAll(f.ctx, f.prefix+"reserve:{1}:webhook:1").Val())
	})
}

func TestReserveInvalidBuckets(t *testing.T) {
	redistest.EachMode(t, func(t *testing.T, mode redistest.Mode) {
		f := newFixture(t, mode)
		at, err := f.l.Reserve(f.ctx, t0)
		require.NoError(t, err)
		require.Equal(t, t0, at, "no bucket, no wait")
		require.NoError(t, f.l.CancelReservation(f.ctx, t0, t0))
		tests := invalidBuckets()
		for name, buckets := range tests {
			_, err := f.l.Reserve(f.ctx, t0, buckets...)
			require.ErrorIs(t, err, ErrInvalidBucket, name)
			_, err = f.l.QueueReserve(f.ctx, f.rdb.Pipeline(), t0, buckets...)
			require.ErrorIs(t, err, ErrInvalidBucket, name)
			require.ErrorIs(t, f.l.CancelReservation(f.ctx, t0, t0, buckets...), ErrInvalidBucket, name)
		}
		keys, err := redistest.Keys(f.ctx, f.rdb, f.prefix)
		require.NoError(t, err)
		require.Empty(t, keys)
	})
}
