package schedule

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Reservations go one step after those still waiting; what was served
// since is taken off at the step given now.
func TestBacklogReservesAfterThoseStillWaiting(t *testing.T) {
	t.Parallel()
	var b Backlog
	now := time.Unix(1_800_000_000, 0)
	for i := 1; i <= 10; i++ {
		require.Equal(t, now.Add(time.Duration(i)*time.Second), b.Reserve(now, time.Second))
	}
	// 2 s later at the same pace: 8 wait, the next is the ninth.
	later := now.Add(2 * time.Second)
	require.InDelta(t, 8, b.Waiting(later, time.Second), 1e-9)
	require.InDelta(t, 10, b.Waiting(now, time.Second), 1e-9, "Waiting changes nothing")
	// At a pace ten times faster the 10 were served in that time.
	require.Equal(t, later.Add(100*time.Millisecond), b.Reserve(later, 100*time.Millisecond))
	// A clock that goes back takes nothing off.
	require.InDelta(t, 1, b.Drain(now, time.Nanosecond), 1e-9)
	// A step of zero counts as one nanosecond, not a division by zero.
	require.Zero(t, b.Waiting(later.Add(time.Nanosecond), 0))
}
