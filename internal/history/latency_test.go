package history

import (
	"math"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestLatencyBucketsCoverEveryDurationOnce(t *testing.T) {
	t.Parallel()
	for ms := 0; ms < 200_000; ms++ {
		b := latencyBucket(ms)
		lo, hi := bucketBounds(b)
		require.True(t, float64(ms) >= lo-1e-9 && float64(ms) < hi, "%d ms in bucket %d [%v, %v)", ms, b, lo, hi)
		if ms > 0 {
			require.GreaterOrEqual(t, b, latencyBucket(ms-1), "buckets grow with the duration")
		}
	}
	require.Equal(t, 0, latencyBucket(-5), "a negative duration counts as none")
	require.Equal(t, 15, latencyBucket(15))
	require.Equal(t, 16, latencyBucket(16))
	require.Equal(t, 24, latencyBucket(32))
	require.Equal(t, 32, latencyBucket(64))
}

func TestLatencyBucketsAreAtMostTenPercentWide(t *testing.T) {
	t.Parallel()
	for b := exactBuckets; b < 300; b++ {
		lo, hi := bucketBounds(b)
		require.InDelta(t, 0.0905, (hi-lo)/lo, 0.001, "bucket %d", b)
	}
}

func TestPercentileOfNothingIsNil(t *testing.T) {
	t.Parallel()
	require.Nil(t, histogram{}.percentile(0.5))
	require.Nil(t, histogram{3: 0}.percentile(0.5))
}

func TestPercentileOfSmallDurationsIsExact(t *testing.T) {
	t.Parallel()
	h := histogram{}
	for _, ms := range []int{1, 2, 2, 3, 9, 9, 9, 15} {
		h[latencyBucket(ms)]++
	}
	require.Equal(t, 1.0, *h.percentile(0))
	require.InDelta(t, 2.8, *h.percentile(0.4), 1e-9) // rank 2.8: between the third and fourth
	require.Equal(t, 3.0, *h.percentile(3.0 / 7))     // rank 3: the fourth value
	require.Equal(t, 6.0, *h.percentile(0.5))
	require.Equal(t, 15.0, *h.percentile(1))
}

// Against the exact percentile (as percentile_cont gives it, between the
// two nearest values) of many spreads of durations: the estimate is within
// a bucket's width.
func TestPercentileIsWithinABucketOfTheExactValue(t *testing.T) {
	t.Parallel()
	spreads := map[string]func(i int) int{
		"uniform to 2 s":   func(i int) int { return (i * 7919) % 2000 },
		"constant 250 ms":  func(int) int { return 250 },
		"two modes":        func(i int) int { return []int{20, 3000}[i%2] },
		"long tail":        func(i int) int { return int(10 * math.Exp(float64(i%97)/12)) },
		"timeouts at 30 s": func(i int) int { return []int{40, 40, 40, 30_000}[i%4] },
	}
	for name, spread := range spreads {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			h, values := histogram{}, make([]int, 1000)
			for i := range values {
				values[i] = spread(i)
				h[latencyBucket(values[i])]++
			}
			sort.Ints(values)
			for _, q := range []float64{0.5, 0.95, 0.99} {
				got := *h.percentile(q)
				lo := float64(values[int(math.Floor(q*999))])
				hi := float64(values[int(math.Ceil(q*999))])
				require.GreaterOrEqual(t, got, lo*0.9, "p%v", q*100)
				require.LessOrEqual(t, got, hi*1.1+1, "p%v", q*100)
			}
		})
	}
}

func TestHistogramsAdd(t *testing.T) {
	t.Parallel()
	h := histogram{1: 2, 20: 1}
	h.add(histogram{1: 1, 30: 4})
	require.Equal(t, histogram{1: 3, 20: 1, 30: 4}, h)
}
