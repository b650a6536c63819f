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

func TestPriorityOf(t *testing.T) {
	t.Parallel()
	for key, want := range map[string]string{
		"high": "high", "normal": "normal", "low": "low",
		"1600.high": "high", "100.low": "low", "204800.normal": "normal",
		"": "normal", "weird": "normal", "xhigh": "normal",
	} {
		require.Equal(t, want, priorityOf(key), key)
	}
}
