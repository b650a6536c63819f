package chart

import (
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestNiceScale(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		max    float64
		unit   Unit
		labels []string
	}{
		{0, Count, []string{"0", "1"}},
		{0.3, Count, []string{"0", "1"}},
		{1, Count, []string{"0", "1"}},
		{3, Count, []string{"0", "1", "2", "3"}},
		{4, Count, []string{"0", "1", "2", "3", "4"}},
		{5, Count, []string{"0", "2", "4", "6"}},
		{8, Count, []string{"0", "2", "4", "6", "8"}},
		{9, Count, []string{"0", "5", "10"}},
		{20, Count, []string{"0", "5", "10", "15", "20"}},
		{101, Count, []string{"0", "50", "100", "150"}},
		{1800, Count, []string{"0", "500", "1k", "1.5k", "2k"}},
		{2.5e6, Count, []string{"0", "1M", "2M", "3M"}},
		{7.2e9, Count, []string{"0", "2G", "4G", "6G", "8G"}},
		{3e14, Count, []string{"0", "100T", "200T", "300T"}},
		{4e15, Count, []string{"0", "1e+15", "2e+15", "3e+15", "4e+15"}},
		{-5, Count, []string{"0", "1"}},
		{math.NaN(), Count, []string{"0", "1"}},
		{math.Inf(1), Count, []string{"0", "1"}},
		{0, Percent, []string{"0%", "25%", "50%", "75%", "100%"}},
		{3, Percent, []string{"0%", "25%", "50%", "75%", "100%"}},
		{250, Percent, []string{"0%", "25%", "50%", "75%", "100%"}},
		{0, Millis, []string{"0 ms", "0.5 ms", "1 ms"}},
		{0.4, Millis, []string{"0 ms", "0.5 ms", "1 ms"}},
		{1.5, Millis, []string{"0 ms", "0.5 ms", "1 ms", "1.5 ms"}},
		{37, Millis, []string{"0 ms", "10 ms", "20 ms", "30 ms", "40 ms"}},
		{999, Millis, []string{"0 s", "0.5 s", "1 s"}},
		{800, Millis, []string{"0 ms", "200 ms", "400 ms", "600 ms", "800 ms"}},
		{1200, Millis, []string{"0 s", "0.5 s", "1 s", "1.5 s"}},
		{30000, Millis, []string{"0 s", "10 s", "20 s", "30 s"}},
		{3.6e6, Millis, []string{"0 s", "1k s", "2k s", "3k s", "4k s"}},
	} {
		s := niceScale(tc.max, tc.unit)
		var labels []string
		for _, v := range s.ticks() {
			labels = append(labels, s.tickLabel(v, tc.unit))
		}
		require.Equal(t, tc.labels, labels, "max %v, unit %d", tc.max, tc.unit)
	}
}

// Over maxima from a thousandth to the largest float64, the axis reaches
// the maximum in two to five ticks from zero, each label its own and none
// of them a NaN, an infinity or negative.
func TestNiceScaleHoldsForEveryMagnitude(t *testing.T) {
	t.Parallel()
	maxima := []float64{math.MaxFloat64, math.MaxFloat64 / 3, 1e300, math.SmallestNonzeroFloat64}
	for m := 1e-3; m < 1e20; m *= 1.37 {
		maxima = append(maxima, m, math.Round(m))
	}
	for _, m := range maxima {
		for _, unit := range []Unit{Count, Millis} {
			s := niceScale(m, unit)
			ticks := s.ticks()
			require.GreaterOrEqual(t, s.top, m, "max %v", m)
			require.True(t, len(ticks) >= 2 && len(ticks) <= targetTicks+1, "max %v: %v", m, ticks)
			require.Zero(t, ticks[0])
			require.InEpsilon(t, s.top, ticks[len(ticks)-1], 1e-9, "max %v", m)
			seen := map[string]bool{}
			for _, v := range ticks {
				label := s.tickLabel(v, unit)
				require.False(t, seen[label], "max %v: %q twice", m, label)
				require.NotContains(t, strings.ToLower(label), "nan")
				require.NotContains(t, strings.ToLower(label), "inf")
				require.NotContains(t, label, "-0")
				require.False(t, strings.HasPrefix(label, "-"), "max %v: %q", m, label)
				seen[label] = true
			}
			if unit == Count {
				require.Equal(t, math.Trunc(s.step), s.step, "max %v: a count steps by whole numbers", m)
			}
		}
	}
}

func TestNiceStep(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ rough, step float64 }{
		{1, 1}, {1.01, 2}, {2, 2}, {2.0000001, 5}, {5, 5}, {5.5, 10}, {10, 10},
		{0.25, 0.5}, {0.1, 0.1}, {0.03, 0.05}, {450, 500}, {1e20, 1e20}, {3e20, 5e20},
	} {
		require.InEpsilon(t, tc.step, niceStep(tc.rough), 1e-12, "rough %v", tc.rough)
	}
}

func TestValueLabel(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		v    float64
		unit Unit
		want string
	}{
		{0, Count, "0"},
		{1234, Count, "1234"},
		{2.26, Count, "2.3"},
		{1e15, Count, "1e+15"},
		{97.5, Percent, "97.5%"},
		{100, Percent, "100%"},
		{66.666, Percent, "66.7%"},
		{0, Millis, "0 ms"},
		{12.5, Millis, "12.5 ms"},
		{999.9, Millis, "999.9 ms"},
		{1000, Millis, "1 s"},
		{1250, Millis, "1.25 s"},
		{61234, Millis, "61.23 s"},
		{2e18, Millis, "2e+18 ms"},
		{-0.01, Count, "0"},
	} {
		require.Equal(t, tc.want, valueLabel(tc.v, tc.unit), "%v, unit %d", tc.v, tc.unit)
	}
}

func TestDecimalsFor(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		step float64
		want int
	}{{1, 0}, {50, 0}, {0.5, 1}, {0.1, 1}, {0.25, 2}, {0.05, 2}, {0.0001, 3}, {1e20, 0}} {
		require.Equal(t, tc.want, decimalsFor(tc.step), "step %v", tc.step)
	}
}
