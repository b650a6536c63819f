package redistest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// SentinelMaster is the name the sentinels of StartSentinel know their
// primary by.
const SentinelMaster = "testmaster"

// LocalSentinel is a primary, its replica and one sentinel watching them,
// started by a test for itself.
type LocalSentinel struct {
	*Servers
	// Primary and Replica are the ports the two servers started on.
	Primary, Replica int
	// URL is the redis.url of mode sentinel that reaches them.
	URL string

	sentinel int
}

// StartSentinel starts a primary on port base, its replica on base+1 and a
// sentinel on base+2 (a quorum of one: a failover needs no other
// sentinel's vote). They are killed when t ends.
func StartSentinel(t testing.TB, base int) *LocalSentinel {
	t.Helper()
	s := &LocalSentinel{Servers: newServers(t), Primary: base, Replica: base + 1, sentinel: base + 2}
	s.start(s.Primary)
	s.start(s.Replica, "--replicaof", "127.0.0.1", strconv.Itoa(s.Primary))
	conf := filepath.Join(t.TempDir(), "sentinel.conf")
	require.NoError(t, os.WriteFile(conf, fmt.Appendf(nil,
		"sentinel monitor %s 127.0.0.1 %d 1\nsentinel down-after-milliseconds %[1]s 1000\nsentinel failover-timeout %[1]s 5000\n",
		SentinelMaster, s.Primary), 0o600))
	s.start(s.sentinel, conf, "--sentinel")
	s.URL = fmt.Sprintf("redis://%s/0?master_name=%s", addr(s.sentinel), SentinelMaster)
	require.Eventually(t, s.replicaInSync, 30*time.Second, 100*time.Millisecond, "the sentinel did not find the replica in sync")
	return s
}

// replicaInSync reports whether the sentinel knows the replica, linked to
// its primary.
func (s *LocalSentinel) replicaInSync() bool {
	rdb := redis.NewSentinelClient(&redis.Options{Addr: addr(s.sentinel), MaxRetries: -1})
	defer rdb.Close()
	replicas, err := rdb.Replicas(context.Background(), SentinelMaster).Result()
	return err == nil && len(replicas) == 1 && replicas[0]["flags"] == "slave" && replicas[0]["master-link-status"] == "ok"
}

// Replicated waits until the primary has passed everything written to it
// so far to the replica.
func (s *LocalSentinel) Replicated() {
	s.t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr(s.Primary)})
	defer rdb.Close()
	acked, err := rdb.Do(context.Background(), "WAIT", 1, 2000).Int()
	require.NoError(s.t, err)
	require.Equal(s.t, 1, acked, "the replica did not acknowledge the writes")
}

// Failover makes the sentinel fail the primary over to the replica (SENTINEL
// FAILOVER) and waits until it names the replica as the primary.
func (s *LocalSentinel) Failover() {
	s.t.Helper()
	rdb := redis.NewSentinelClient(&redis.Options{Addr: addr(s.sentinel)})
	defer rdb.Close()
	ctx := context.Background()
	require.NoError(s.t, rdb.Failover(ctx, SentinelMaster).Err())
	require.Eventually(s.t, func() bool {
		a, err := rdb.GetMasterAddrByName(ctx, SentinelMaster).Result()
		return err == nil && a[1] == strconv.Itoa(s.Replica)
	}, 30*time.Second, 50*time.Millisecond, "the sentinel did not promote the replica")
}
