// Package localcluster starts throwaway clusters of the brokers beside the
// machine's own services, for the load programs under bench/: RabbitMQ
// nodes with their own node names, ports and data directories, run as the
// rabbitmq user so that they share its Erlang cookie, and a Redis Cluster
// of redis-server processes on ports of their own. Close stops them and
// removes their directories, whether the run ended well or not.
package localcluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// RabbitMQ is a cluster of RabbitMQ nodes started by StartRabbitMQ.
type RabbitMQ struct {
	// Nodes are the node names, in start order; the first is the one the
	// others joined.
	Nodes []string
	// Ports are the nodes' AMQP ports, in the same order.
	Ports []int

	dir   string
	procs []*exec.Cmd
	down  map[string]bool
}

// rabbitBin is where Debian's package keeps the scripts that run as the
// calling user (the ones on PATH switch to the rabbitmq user themselves).
const rabbitBin = "/usr/lib/rabbitmq/bin"

// StartRabbitMQ starts n nodes named <name>-a@localhost, <name>-b@localhost
// and so on, listening for AMQP on 127.0.0.1:basePort, basePort+1, ...
// (and for distribution 20,000 above), joins them into one cluster and
// waits until every node runs. It must run as root.
func StartRabbitMQ(ctx context.Context, name string, n, basePort int) (_ *RabbitMQ, err error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("starting RabbitMQ nodes as the rabbitmq user needs root")
	}
	dir, err := os.MkdirTemp("", "hookline-rabbitmq-")
	if err != nil {
		return nil, err
	}
	c := &RabbitMQ{dir: dir, down: map[string]bool{}}
	defer func() {
		if err != nil {
			err = errors.Join(err, c.Close())
		}
	}()
	if out, err := exec.Command("chown", "rabbitmq:rabbitmq", dir).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("chown %s: %w: %s", dir, err, out)
	}
	for i := range n {
		node := fmt.Sprintf("%s-%c@localhost", name, 'a'+i)
		port := basePort + i
		if err := c.startNode(node, port); err != nil {
			return nil, err
		}
		c.Nodes, c.Ports = append(c.Nodes, node), append(c.Ports, port)
	}
	for _, node := range c.Nodes {
		if err := ctl(ctx, 3*time.Minute, "-n", node, "await_startup"); err != nil {
			return nil, fmt.Errorf("node %s did not start: %w; its log ends with:\n%s", node, err, c.logTail(node))
		}
	}
	for _, node := range c.Nodes[1:] {
		for _, args := range [][]string{{"stop_app"}, {"join_cluster", c.Nodes[0]}, {"start_app"}} {
			if err := ctl(ctx, 2*time.Minute, append([]string{"-n", node}, args...)...); err != nil {
				return nil, fmt.Errorf("join %s to %s: %w", node, c.Nodes[0], err)
			}
		}
	}
	return c, nil
}

// startNode runs one node in the foreground as the rabbitmq user, with a
// configuration file of its own (the machine's names the default node's
// port) and no plugins (the management plugin would want the default
// node's HTTP port).
func (c *RabbitMQ) startNode(node string, port int) error {
	base := filepath.Join(c.dir, strings.Split(node, "@")[0])
	conf := base + ".conf"
	plugins := base + ".plugins"
	files := map[string]string{
		conf:    fmt.Sprintf("listeners.tcp.local = 127.0.0.1:%d\nloopback_users = none\n", port),
		plugins: "[].\n",
	}
	for path, body := range files {
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil { //nolint:gosec // read by the rabbitmq user
			return err
		}
	}
	env := []string{
		"HOME=/var/lib/rabbitmq",
		"PATH=" + os.Getenv("PATH"),
		"RABBITMQ_NODENAME=" + node,
		"RABBITMQ_NODE_PORT=" + strconv.Itoa(port),
		"RABBITMQ_DIST_PORT=" + strconv.Itoa(port+20000),
		"RABBITMQ_CONFIG_FILE=" + conf,
		"RABBITMQ_CONF_ENV_FILE=" + filepath.Join(c.dir, "none.env"),
		"RABBITMQ_ENABLED_PLUGINS_FILE=" + plugins,
		"RABBITMQ_MNESIA_BASE=" + base + "-data",
		"RABBITMQ_LOG_BASE=" + base + "-log",
		"RABBITMQ_PID_FILE=" + base + ".pid",
		"ERL_EPMD_ADDRESS=127.0.0.1",
		// One scheduler thread each: three nodes share two cores with
		// everything else.
		"RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=+S 1:1 -kernel inet_dist_use_interface {127,0,0,1}",
	}
	cmd := exec.Command("runuser", append(append([]string{"-u", "rabbitmq", "--", "env"}, env...), rabbitBin+"/rabbitmq-server")...)
	out, err := os.Create(base + ".out")
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = out.Close()
		return fmt.Errorf("start %s: %w", node, err)
	}
	go func() { _ = cmd.Wait(); _ = out.Close() }()
	c.procs = append(c.procs, cmd)
	return nil
}

// URL returns the cluster's AMQP URLs, comma-separated, as hookline's
// amqp.url takes them.
func (c *RabbitMQ) URL() string {
	urls := make([]string, len(c.Ports))
	for i, p := range c.Ports {
		urls[i] = fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d/", p)
	}
	return strings.Join(urls, ",")
}

// Leaders counts the queues (of the default vhost) each running node
// leads; classic queues count for the node they live on.
func (c *RabbitMQ) Leaders(ctx context.Context) (map[string]int, error) {
	node := c.alive()
	if node == "" {
		return nil, errors.New("no node is running")
	}
	out, err := ctlOutput(ctx, time.Minute, "-n", node, "list_queues", "-p", "/", "name", "type", "leader", "pid", "--formatter", "json")
	if err != nil {
		return nil, err
	}
	var queues []struct {
		Name, Type, Leader, Pid string
	}
	if err := json.Unmarshal(out, &queues); err != nil {
		return nil, fmt.Errorf("list_queues: %w: %s", err, out)
	}
	counts := map[string]int{}
	for _, q := range queues {
		leader := q.Leader
		if leader == "" { // a classic queue: its process's node, <rabbit@host.1.2.3>
			leader = strings.Trim(strings.SplitN(q.Pid, ".", 2)[0], "<")
		}
		counts[leader]++
	}
	return counts, nil
}

// Kill sends SIGKILL to node's Erlang VM, as a crash or a lost machine
// would, and leaves it down.
func (c *RabbitMQ) Kill(ctx context.Context, node string) error {
	pid, err := c.pid(ctx, node)
	if err != nil {
		return err
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill %s (pid %d): %w", node, pid, err)
	}
	c.down[node] = true
	return nil
}

// Pids returns the process ids of the running nodes' Erlang VMs.
func (c *RabbitMQ) Pids(ctx context.Context) ([]int, error) {
	var pids []int
	for _, node := range c.Nodes {
		if c.down[node] {
			continue
		}
		pid, err := c.pid(ctx, node)
		if err != nil {
			return nil, err
		}
		pids = append(pids, pid)
	}
	return pids, nil
}

func (c *RabbitMQ) pid(ctx context.Context, node string) (int, error) {
	out, err := ctlOutput(ctx, 30*time.Second, "-n", node, "eval", "list_to_integer(os:getpid()).")
	if err != nil {
		return 0, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		return 0, fmt.Errorf("pid of %s: %q", node, out)
	}
	return pid, nil
}

func (c *RabbitMQ) alive() string {
	for _, n := range c.Nodes {
		if !c.down[n] {
			return n
		}
	}
	return ""
}

// Close stops every node still running (SIGKILL after a minute), waits
// for them and removes their directories.
func (c *RabbitMQ) Close() error {
	var wg sync.WaitGroup
	for _, node := range c.Nodes {
		if c.down[node] {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = ctl(context.Background(), time.Minute, "-n", node, "stop")
		}()
	}
	wg.Wait()
	var errs []error
	for _, p := range c.procs {
		_ = syscall.Kill(-p.Process.Pid, syscall.SIGKILL)
	}
	// The VM runs as another user, in the process group of runuser; the
	// node's own stop has ended it, or the group kill above.
	for _, node := range c.Nodes {
		if pid, err := readPid(filepath.Join(c.dir, strings.Split(node, "@")[0]+".pid")); err == nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	if err := os.RemoveAll(c.dir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func (c *RabbitMQ) logTail(node string) string {
	raw, _ := os.ReadFile(filepath.Join(c.dir, strings.Split(node, "@")[0]+".out"))
	lines := strings.Split(strings.TrimRight(string(raw), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-15):], "\n")
}

func readPid(path string) (int, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(raw)))
}

func ctl(ctx context.Context, limit time.Duration, args ...string) error {
	_, err := ctlOutput(ctx, limit, args...)
	return err
}

// ctlOutput runs rabbitmqctl (which, run as root, switches to the
// rabbitmq user and so has its cookie) quietly and returns its output.
func ctlOutput(ctx context.Context, limit time.Duration, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	out, err := exec.CommandContext(ctx, "rabbitmqctl", append([]string{"-q"}, args...)...).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("rabbitmqctl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return out, nil
}
