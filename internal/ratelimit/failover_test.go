package ratelimit

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/redistest"
)

// A Redis Cluster master dies (SIGKILL) holding a drained bucket and a
// backlog of reservations: once its replica has taken over, the bucket is
// still drained and the next reservation comes after the backlog.
func TestBucketsSurviveTheLossOfTheirClusterMaster(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t, 7310)
	rdb := c.Client()
	ctx := context.Background()
	f := &fixture{t: t, ctx: ctx, rdb: rdb, prefix: "failover:", l: New(rdb, "failover:")}
	wh := Bucket{Key: WebhookKey("1", "1"), Limit: webhookLimit}
	tenant := Bucket{Key: TenantKey("1"), Limit: Limit{PerMinute: 60, Burst: 2}}

	f.requireTakes(20, t0, wh)
	require.Equal(t, []int64{0, 0, 1000, 2000}, f.reserve(4, t0, wh, tenant))
	key := f.prefix + takeSpace + wh.Key
	c.Replicated(ctx, rdb, key)
	master := c.MasterOf(ctx, rdb, key)
	c.Kill(master)

	require.Eventually(t, func() bool {
		_, _, err := f.l.Take(ctx, t0, wh)
		return err == nil
	}, 30*time.Second, 50*time.Millisecond, "the limiter did not answer after the failover")
	require.NotEqual(t, master, c.MasterOf(ctx, rdb, key))
	f.requireRefused(600*time.Millisecond, t0, wh)
	require.Equal(t, []int64{3000}, f.reserve(1, t0, wh, tenant))
}
