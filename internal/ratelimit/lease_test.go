package ratelimit

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/redistest"
)

// process is another api process on f's Redis: a Limiter of its own,
// counting its commands.
func (f *fixture) process() (*Limiter, *redistest.Counter) {
	f.t.Helper()
	rdb := redistest.Client(f.t, f.mode)
	counter := &redistest.Counter{}
	rdb.AddHook(counter)
	l := New(rdb, f.prefix)
	// These tests count tokens. On a loaded machine a renewal can take
	// longer than the production bound, and its timeout would fail them
	// for a reason that says nothing of the counting.
	l.publishTimeout = 10 * time.Second
	return l, counter
}

func (f *fixture) takePublish(l *Limiter, now time.Time, rps, burst int) (bool, time.Duration) {
	f.t.Helper()
	ok, wait, err := l.TakePublish(f.ctx, now, "tenant-1", rps, burst)
	require.NoError(f.t, err)
	return ok, wait
}

// publishBucket is the bucket TakePublish draws from for "tenant-1".
func publishBucket(rps, burst int) Bucket {
	return Bucket{Key: "publish:tenant-1", Limit: PerSecond(rps, burst)}
}

func TestPublishLeasesGrantTheBurstInFewRoundTrips(t *testing.T) {
	redistest.EachMode(t, func(t *testing.T, mode redistest.Mode) {
		f := newFixture(t, mode)
		l, counter := f.process()
		for i := range 100 {
			ok, _ := f.takePublish(l, t0, 10, 100)
			require.True(t, ok, "publish %d", i+1)
		}
		ok, wait := f.takePublish(l, t0, 10, 100)
		require.False(t, ok, "the burst is spent")
		require.Equal(t, 100*time.Millisecond, wait, "the bucket's own wait for a token")
		// Leases of 1, 2, 4, 8 and then 10 (a tenth of the burst), the last
		// one cut to the 5 tokens left; then the refusal.
		require.Equal(t, int64(14), counter.Scripts())
		// Nothing is left for anyone else.
		f.requireRefused(100*time.Millisecond, t0, publishBucket(10, 100))
	})
}

func TestSmallBurstsAreAskedAtEveryPublish(t *testing.T) {
	redistest.EachMode(t, func(t *testing.T, mode redistest.Mode) {
		f := newFixture(t, mode)
		l, counter := f.process()
		for range 9 {
			ok, _ := f.takePublish(l, t0, 1, 9)
			require.True(t, ok)
		}
		ok, wait := f.takePublish(l, t0, 1, 9)
		require.False(t, ok)
		require.Equal(t, time.Second, wait)
		require.Equal(t, int64(10), counter.Scripts())
	})
}

func TestUnusedLeasedTokensGoBackWithTheNextRenewal(t *testing.T) {
	redistest.EachMode(t, func(t *testing.T, mode redistest.Mode) {
		f := newFixture(t, mode)
		l, _ := f.process()
		// 20 publishes: leases of 1, 2, 4, 8 and 10 took 25 tokens, 5 unused.
		for range 20 {
			ok, _ := f.takePublish(l, t0, 10, 100)
			require.True(t, ok)
		}
		// Past the lease's life, the next publish gives the 5 back and leases
		// half as many as before.
		now := t0.Add(200 * time.Millisecond)
		ok, _ := f.takePublish(l, now, 10, 100)
		require.True(t, ok)
		// The bucket: 100 - 25 taken + 2 refilled + 5 given back - 5 leased.
		f.requireTakes(77, now, publishBucket(10, 100))
		f.requireRefused(100*time.Millisecond, now, publishBucket(10, 100))
		// The 4 tokens still leased are good until the lease expires.
		for range 4 {
			ok, _ := f.takePublish(l, now.Add(99*time.Millisecond), 10, 100)
			require.True(t, ok)
		}
		ok, wait := f.takePublish(l, now.Add(99*time.Millisecond), 10, 100)
		require.False(t, ok)
		require.Equal(t, time.Millisecond, wait)
	})
}

// Each process makes more attempts than the burst, so that no process
// stops with leased tokens it did not use.
func TestProcessesLeasingOneBucketNeverOverGrant(t *testing.T) {
	redistest.EachMode(t, func(t *testing.T, mode redistest.Mode) {
		f := newFixture(t, mode)
		const processes, workers, attempts = 3, 4, 200
		var takes []func() (bool, error)
		for range processes {
			l, _ := f.process()
			takes = append(takes, func() (bool, error) {
				ok, _, err := l.TakePublish(f.ctx, t0, "tenant-1", 10, 500)
				return ok, err
			})
		}
		grants := hammer(t, workers, attempts, takes...)
		require.Equal(t, int64(500), grants, "the burst, all of it, and not one more")
	})
}

func TestAChangedPublishLimitAppliesAtTheNextRenewal(t *testing.T) {
	redistest.EachMode(t, func(t *testing.T, mode redistest.Mode) {
		f := newFixture(t, mode)
		l, counter := f.process()
		for range 30 {
			ok, _ := f.takePublish(l, t0, 10, 1000) // leases of 1, 2, 4, 8, 16
			require.True(t, ok)
		}
		before := counter.Scripts()
		// The limit falls to a burst of 5: the lease left (1 token) is used,
		// then each publish asks the bucket again.
		ok, _ := f.takePublish(l, t0, 10, 5)
		require.True(t, ok)
		require.Equal(t, before, counter.Scripts())
		ok, _ = f.takePublish(l, t0, 10, 5)
		require.True(t, ok)
		require.Equal(t, before+1, counter.Scripts())
	})
}

func TestARenewalThatFailedIsNotTriedAgainAtOnce(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	counter := &redistest.Counter{}
	rdb.AddHook(counter)
	l := New(rdb, "unreachable:")
	_, _, err := l.TakePublish(context.Background(), t0, "tenant-1", 10, 100)
	require.Error(t, err)
	sent := counter.Scripts()
	require.Positive(t, sent)
	_, _, err = l.TakePublish(context.Background(), t0, "tenant-1", 10, 100)
	require.ErrorIs(t, err, ErrLeasePaused)
	require.Equal(t, sent, counter.Scripts(), "Redis was not asked again")
}

func TestLeasesOfQuietTenantsAreForgotten(t *testing.T) {
	redistest.EachMode(t, func(t *testing.T, mode redistest.Mode) {
		f := newFixture(t, mode)
		l, _ := f.process()
		leases := func() (names []string) {
			l.leases.Range(func(k, _ any) bool { names = append(names, k.(string)); return true })
			return names
		}
		_, _, err := l.TakePublish(f.ctx, t0, "quiet", 10, 100)
		require.NoError(t, err)
		_, _, err = l.TakePublish(f.ctx, t0.Add(30*time.Second), "busy", 10, 100)
		require.NoError(t, err)
		require.ElementsMatch(t, []string{"quiet", "busy"}, leases())
		_, _, err = l.TakePublish(f.ctx, t0.Add(90*time.Second), "busy", 10, 100)
		require.NoError(t, err)
		require.Equal(t, []string{"busy"}, leases(), "expired for more than a minute")
	})
}
