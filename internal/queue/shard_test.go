package queue

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestShardNames(t *testing.T) {
	t.Parallel()
	one := Topology{Prefix: "hl"}
	require.Equal(t, "hl.work.high", one.WorkQueue("high"))
	require.Equal(t, []string{"hl.work.low"}, one.WorkQueues("low"), "one shard keeps the queue names of a deployment without shards")
	four := Topology{Prefix: "hl", Shards: 4}
	require.Equal(t, "hl.work.high", four.WorkQueue("high"))
	require.Equal(t, []string{"hl.work.normal", "hl.work.normal.1", "hl.work.normal.2", "hl.work.normal.3"}, four.WorkQueues("normal"))
	require.Equal(t, "high", Route{Priority: "high"}.Key())
	require.Equal(t, "high.3", Route{Priority: "high", Shard: 3}.Key())
	require.Len(t, Topology{Prefix: "hl", Shards: 1000}.WorkQueues("high"), MaxShards)
}

func TestRouteKeyRoundTrips(t *testing.T) {
	t.Parallel()
	for _, p := range Priorities {
		for shard := range MaxShards {
			r := Route{Priority: p, Shard: shard}
			require.Equal(t, r, RouteOf(r.Key()))
			require.Equal(t, r, RouteOf("1600."+r.Key()), "back from a delay tier")
		}
	}
}

func TestShardOfIsStableAndSpread(t *testing.T) {
	t.Parallel()
	require.Zero(t, Topology{Shards: 1}.ShardOf("a-webhook"))
	require.Zero(t, Topology{Shards: 8}.ShardOf(""))
	for _, n := range []int{2, 3, 8, 64} {
		topo := Topology{Shards: n}
		counts := make([]int, n)
		const keys = 20000
		for i := range keys {
			key := fmt.Sprintf("0195f3a2-7c1e-7d2b-9a1f-%012d", i)
			s := topo.ShardOf(key)
			require.Equal(t, s, topo.ShardOf(key), "stable")
			require.True(t, s >= 0 && s < n)
			counts[s]++
		}
		for s, c := range counts {
			// Within 15 % of an even share.
			require.InDelta(t, keys/n, c, 0.15*keys/float64(n), "%d shards: shard %d has %d of %d keys", n, s, c, keys)
		}
	}
	// The hash (32-bit FNV-1a) is part of the queue contract: a process
	// hashing otherwise would put a webhook's deliveries on another shard
	// than its peers do, so its values are pinned.
	require.Equal(t, 7, Topology{Shards: 8}.ShardOf("0195f3a2-7c1e-7d2b-9a1f-000000000001"))
	require.Equal(t, 2, Topology{Shards: 8}.ShardOf("0195f3a2-7c1e-7d2b-9a1f-000000000002"))
	require.Equal(t, 20, Topology{Shards: 64}.ShardOf("a-webhook"))
}

func TestSplitURLs(t *testing.T) {
	t.Parallel()
	require.Equal(t, []string{"amqp://a:5672/"}, SplitURLs("amqp://a:5672/"))
	require.Equal(t, []string{"amqp://a:1/", "amqp://b:2/", "amqp://c:3/"}, SplitURLs(" amqp://a:1/ ,amqp://b:2/,, amqp://c:3/,"))
	require.Empty(t, SplitURLs(" , "))
}
