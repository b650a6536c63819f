// Package localcluster starts throwaway clusters of the brokers beside the
// machine's own services, for the load programs under bench/: three
// RabbitMQ nodes with their own node names, ports and data directories
// (deploy/local/rabbit-cluster.sh, as the tests' cluster), and a Redis
// Cluster of redis-server processes on ports of their own. Close stops
// them and removes their data.
package localcluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// RabbitMQ is a cluster of three RabbitMQ nodes started by StartRabbitMQ.
type RabbitMQ struct {
	// Nodes are the node names, in start order; the first is the one the
	// others joined.
	Nodes []string
	// Ports are the nodes' AMQP ports, in the same order.
	Ports []int

	name string
	base int
	down map[string]bool
}

// clusterScript starts and removes a local three-node cluster, as the
// tests' does (run from the repository's root).
const clusterScript = "deploy/local/rabbit-cluster.sh"

// StartRabbitMQ starts three nodes named <name>-a@localhost,
// <name>-b@localhost and <name>-c@localhost with deploy/local/rabbit-cluster.sh,
// listening for AMQP on 127.0.0.1:basePort+1 to basePort+3, joined into one
// cluster. It must run as root, from the repository's root.
func StartRabbitMQ(ctx context.Context, name string, basePort int) (_ *RabbitMQ, err error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("starting RabbitMQ nodes as the rabbitmq user needs root")
	}
	c := &RabbitMQ{name: name, base: basePort, down: map[string]bool{}}
	for i, l := range []string{"a", "b", "c"} {
		c.Nodes = append(c.Nodes, name+"-"+l+"@localhost")
		c.Ports = append(c.Ports, basePort+1+i)
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, c.Close())
		}
	}()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "bash", clusterScript, "up", name, strconv.Itoa(basePort)).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("%s up: %w\n%s", clusterScript, err, out)
	}
	return c, nil
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

// Close stops the nodes still running and removes their data.
func (c *RabbitMQ) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "bash", clusterScript, "down", c.name, strconv.Itoa(c.base)).CombinedOutput(); err != nil {
		return fmt.Errorf("%s down: %w\n%s", clusterScript, err, out)
	}
	return nil
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
