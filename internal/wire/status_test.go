package wire

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestStatuses(t *testing.T) {
	t.Parallel()
	terminal := map[Status]bool{Succeeded: true, Exhausted: true, Cancelled: true}
	for _, s := range Statuses {
		require.True(t, s.Valid(), s)
		require.Equal(t, terminal[s], s.Terminal(), s)
	}
	for _, s := range []Status{"", "done", "Pending", "failed"} {
		require.False(t, s.Valid(), s)
		require.False(t, s.Terminal(), s)
	}
}
