package redistest

import (
	"context"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/redisclient"
)

// Servers are redis-server processes a test started and owns: each is
// killed, and its directory removed, when the test ends.
type Servers struct {
	t     testing.TB
	procs map[int]*exec.Cmd
}

func newServers(t testing.TB) *Servers {
	t.Helper()
	for _, prog := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(prog); err != nil {
			unavailable(t, prog+" is not installed")
		}
	}
	s := &Servers{t: t, procs: map[int]*exec.Cmd{}}
	t.Cleanup(func() {
		for _, p := range s.procs {
			_ = p.Process.Kill()
			_ = p.Wait()
		}
	})
	return s
}

// start runs redis-server on port (in a directory of its own) with args,
// the first of which may be a configuration file.
func (s *Servers) start(port int, args ...string) {
	s.t.Helper()
	if c, err := net.DialTimeout("tcp", addr(port), 100*time.Millisecond); err == nil {
		_ = c.Close()
		s.t.Fatalf("port %d is taken: the test starts its own Redis there", port)
	}
	dir := s.t.TempDir()
	var conf []string
	if len(args) > 0 && !strings.HasPrefix(args[0], "--") {
		conf, args = args[:1], args[1:]
	}
	args = append(append(conf, "--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--save", "", "--appendonly", "no", "--dir", dir), args...)
	cmd := exec.Command("redis-server", args...)
	require.NoError(s.t, cmd.Start())
	s.procs[port] = cmd
	require.Eventually(s.t, func() bool {
		rdb := redis.NewClient(&redis.Options{Addr: addr(port), MaxRetries: -1})
		defer rdb.Close()
		return rdb.Ping(context.Background()).Err() == nil
	}, 10*time.Second, 20*time.Millisecond, "redis-server on port %d did not answer", port)
}

// Kill kills the server on port with SIGKILL, as a crash would, and waits
// until it is gone.
func (s *Servers) Kill(port int) {
	s.t.Helper()
	p, ok := s.procs[port]
	require.True(s.t, ok, "no server of the test on port %d", port)
	require.NoError(s.t, p.Process.Kill())
	_ = p.Wait()
	delete(s.procs, port)
}

func addr(port int) string { return "127.0.0.1:" + strconv.Itoa(port) }

// LocalCluster is a Redis Cluster of three masters and three replicas that
// a test started for itself, to kill its nodes.
type LocalCluster struct {
	*Servers
	// Ports are the nodes' ports, base to base+5 (their cluster bus ports
	// are 10000 higher).
	Ports []int
}

// StartCluster starts a Redis Cluster on ports base to base+5, with a node
// timeout of one second so that a replica takes over a killed master
// within seconds. It is killed when t ends.
func StartCluster(t testing.TB, base int) *LocalCluster {
	t.Helper()
	c := &LocalCluster{Servers: newServers(t)}
	for i := range 6 {
		port := base + i
		c.Ports = append(c.Ports, port)
		c.start(port, "--cluster-enabled", "yes", "--cluster-config-file", "nodes-"+strconv.Itoa(port)+".conf",
			"--cluster-node-timeout", "1000")
	}
	args := []string{"--cluster", "create"}
	for _, p := range c.Ports {
		args = append(args, addr(p))
	}
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	out, err := exec.Command("redis-cli", args...).CombinedOutput()
	require.NoError(t, err, "redis-cli --cluster create: %s", out)
	c.WaitOK()
	require.Eventually(t, c.replicating, 30*time.Second, 100*time.Millisecond, "the replicas did not start replicating")
	return c
}

// replicating reports whether every master has its replica and every
// replica is in sync with its master.
func (c *LocalCluster) replicating() bool {
	for port := range c.procs {
		rdb := redis.NewClient(&redis.Options{Addr: addr(port), MaxRetries: -1})
		info, err := rdb.Info(context.Background(), "replication").Result()
		_ = rdb.Close()
		if err != nil || (!strings.Contains(info, "connected_slaves:1") && !strings.Contains(info, "master_link_status:up")) {
			return false
		}
	}
	return true
}

// WaitOK waits until every live node of the cluster reports
// cluster_state:ok.
func (c *LocalCluster) WaitOK() {
	c.t.Helper()
	require.Eventually(c.t, func() bool {
		for port := range c.procs {
			rdb := redis.NewClient(&redis.Options{Addr: addr(port), MaxRetries: -1})
			info, err := rdb.ClusterInfo(context.Background()).Result()
			_ = rdb.Close()
			if err != nil || !strings.Contains(info, "cluster_state:ok") {
				return false
			}
		}
		return true
	}, 30*time.Second, 100*time.Millisecond, "the cluster did not reach cluster_state:ok")
}

// Client returns a client of the cluster as the processes open it
// (redisclient), closed when the test ends.
func (c *LocalCluster) Client() *redis.ClusterClient {
	c.t.Helper()
	u := "redis://" + addr(c.Ports[0]) + "?addr=" + addr(c.Ports[1]) + "&addr=" + addr(c.Ports[2])
	rdb, err := redisclient.New(redisclient.Cluster, u)
	require.NoError(c.t, err)
	c.t.Cleanup(func() { _ = rdb.Close() })
	return rdb.(*redis.ClusterClient)
}

// MasterOf returns the port of the master holding key.
func (c *LocalCluster) MasterOf(ctx context.Context, rdb *redis.ClusterClient, key string) int {
	c.t.Helper()
	node, err := rdb.MasterForKey(ctx, key)
	require.NoError(c.t, err)
	_, port, err := net.SplitHostPort(node.Options().Addr)
	require.NoError(c.t, err)
	p, err := strconv.Atoi(port)
	require.NoError(c.t, err)
	return p
}

// Replicated waits until the master holding key has passed everything
// written to it so far to its replica, so that killing the master loses
// none of it.
func (c *LocalCluster) Replicated(ctx context.Context, rdb *redis.ClusterClient, key string) {
	c.t.Helper()
	node, err := rdb.MasterForKey(ctx, key)
	require.NoError(c.t, err)
	// Within the client's read timeout (3 s).
	acked, err := node.Do(ctx, "WAIT", 1, 2000).Int()
	require.NoError(c.t, err)
	require.Equal(c.t, 1, acked, "the replica of %s did not acknowledge the writes", node.Options().Addr)
}
