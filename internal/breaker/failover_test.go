package breaker

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/redistest"
)

// A Redis Cluster master dies (SIGKILL) holding an open circuit: once its
// replica has taken over, the circuit is still open, and it goes half-open
// and closes as on a healthy cluster.
func TestCircuitSurvivesTheLossOfItsClusterMaster(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t, 7210)
	rdb := c.Client()
	ctx := context.Background()
	f := &fixture{t: t, ctx: ctx, rdb: rdb, prefix: "failover:", b: New(rdb, "failover:"), cfg: testConfig()}

	require.Equal(t, []Transition{Opened}, f.recordN("wh", t0, 20, false, false))
	c.Replicated(ctx, rdb, f.b.keys("wh")[0])
	master := c.MasterOf(ctx, rdb, f.b.keys("wh")[0])
	c.Kill(master)

	// Until the replica is promoted the slot has no master and calls fail;
	// then they answer from the promoted replica's copy of the circuit.
	var v Verdict
	require.Eventually(t, func() bool {
		var err error
		v, _, err = f.b.Allow(ctx, "wh", f.cfg, t0.Add(time.Second))
		return err == nil
	}, 30*time.Second, 50*time.Millisecond, "the breaker did not answer after the failover")
	require.Equal(t, Verdict{State: Open, RetryIn: 29 * time.Second}, v)
	promoted := c.MasterOf(ctx, rdb, f.b.keys("wh")[0])
	require.NotEqual(t, master, promoted)

	after := t0.Add(31 * time.Second)
	for i := range 3 {
		v, tr := f.allow("wh", after)
		require.True(t, v.Probe, "probe %d", i)
		if i == 0 {
			require.Equal(t, HalfOpened, tr)
		}
		want := NoTransition
		if i == 2 {
			want = ClosedAgain
		}
		require.Equal(t, want, f.record("wh", after, true, true))
	}
	require.Equal(t, Closed, f.snapshot("wh", after).State)
}
