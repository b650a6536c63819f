package delivery

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// After our own failure a message comes back after 5 s, 10 s, 20 s, then
// every 30 s however long the failure lasts (720 tries was an hour, after
// which deliveries used to be dead-lettered).
func TestInternalRetryDelay(t *testing.T) {
	t.Parallel()
	for n, want := range map[int]time.Duration{
		0: 5 * time.Second, 1: 5 * time.Second, 2: 10 * time.Second, 3: 20 * time.Second, 4: 30 * time.Second,
		5: 30 * time.Second, 720: 30 * time.Second, 721: 30 * time.Second, 1 << 30: 30 * time.Second,
	} {
		require.Equal(t, want, internalRetryDelay(n), "try %d", n)
	}
}
