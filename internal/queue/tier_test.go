package queue

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestTierFor(t *testing.T) {
	t.Parallel()
	cases := []struct {
		d    time.Duration
		tier time.Duration
		ok   bool
	}{
		{0, 0, false},
		{-time.Second, 0, false},
		{99 * time.Millisecond, 0, false},
		{100 * time.Millisecond, 100 * time.Millisecond, true},
		{199 * time.Millisecond, 100 * time.Millisecond, true},
		{200 * time.Millisecond, 200 * time.Millisecond, true},
		{time.Second, 800 * time.Millisecond, true},
		{1600 * time.Millisecond, 1600 * time.Millisecond, true},
		{5 * time.Minute, 204800 * time.Millisecond, true},
		{100 * time.Hour, 104857600 * time.Millisecond, true},
	}
	for _, c := range cases {
		tier, ok := tierFor(c.d)
		require.Equal(t, c.ok, ok, c.d)
		require.Equal(t, c.tier, tier, c.d)
	}
	tiers := Tiers()
	require.Len(t, tiers, 21)
	require.Equal(t, 100*time.Millisecond, tiers[0])
	for i := 1; i < len(tiers); i++ {
		require.Equal(t, 2*tiers[i-1], tiers[i])
	}
}

func TestRouteOf(t *testing.T) {
	t.Parallel()
	for key, want := range map[string]Route{
		"high": {"high", 0}, "normal": {"normal", 0}, "low": {"low", 0},
		"1600.high": {"high", 0}, "100.low": {"low", 0}, "204800.normal": {"normal", 0},
		"high.1": {"high", 1}, "low.63": {"low", 63}, "1600.normal.7": {"normal", 7}, "100.high.2": {"high", 2},
		"": {"normal", 0}, "weird": {"normal", 0}, "xhigh": {"normal", 0},
		"high.0": {"normal", 0}, "high.64": {"normal", 0}, "high.07": {"normal", 0}, "high.-1": {"normal", 0},
		"high.x": {"normal", 0}, "1600.high.3.4": {"normal", 0},
	} {
		require.Equal(t, want, RouteOf(key), key)
	}
}
