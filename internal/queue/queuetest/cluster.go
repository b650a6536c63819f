package queuetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/hookline/hookline/internal/queue"
)

// defaultCluster is the local three-node cluster deploy/local/rabbit-cluster.sh
// starts (services.sh --test), as AMQP_URL names it.
const defaultCluster = "amqp://guest:guest@127.0.0.1:5701/,amqp://guest:guest@127.0.0.1:5702/,amqp://guest:guest@127.0.0.1:5703/"

// ClusterURL returns the URLs of a RabbitMQ cluster's nodes, comma-separated:
// $TEST_AMQP_CLUSTER_URL or the local cluster on 5701-5703. When a node
// does not answer, t is skipped, or failed with HOOKLINE_REQUIRE_CLUSTER=1
// (CI sets it).
func ClusterURL(t testing.TB) string {
	t.Helper()
	urls := os.Getenv("TEST_AMQP_CLUSTER_URL")
	if urls == "" {
		urls = defaultCluster
	}
	for _, u := range queue.SplitURLs(urls) {
		conn, err := amqp.DialConfig(u, amqp.Config{Dial: amqp.DefaultDial(2 * time.Second)})
		if err != nil {
			Unavailable(t, fmt.Sprintf("RabbitMQ cluster node %s does not answer (%v); start the local cluster with: sudo bash deploy/local/rabbit-cluster.sh up", redact(u), err))
			return ""
		}
		_ = conn.Close()
	}
	return urls
}

// Unavailable skips t for want of a cluster, saying why, or fails it when
// HOOKLINE_REQUIRE_CLUSTER=1.
func Unavailable(t testing.TB, why string) {
	t.Helper()
	if os.Getenv("HOOKLINE_REQUIRE_CLUSTER") == "1" {
		t.Fatalf("HOOKLINE_REQUIRE_CLUSTER=1 but %s", why)
	}
	t.Skip(why)
}

func redact(raw string) string {
	if i := strings.Index(raw, "@"); i >= 0 {
		if j := strings.Index(raw, "://"); j >= 0 && j < i {
			return raw[:j+3] + raw[i+1:]
		}
	}
	return raw
}

// NewTopologyAt returns a topology with a fresh prefix and shards work
// queues per priority, declared on the broker at urls (one URL or a
// cluster's list, of which the first answering is used) and deleted when
// t ends.
func NewTopologyAt(t testing.TB, urls string, shards int) queue.Topology {
	t.Helper()
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	topo := queue.Topology{Prefix: "test-" + hex.EncodeToString(b), Shards: shards}
	WithChannelAt(t, urls, func(ch *amqp.Channel) error { return topo.Declare(ch) })
	t.Cleanup(func() {
		// A throwaway cluster goes with everything in it; deleting quorum
		// queues while one of their members is down takes minutes.
		for _, u := range queue.SplitURLs(urls) {
			if _, ok := throwaway.Load(u); ok {
				return
			}
		}
		WithChannelAt(t, urls, func(ch *amqp.Channel) error { return topo.Delete(ch) })
	})
	return topo
}

// DepthAt returns the number of ready messages in queue name on the broker
// at urls.
func DepthAt(t testing.TB, urls, name string) int {
	t.Helper()
	var n int
	WithChannelAt(t, urls, func(ch *amqp.Channel) error {
		q, err := ch.QueueDeclarePassive(name, true, false, false, false, nil)
		n = q.Messages
		return err
	})
	return n
}

// WithChannelAt runs f on a channel of a connection of its own to the
// first node of urls that answers, failing t when none does or f fails.
func WithChannelAt(t testing.TB, urls string, f func(*amqp.Channel) error) {
	t.Helper()
	var conn *amqp.Connection
	var err error
	for _, u := range queue.SplitURLs(urls) {
		if conn, err = amqp.Dial(u); err == nil {
			break
		}
	}
	if conn == nil {
		t.Fatalf("connect to rabbitmq at %s: %v (is it running?)", redact(urls), err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatalf("rabbitmq channel: %v", err)
	}
	defer ch.Close()
	if err := f(ch); err != nil {
		t.Fatalf("rabbitmq: %v", err)
	}
}

// Cluster is a throwaway three-node RabbitMQ cluster a test started with
// StartCluster.
type Cluster struct {
	// URL is the nodes' URLs, comma-separated, as amqp.url takes them.
	URL string
	// Nodes are the node names, the first the one the others joined.
	Nodes []string
	t     testing.TB
}

// StartCluster starts a three-node cluster of its own for t, named
// name-a@localhost to name-c@localhost, on AMQP ports base+1 to base+3,
// with deploy/local/rabbit-cluster.sh, and removes it when t ends. It
// is for tests that kill a node: the shared local cluster stays whole for
// the tests running beside them. Starting takes 20 to 40 s. Without root
// (the nodes run as the rabbitmq user) t is skipped, or failed with
// HOOKLINE_REQUIRE_CLUSTER=1.
func StartCluster(t testing.TB, name string, base int) *Cluster {
	t.Helper()
	if os.Geteuid() != 0 {
		Unavailable(t, "starting RabbitMQ nodes as the rabbitmq user needs root")
		return nil
	}
	script := filepath.Join(repoRoot(t), "deploy", "local", "rabbit-cluster.sh")
	run := func(action string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, "bash", script, action, name, strconv.Itoa(base)).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%s %s %s: %w\n%s", script, action, name, err, out)
		}
		return nil
	}
	t.Cleanup(func() {
		if err := run("down"); err != nil {
			t.Error(err)
		}
	})
	if err := run("up"); err != nil {
		t.Fatal(err)
	}
	c := &Cluster{t: t}
	var urls []string
	for i, l := range []string{"a", "b", "c"} {
		c.Nodes = append(c.Nodes, name+"-"+l+"@localhost")
		urls = append(urls, fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d/", base+1+i))
	}
	c.URL = strings.Join(urls, ",")
	for _, u := range urls {
		throwaway.Store(u, true)
	}
	t.Cleanup(func() { // runs after the topologies' clean-ups
		for _, u := range urls {
			throwaway.Delete(u)
		}
	})
	return c
}

// throwaway holds the node URLs of the clusters StartCluster started,
// whose topologies are removed with them.
var throwaway sync.Map

// Kill sends SIGKILL to node's Erlang VM, as a crash or a lost machine
// would. The node stays down until the cluster is removed.
func (c *Cluster) Kill(node string) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "rabbitmqctl", "-q", "-n", node, "eval", "list_to_integer(os:getpid()).").CombinedOutput()
	if err != nil {
		c.t.Fatalf("pid of %s: %v: %s", node, err, out)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		c.t.Fatalf("pid of %s: %q", node, out)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		c.t.Fatalf("kill %s (pid %d): %v", node, pid, err)
	}
}

// repoRoot is the directory holding go.mod, above the test's package.
func repoRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}
