package redisclient_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/breaker"
	"github.com/hookline/hookline/internal/ratelimit"
	"github.com/hookline/hookline/internal/redisclient"
	"github.com/hookline/hookline/internal/redistest"
)

// The client of mode sentinel follows its primary through a failover
// (SENTINEL FAILOVER): a circuit opened before it is still open after, on
// the new primary, and both the breaker and the buckets write there.
func TestSentinelClientFollowsAFailover(t *testing.T) {
	t.Parallel()
	s := redistest.StartSentinel(t, 7410)
	rdb, err := redisclient.New(redisclient.Sentinel, s.URL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()
	cfg := breaker.Config{ErrorThresholdPercentage: 60, MinimumThroughput: 20, Window: time.Minute, SleepWindow: 30 * time.Second,
		HalfOpenMaxCalls: 5, HalfOpenSuccessThreshold: 60}
	b, limits := breaker.New(rdb, "s:"), ratelimit.New(rdb, "s:")
	now := time.Now()
	for range 20 {
		_, _, err := b.Record(ctx, "wh", cfg, now, false, false)
		require.NoError(t, err)
	}
	s.Replicated()
	s.Failover()

	// The client learns of the switch from the sentinel and leaves the old
	// primary, now a replica, for the new one.
	require.Eventually(t, func() bool {
		info, err := rdb.Info(ctx, "server").Result()
		return err == nil && strings.Contains(info, "tcp_port:"+strconv.Itoa(s.Replica)+"\r\n")
	}, 30*time.Second, 50*time.Millisecond, "the client did not move to the promoted replica")
	v, _, err := b.Allow(ctx, "wh", cfg, now)
	require.NoError(t, err)
	require.Equal(t, breaker.Open, v.State, "the circuit opened before the failover is open after it")

	// Writes go to the new primary: READONLY from the old one would fail
	// them.
	later := now.Add(31 * time.Second)
	v, tr, err := b.Allow(ctx, "wh", cfg, later)
	require.NoError(t, err)
	require.True(t, v.Probe)
	require.Equal(t, breaker.HalfOpened, tr)
	ok, _, err := limits.Take(ctx, later, ratelimit.Bucket{Key: ratelimit.WebhookKey("t", "wh"), Limit: ratelimit.Limit{PerMinute: 60, Burst: 1}})
	require.NoError(t, err)
	require.True(t, ok)
}
