package queue_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/queue"
	"github.com/hookline/hookline/internal/queue/queuetest"
	"github.com/hookline/hookline/internal/testwait"
)

// ordered records, per shard key, the sequence numbers in the order they
// were handled.
type ordered struct {
	mu   sync.Mutex
	seen map[string][]int
	n    int
}

func (o *ordered) handle(_ context.Context, d amqp.Delivery) queue.Disposition {
	var key string
	var seq int
	if _, err := fmt.Sscanf(d.MessageId, "%s %d", &key, &seq); err != nil {
		return queue.DeadLetter
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.seen[key] = append(o.seen[key], seq)
	o.n++
	return queue.Ack
}

func (o *ordered) count() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.n
}

// Over the cluster, with four shards: each webhook's messages go to its
// shard, delayed ones come back to it, the shards' leaders are spread over
// the nodes, and one handler receives every webhook's messages in order.
func TestClusterShardsKeepEachWebhooksOrder(t *testing.T) {
	t.Parallel()
	urls := queuetest.ClusterURL(t)
	topo := queuetest.NewTopologyAt(t, urls, 4)
	conn := queue.NewConn(urls, slog.New(slog.DiscardHandler))
	pub := queue.NewPublisher(conn, topo, 2)
	runConn(t, conn)
	ctx := context.Background()

	const webhooks, each, delayed = 24, 25, 40
	perShard := make([]int, 4)
	for seq := range each {
		msgs := make([]queue.Message, webhooks)
		for w := range webhooks {
			key := fmt.Sprintf("wh-%02d", w)
			msgs[w] = queue.Message{ID: fmt.Sprintf("%s %d", key, seq), Priority: "normal", ShardKey: key, Body: []byte("{}")}
			perShard[topo.ShardOf(key)]++
		}
		require.NoError(t, pub.Publish(ctx, msgs...))
	}
	due := time.Now().Add(300 * time.Millisecond)
	for i := range delayed {
		key := fmt.Sprintf("late-%02d", i)
		require.NoError(t, pub.Publish(ctx, queue.Message{ID: key + " 0", Priority: "normal", ShardKey: key, Body: []byte("{}"), NotBefore: due}))
		perShard[topo.ShardOf(key)]++
	}
	for shard, n := range perShard {
		require.NotZero(t, n, "shard %d has no webhook: the keys do not spread", shard)
	}
	queues := topo.WorkQueues("normal")
	testwait.Eventually(t, 30*time.Second, func() bool {
		for shard, q := range queues {
			if queuetest.DepthAt(t, urls, q) != perShard[shard] {
				return false
			}
		}
		return true
	}, "every message, the delayed ones back from their tier, on its webhook's shard")
	if nodes := leaders(t, topo); nodes != nil {
		require.GreaterOrEqual(t, len(nodes), 2, "the shards' leaders on more than one node: %v", nodes)
	}

	rec := &ordered{seen: map[string][]int{}}
	runConsumer(t, conn, topo, pub, queue.ConsumerConfig{Prefetch: 50, Concurrency: 1}, rec.handle)
	testwait.Eventually(t, 30*time.Second, func() bool { return rec.count() >= webhooks*each+delayed }, "every message handled")
	rec.mu.Lock()
	defer rec.mu.Unlock()
	require.Equal(t, webhooks*each+delayed, rec.n, "each message once")
	for w := range webhooks {
		got := rec.seen[fmt.Sprintf("wh-%02d", w)]
		require.Len(t, got, each)
		for i, seq := range got {
			require.Equal(t, i, seq, "webhook %d out of order: %v", w, got)
		}
	}
}

// leaders returns the nodes leading topo's shard queues above 0, read
// with rabbitmqctl from the local cluster, or nil when the cluster is
// another one (TEST_AMQP_CLUSTER_URL).
func leaders(t *testing.T, topo queue.Topology) map[string]int {
	t.Helper()
	if os.Getenv("TEST_AMQP_CLUSTER_URL") != "" {
		return nil
	}
	out, err := exec.Command("rabbitmqctl", "-q", "-n", "hookline-a@localhost", "list_queues", "name", "leader", "--no-table-headers").CombinedOutput()
	require.NoError(t, err, "%s", out)
	nodes := map[string]int{}
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		if len(f) == 2 && strings.HasPrefix(f[0], topo.Prefix+".work.") && queue.RouteOf(strings.TrimPrefix(f[0], topo.Prefix+".work.")).Shard > 0 {
			nodes[f[1]]++
		}
	}
	require.NotEmpty(t, nodes, "rabbitmqctl listed none of the shard queues:\n%s", out)
	return nodes
}

// runConn runs conn until t ends and waits until it is connected. Register
// conn's publishers first.
func runConn(t *testing.T, conn *queue.Conn) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = conn.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	queuetest.WaitConnected(t, conn)
}

// A smaller shard count leaves shard queues behind: the consumer drains
// them, and the messages that were waiting in a delay tier for them.
func TestLeftoverShardsAreDrained(t *testing.T) {
	t.Parallel()
	wide := queuetest.NewTopologyAt(t, queuetest.URL(), 3)
	conn := queue.NewConn(queuetest.URL(), slog.New(slog.DiscardHandler))
	widePub := queue.NewPublisher(conn, wide, 1)
	narrow := wide
	narrow.Shards = 1
	narrowPub := queue.NewPublisher(conn, narrow, 1)
	runConn(t, conn)
	ctx := context.Background()
	var keys []string
	for i := 0; len(keys) < 20; i++ {
		if key := fmt.Sprintf("k%d", i); wide.ShardOf(key) == 2 {
			keys = append(keys, key)
		}
	}
	for i, key := range keys {
		m := queue.Message{ID: key + " 0", Priority: []string{"high", "low"}[i%2], ShardKey: key, Body: []byte("{}")}
		if i%4 == 0 {
			m.NotBefore = time.Now().Add(time.Second)
		}
		require.NoError(t, widePub.Publish(ctx, m))
	}

	rec := &ordered{seen: map[string][]int{}}
	runConsumer(t, conn, narrow, narrowPub, queue.ConsumerConfig{}, rec.handle)
	testwait.Eventually(t, 20*time.Second, func() bool { return rec.count() >= len(keys) }, "the messages of shard 2 handled by a one-shard consumer")
	require.Equal(t, len(keys), rec.count())
}

// With a node that does not answer first in the list, the connection goes
// on to the next at once.
func TestConnSkipsANodeThatDoesNotAnswer(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dead := l.Addr().String()
	require.NoError(t, l.Close())
	for range 4 { // the first node is chosen at random
		conn := queue.NewConn("amqp://guest:guest@"+dead+"/,"+queuetest.URL(), slog.New(slog.DiscardHandler))
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { _ = conn.Run(ctx); close(done) }()
		testwait.Eventually(t, time.Second, func() bool { return conn.Node() != "" }, "connected within a second, without backing off")
		require.Equal(t, "127.0.0.1:5672", conn.Node())
		cancel()
		<-done
	}
}
