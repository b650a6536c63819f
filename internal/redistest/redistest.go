// Package redistest gives each test its own Redis key prefix and deletes
// every key under it when the test ends, on the local server or on the
// local Redis Cluster (deploy/local/services.sh --test starts both), so
// that the packages that keep state in Redis run their tests against both
// (EachMode). It also starts throwaway clusters and Sentinel setups for
// the tests that kill a node (cluster.go, sentinel.go).
package redistest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hookline/hookline/internal/redisclient"
)

// Mode is a kind of Redis deployment the tests run against.
type Mode string

// The modes of EachMode.
const (
	// Single is the local server, Addr.
	Single Mode = "single"
	// Cluster is the local Redis Cluster, ClusterAddrs.
	Cluster Mode = "cluster"
)

// Addr is the Redis used by tests: $TEST_REDIS_ADDR or 127.0.0.1:6379.
func Addr() string {
	if a := os.Getenv("TEST_REDIS_ADDR"); a != "" {
		return a
	}
	return "127.0.0.1:6379"
}

// ClusterAddrs are nodes of the Redis Cluster used by tests:
// $TEST_REDIS_CLUSTER_ADDRS (comma-separated) or the three masters that
// deploy/local/services.sh --test starts, 127.0.0.1:7000 to 7002.
func ClusterAddrs() []string {
	if a := os.Getenv("TEST_REDIS_CLUSTER_ADDRS"); a != "" {
		return strings.Split(a, ",")
	}
	return []string{"127.0.0.1:7000", "127.0.0.1:7001", "127.0.0.1:7002"}
}

// ClusterURL is ClusterAddrs as a redis.url of redis.mode cluster.
func ClusterURL() string {
	addrs := ClusterAddrs()
	u := "redis://" + addrs[0]
	for i, a := range addrs[1:] {
		sep := "&"
		if i == 0 {
			sep = "?"
		}
		u += sep + "addr=" + a
	}
	return u
}

// requireEnv names the variable that makes a test needing a service that
// is not running fail instead of skip (.ci/run sets it).
const requireEnv = "HOOKLINE_REQUIRE_CLUSTER"

// unavailable skips t, or fails it when requireEnv is set, because what
// it needs is missing.
func unavailable(t testing.TB, what string) {
	t.Helper()
	if os.Getenv(requireEnv) == "1" {
		t.Fatalf("%s (%s=1: the test may not skip; run deploy/local/services.sh --test)", what, requireEnv)
	}
	t.Skipf("%s: run deploy/local/services.sh --test (with %s=1 this fails)", what, requireEnv)
}

var clusterUp = sync.OnceValue(func() error {
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: ClusterAddrs(), MaxRetries: -1})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	info, err := rdb.ClusterInfo(ctx).Result()
	if err != nil {
		return err
	}
	if !strings.Contains(info, "cluster_state:ok") {
		return errors.New("cluster_state is not ok")
	}
	return nil
})

// Client returns a new client of the test Redis of mode, closed when t
// ends. A test asking for the cluster when it is not running is skipped,
// or fails with HOOKLINE_REQUIRE_CLUSTER=1.
func Client(t testing.TB, mode Mode) redis.UniversalClient {
	t.Helper()
	var rdb redis.UniversalClient
	switch mode {
	case Single:
		rdb = redis.NewClient(&redis.Options{Addr: Addr()})
	case Cluster:
		if err := clusterUp(); err != nil {
			unavailable(t, fmt.Sprintf("the test Redis Cluster (%s) is not running: %v", strings.Join(ClusterAddrs(), ", "), err))
		}
		var err error
		if rdb, err = redisclient.New(redisclient.Cluster, ClusterURL()); err != nil {
			t.Fatalf("redistest: %v", err)
		}
	default:
		t.Fatalf("redistest: unknown mode %q", mode)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// EachMode runs test as a parallel subtest against each mode: the single
// server and the cluster.
func EachMode(t *testing.T, test func(t *testing.T, mode Mode)) {
	t.Helper()
	t.Parallel()
	for _, mode := range []Mode{Single, Cluster} {
		t.Run(string(mode), func(t *testing.T) { test(t, mode) })
	}
}

// Prefix returns a fresh key prefix ("test-<random>:") whose keys are
// deleted from the single server (Addr) when t ends.
func Prefix(t testing.TB) string {
	t.Helper()
	prefix := newPrefix()
	t.Cleanup(func() {
		rdb := redis.NewClient(&redis.Options{Addr: Addr()})
		defer rdb.Close()
		_, _ = DeleteKeys(context.Background(), rdb, prefix)
	})
	return prefix
}

// PrefixOn returns a fresh key prefix whose keys are deleted through rdb
// when t ends (before rdb is closed, if Client made it for t).
func PrefixOn(t testing.TB, rdb redis.UniversalClient) string {
	t.Helper()
	prefix := newPrefix()
	t.Cleanup(func() { _, _ = DeleteKeys(context.Background(), rdb, prefix) })
	return prefix
}

func newPrefix() string {
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	return "test-" + hex.EncodeToString(b) + ":"
}

// Keys returns every key under prefix, from every master of a cluster.
func Keys(ctx context.Context, rdb redis.UniversalClient, prefix string) ([]string, error) {
	var mu sync.Mutex
	var keys []string
	err := eachMaster(ctx, rdb, func(ctx context.Context, node redis.Cmdable) error {
		iter := node.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			mu.Lock()
			keys = append(keys, iter.Val())
			mu.Unlock()
		}
		return iter.Err()
	})
	return keys, err
}

// DeleteKeys deletes every key under prefix and returns how many there
// were. On a cluster it deletes them master by master, one key a command
// (a DEL of several keys must find them in one slot).
func DeleteKeys(ctx context.Context, rdb redis.UniversalClient, prefix string) (int, error) {
	var deleted atomic.Int64
	err := eachMaster(ctx, rdb, func(ctx context.Context, node redis.Cmdable) error {
		iter := node.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		pipe := node.Pipeline()
		for iter.Next(ctx) {
			pipe.Del(ctx, iter.Val())
		}
		if err := iter.Err(); err != nil {
			return err
		}
		n := pipe.Len()
		if n == 0 {
			return nil
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return err
		}
		deleted.Add(int64(n))
		return nil
	})
	return int(deleted.Load()), err
}

// eachMaster calls fn with each master of a cluster, or with rdb itself.
func eachMaster(ctx context.Context, rdb redis.UniversalClient, fn func(context.Context, redis.Cmdable) error) error {
	if c, ok := rdb.(*redis.ClusterClient); ok {
		return c.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error { return fn(ctx, node) })
	}
	return fn(ctx, rdb)
}

// Counter is a client hook (redis.Client.AddHook) counting what the client
// sends: pipelines (not those that set up a new connection), and the Lua
// scripts that ran, in pipelines or not (a script sent by its digest that
// Redis did not hold yet is sent again with its text, and counted once).
type Counter struct{ pipelines, scripts atomic.Int64 }

// Pipelines is the number of pipelines sent.
func (c *Counter) Pipelines() int64 { return c.pipelines.Load() }

// Scripts is the number of scripts run.
func (c *Counter) Scripts() int64 { return c.scripts.Load() }

// DialHook implements redis.Hook.
func (c *Counter) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook implements redis.Hook.
func (c *Counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		// The client sets cmd's error only after its hooks have run.
		c.count(cmd, err)
		return err
	}
}

// ProcessPipelineHook implements redis.Hook.
func (c *Counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if !connectionSetup(cmds) {
			c.pipelines.Add(1)
		}
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			c.count(cmd, cmd.Err())
		}
		return err
	}
}

func (c *Counter) count(cmd redis.Cmder, err error) {
	if name := cmd.Name(); (name == "evalsha" || name == "eval") && !isNoScript(err) {
		c.scripts.Add(1)
	}
}

// isNoScript: as redisbatch.IsNoScript (which imports nothing of tests).
func isNoScript(err error) bool {
	return errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT")
}

// connectionSetup reports whether cmds are the commands go-redis sends, as
// a pipeline, on a new connection.
func connectionSetup(cmds []redis.Cmder) bool {
	for _, cmd := range cmds {
		switch cmd.Name() {
		case "hello", "client", "auth", "select":
		default:
			return false
		}
	}
	return true
}
