package breaker

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestOverride(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	open, closed := "open", "closed"
	later, earlier := now.Add(time.Minute), now.Add(-time.Minute)
	for _, tc := range []struct {
		name      string
		p         Persisted
		want      State
		wantUntil *time.Time
		ok        bool
	}{
		{"none", Persisted{State: Open}, "", nil, false},
		{"open until reset", Persisted{ForcedState: &open}, Open, nil, true},
		{"closed until later", Persisted{ForcedState: &closed, ForcedUntil: &later}, Closed, &later, true},
		{"ended", Persisted{ForcedState: &open, ForcedUntil: &earlier}, "", nil, false},
		{"ends now", Persisted{ForcedState: &open, ForcedUntil: &now}, "", nil, false},
	} {
		state, until, ok := tc.p.Override(now)
		require.Equal(t, tc.ok, ok, tc.name)
		require.Equal(t, tc.want, state, tc.name)
		require.Equal(t, tc.wantUntil, until, tc.name)
	}
}

func TestFallback(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		p    Persisted
		want State
	}{
		{"never persisted", Persisted{}, Closed},
		{"open, fresh", Persisted{State: Open, UpdatedAt: now.Add(-time.Minute)}, Open},
		{"half-open, fresh", Persisted{State: HalfOpen, UpdatedAt: now.Add(-time.Second)}, HalfOpen},
		{"open, just too old", Persisted{State: Open, UpdatedAt: now.Add(-FallbackMaxAge)}, Closed},
		{"open, old", Persisted{State: Open, UpdatedAt: now.Add(-time.Hour)}, Closed},
		{"closed", Persisted{State: Closed, UpdatedAt: now}, Closed},
	} {
		require.Equal(t, tc.want, tc.p.Fallback(now), tc.name)
	}
}
