package metrics

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The tracker keeps the earliest wait of a delivery, forgets one once it
// is handled (unless put back again meanwhile) or not seen for waitTTL.
func TestWaitTracker(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	w := &WaitTracker{since: map[string]wait{}, now: func() time.Time { return now }}
	n, oldest := w.Stats()
	require.Zero(t, n)
	require.Zero(t, oldest)

	w.Waiting("a", now.Add(-time.Hour))
	w.Waiting("a", now) // a duplicate message of the same delivery
	w.Waiting("b", now.Add(-time.Minute))
	n, oldest = w.Stats()
	require.Equal(t, 2, n)
	require.Equal(t, time.Hour, oldest)

	started := now
	now = now.Add(time.Second)
	w.Waiting("a", now) // put back again during this handling: still waiting
	w.Done("a", started)
	w.Done("b", started.Add(-time.Second)) // put back after that handling began
	n, _ = w.Stats()
	require.Equal(t, 2, n)
	w.Done("b", now.Add(time.Millisecond))
	n, oldest = w.Stats()
	require.Equal(t, 1, n)
	require.Equal(t, time.Hour+time.Second, oldest)

	now = now.Add(waitTTL + time.Second) // no worker put it back since
	n, oldest = w.Stats()
	require.Zero(t, n)
	require.Zero(t, oldest)
}
