package ratelimit

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/redistest"
)

// reserveLeased is a ReserveLeased of l at now, its slot as milliseconds
// after t0.
func (f *fixture) reserveLeased(l *Limiter, now time.Time, buckets ...Bucket) (int64, bool) {
	f.t.Helper()
	at, leased, err := l.ReserveLeased(f.ctx, now, nil, buckets...)
	require.NoError(f.t, err)
	require.False(f.t, at.Before(now))
	return at.Sub(t0).Milliseconds(), leased
}

// A webhook of 600 a minute (an interval of 100 ms), burst 100, under a
// tenant of 6,000 a minute, burst 200.
var (
	leasedHook   = Bucket{Key: WebhookKey("1", "1"), Limit: Limit{PerMinute: 600, Burst: 100}}
	leasedTenant = Bucket{Key: TenantKey("1"), Limit: Limit{PerMinute: 6000, Burst: 200}}
)

func TestSlotLeasesGrantTheBurstInFewRoundTrips(t *testing.T) {
	redistest.EachMode(t, func(t *testing.T, mode redistest.Mode) {
		f := newFixture(t, mode)
		l, counter := f.process()
		for i := range 100 {
			at, leased := f.reserveLeased(l, t0, leasedHook, leasedTenant)
			require.Equal(t, int64(0), at, "delivery %d", i+1)
			require.True(t, leased, "delivery %d", i+1)
		}
		// Leases of 1, 2, 4, 8 and then 10 (a tenth of the smaller burst);
		// the last one 5.
		require.Equal(t, int64(13), counter.Scripts())
		at, leased := f.reserveLeased(l, t0, leasedHook, leasedTenant)
		require.False(t, leased)
		require.Equal(t, int64(100), at, "the burst is spent: the next slot of the webhook's schedule")
		require.Equal(t, int64(14), counter.Scripts())
		// Both schedules moved for every slot: the next reservation by anyone
		// comes after them.
		require.Equal(t, []int64{200}, f.reserve(1, t0, leasedHook))
		require.Equal(t, int64(0)+101*10, f.tat(leasedTenant)-t0.UnixMilli(), "101 tenant intervals of 10 ms")
	})
}

func TestSlotLeasesGiveUnusedSlotsBack(t *testing.T) {
	redistest.EachMode(t, func(t *testing.T, mode redistest.Mode) {
		f := newFixture(t, mode)
		l, _ := f.process()
		for range 20 {
			_, leased := f.reserveLeased(l, t0, leasedHook)
			require.True(t, leased)
		}
		// Leases of 1, 2, 4, 8 and 10 took 25 slots: 20 used, 5 not.
		require.Equal(t, int64(2500), f.tat(leasedHook)-t0.UnixMilli())
		// Past the lease's life the next delivery gives the 5 back and leases
		// 5 (the size halves when a lease expires unused).
		at, leased := f.reserveLeased(l, ms(200), leasedHook)
		require.True(t, leased)
		require.Equal(t, int64(200), at)
		require.Equal(t, int64(2500), f.tat(leasedHook)-t0.UnixMilli(), "20 used, the 5 unused given back, 5 leased again")
	})
}

func TestSmallBurstsReserveAtEveryDelivery(t *testing.T) {
	redistest.EachMode(t, func(t *testing.T, mode redistest.Mode) {
		f := newFixture(t, mode)
		l, counter := f.process()
		b := Bucket{Key: WebhookKey("1", "1"), Limit: Limit{PerMinute: 60, Burst: 19}}
		got := make([]int64, 25)
		for i := range got {
			got[i], _ = f.reserveLeased(l, t0, b)
		}
		require.Equal(t, spaced(25, 19, 0, 1000), got, "exactly Reserve's slots")
		require.Equal(t, int64(25), counter.Scripts())
	})
}

// Several workers, each with its lease on the same buckets, together get
// slots at once for exactly the burst; the others are reserved later.
func TestWorkersLeasingOneBucketNeverOverGrant(t *testing.T) {
	redistest.EachMode(t, func(t *testing.T, mode redistest.Mode) {
		f := newFixture(t, mode)
		b := Bucket{Key: WebhookKey("1", "1"), Limit: Limit{PerMinute: 60, Burst: 150}}
		var later atomic.Int64
		takes := make([]func() (bool, error), 3)
		for i := range takes {
			l, _ := f.process()
			takes[i] = func() (bool, error) {
				at, _, err := l.ReserveLeased(f.ctx, t0, nil, b)
				if at.After(t0) {
					later.Add(1)
				}
				return err == nil && at.Equal(t0), err
			}
		}
		require.Equal(t, int64(150), hammer(t, 4, 30, takes...))
		require.Equal(t, int64(3*4*30-150), later.Load())
	})
}
