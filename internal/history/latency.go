package history

import (
	"math"
	"sort"
)

// Attempt durations are summarised as histograms (the latency column of
// attempt_rollups), whose buckets are those of the SQL function
// latency_bucket: one per millisecond below exactBuckets, then
// bucketsPerDoubling per doubling of the duration, each about 9 % wide.
const (
	exactBuckets       = 16
	bucketsPerDoubling = 8
)

// latencyBucket is the bucket of a duration, as latency_bucket computes it.
func latencyBucket(ms int) int {
	if ms < exactBuckets {
		return max(ms, 0)
	}
	return exactBuckets + int(math.Floor(bucketsPerDoubling*math.Log(float64(ms)/exactBuckets)/math.Log(2)))
}

// bucketBounds is the range of durations [lo, hi) in milliseconds that
// bucket b holds.
func bucketBounds(b int) (lo, hi float64) {
	if b < exactBuckets {
		return float64(b), float64(b + 1)
	}
	return boundAt(b), boundAt(b + 1)
}

func boundAt(b int) float64 {
	return exactBuckets * math.Pow(2, float64(b-exactBuckets)/bucketsPerDoubling)
}

// histogram counts durations by bucket.
type histogram map[int]int64

// add adds other's counts to h.
func (h histogram) add(other histogram) {
	for b, n := range other {
		h[b] += n
	}
}

// percentile estimates the q-quantile (0 to 1) of the durations counted,
// in milliseconds rounded to a tenth, or nil when there are none. Like
// percentile_cont it interpolates between the two durations nearest the
// rank. Below exactBuckets a bucket holds one whole duration, so that the
// answer is exact there; above, the durations of a bucket are taken as
// spread evenly over it, so that the estimate is within the bucket's width
// (about 9 %) of the exact one.
func (h histogram) percentile(q float64) *float64 {
	var total int64
	buckets := make([]int, 0, len(h))
	for b, n := range h {
		if n > 0 {
			buckets = append(buckets, b)
			total += n
		}
	}
	if total == 0 {
		return nil
	}
	sort.Ints(buckets)
	rank := q * float64(total-1) // 0-based, as percentile_cont counts
	below := math.Floor(rank)
	lo, hi := h.nth(buckets, int64(below)), h.nth(buckets, int64(math.Ceil(rank)))
	v := math.Round((lo+(hi-lo)*(rank-below))*10) / 10
	return &v
}

// nth estimates the i-th smallest duration (0-based) counted in h, whose
// non-empty buckets are buckets, in order.
func (h histogram) nth(buckets []int, i int64) float64 {
	var before int64
	for _, b := range buckets {
		n := h[b]
		if i < before+n {
			return bucketValue(b, (float64(i-before)+0.5)/float64(n))
		}
		before += n
	}
	return bucketValue(buckets[len(buckets)-1], 1)
}

// bucketValue is the duration at fraction f (0 to 1) of bucket b.
func bucketValue(b int, f float64) float64 {
	lo, hi := bucketBounds(b)
	if b < exactBuckets {
		return lo
	}
	return lo + (hi-lo)*min(f, 1)
}
