package report

import (
	"os"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"
)

// A service's CPU time keeps what its children used once they are gone
// (a Postgres backend that ends): serviceTicks grows by the child's time,
// procTicks does not.
func TestServiceTicksKeepTheTimeOfExitedChildren(t *testing.T) {
	before, ownBefore := serviceTicks(os.Getpid()), procTicks(os.Getpid())
	child := exec.Command("sh", "-c", "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done")
	require.NoError(t, child.Run())
	used := (child.ProcessState.UserTime() + child.ProcessState.SystemTime()) * clockTicks
	childTicks := int64(used.Seconds())
	require.GreaterOrEqual(t, childTicks, int64(5), "the child used at least five ticks")
	grew := serviceTicks(os.Getpid()) - before
	own := procTicks(os.Getpid()) - ownBefore
	require.GreaterOrEqual(t, grew-own, childTicks-1, "the child's %d ticks", childTicks)
}
