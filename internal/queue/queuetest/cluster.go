package queuetest

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
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
