package localcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Redis is a Redis Cluster started by StartRedis.
type Redis struct {
	// Addrs are the nodes' addresses, in start order.
	Addrs []string

	dir   string
	procs map[string]*exec.Cmd
}

// StartRedis starts masters*(1+replicas) redis-server processes with
// cluster mode on, on 127.0.0.1:basePort and the ports after it, keeping
// nothing on disk but the cluster's own state, creates the cluster with
// redis-cli and waits until every node reports it ok. A master's replica
// takes over about two seconds after the master stops answering.
func StartRedis(ctx context.Context, masters, replicas, basePort int) (_ *Redis, err error) {
	dir, err := os.MkdirTemp("", "hookline-redis-cluster-")
	if err != nil {
		return nil, err
	}
	c := &Redis{dir: dir, procs: map[string]*exec.Cmd{}}
	defer func() {
		if err != nil {
			err = errors.Join(err, c.Close())
		}
	}()
	for i := range masters * (1 + replicas) {
		port := basePort + i
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		nodeDir := filepath.Join(dir, strconv.Itoa(port))
		if err := os.Mkdir(nodeDir, 0o755); err != nil { //nolint:gosec // a throwaway directory
			return nil, err
		}
		cmd := exec.Command("redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000",
			"--save", "", "--appendonly", "no", "--dir", nodeDir, "--logfile", "redis.log")
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			return nil, fmt.Errorf("start redis-server on %s: %w", addr, err)
		}
		go func() { _ = cmd.Wait() }()
		c.procs[addr] = cmd
		c.Addrs = append(c.Addrs, addr)
	}
	for _, addr := range c.Addrs {
		if err := waitFor(ctx, 30*time.Second, func() bool { return cli(ctx, addr, "ping") == "PONG" }); err != nil {
			return nil, fmt.Errorf("redis-server on %s: %w", addr, err)
		}
	}
	args := append([]string{"--cluster", "create"}, c.Addrs...)
	args = append(args, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	if out, err := exec.CommandContext(ctx, "redis-cli", args...).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("redis-cli --cluster create: %w: %s", err, out)
	}
	for _, addr := range c.Addrs {
		if err := waitFor(ctx, time.Minute, func() bool { return c.clusterOK(ctx, addr) }); err != nil {
			return nil, fmt.Errorf("cluster state at %s: %w", addr, err)
		}
	}
	return c, nil
}

// URL returns the cluster's address in go-redis's cluster URL form, as
// hookline's redis.url takes it with redis.mode cluster.
func (c *Redis) URL() string {
	q := make([]string, 0, len(c.Addrs)-1)
	for _, a := range c.Addrs[1:] {
		q = append(q, "addr="+a)
	}
	return "redis://" + c.Addrs[0] + "?" + strings.Join(q, "&")
}

// Masters returns the addresses of the masters that serve slots now, with
// the number of keys each holds, as an alive node sees them.
func (c *Redis) Masters(ctx context.Context) (map[string]int, error) {
	for addr, p := range c.procs {
		if p == nil {
			continue
		}
		out := cli(ctx, addr, "cluster", "nodes")
		if out == "" {
			continue
		}
		masters := map[string]int{}
		for _, line := range strings.Split(out, "\n") {
			f := strings.Fields(line)
			// <id> <ip:port@cport> <flags> <master> <ping> <pong> <epoch> <state> <slots>...
			if len(f) < 9 || !strings.Contains(f[2], "master") || strings.Contains(f[2], "fail") {
				continue
			}
			a := strings.Split(f[1], "@")[0]
			n, _ := strconv.Atoi(cli(ctx, a, "dbsize"))
			masters[a] = n
		}
		return masters, nil
	}
	return nil, errors.New("no node answers")
}

// Pids returns the process ids of the running nodes.
func (c *Redis) Pids() []int {
	var pids []int
	for _, p := range c.procs {
		if p != nil {
			pids = append(pids, p.Process.Pid)
		}
	}
	return pids
}

// Kill sends SIGKILL to the node at addr and leaves it down.
func (c *Redis) Kill(addr string) error {
	p := c.procs[addr]
	if p == nil {
		return fmt.Errorf("no running node at %s", addr)
	}
	c.procs[addr] = nil
	return p.Process.Kill()
}

// Close kills every node and removes their directories.
func (c *Redis) Close() error {
	for _, p := range c.procs {
		if p != nil {
			_ = p.Process.Kill()
		}
	}
	return os.RemoveAll(c.dir)
}

func (c *Redis) clusterOK(ctx context.Context, addr string) bool {
	return strings.Contains(cli(ctx, addr, "cluster", "info"), "cluster_state:ok")
}

// cli runs redis-cli against addr and returns its trimmed output, or ""
// when it fails.
func cli(ctx context.Context, addr string, args ...string) string {
	host, port, _ := strings.Cut(addr, ":")
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "redis-cli", append([]string{"-h", host, "-p", port}, args...)...).Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

func waitFor(ctx context.Context, limit time.Duration, ok func() bool) error {
	deadline := time.Now().Add(limit)
	for !ok() {
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready within %s", limit)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return nil
}
