package e2e

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/queue/queuetest"
	"github.com/hookline/hookline/internal/redistest"
	"github.com/hookline/hookline/internal/systemtest"
	"github.com/hookline/hookline/internal/testwait"
)

// A fleet on clusters loses a RabbitMQ node while events are published:
// the api, the worker and the dlq run on a three-node cluster of the
// test's own (amqp.url the list of the three nodes, three work queue
// shards per priority) and on the local Redis Cluster. The first node is
// killed with SIGKILL a third of the way through: the topology was
// declared through it, so it leads most of the system's queues, and some
// parts are connected to it. Every delivery of every accepted event
// still succeeds and reaches the endpoint, and delivery goes on after the
// kill.
func TestDeliveryGoesOnWhenARabbitMQNodeDies(t *testing.T) {
	t.Parallel()
	mq := queuetest.StartCluster(t, "hookline-e2e", 5730)
	s := newSystem(t, func(o *systemtest.Options) {
		o.AMQPURL, o.Shards, o.RedisMode = mq.URL, 3, redistest.Cluster
	})
	rc := newReceiver(t, func(int, http.ResponseWriter, *http.Request) {})
	// Several webhooks, so that every shard carries work.
	for range 6 {
		s.webhook(rc.URL, map[string]any{"rate_limit": map[string]any{"requests_per_minute": 100000, "burst": 1000}})
	}
	const events = 60
	var killedAt time.Time
	pace := time.NewTicker(50 * time.Millisecond) // spreads the publishes over 3 s, the kill among them
	defer pace.Stop()
	for i := range events {
		if i > 0 {
			<-pace.C
		}
		if i == events/3 {
			mq.Kill(mq.Nodes[0])
			killedAt = time.Now()
		}
		s.publish("order.created", map[string]any{"n": i})
	}
	ctx := context.Background()
	testwait.Eventually(t, 2*time.Minute, func() bool {
		return s.Count(`SELECT count(*) FROM deliveries WHERE status = 'succeeded'`) == events*6
	}, "every delivery to succeed")
	rows, err := s.Pool.Query(ctx, `SELECT id::text FROM deliveries`)
	require.NoError(t, err)
	want := map[string]bool{}
	for rows.Next() {
		var id string
		require.NoError(t, rows.Scan(&id))
		want[id] = true
	}
	require.NoError(t, rows.Err())
	require.Len(t, want, events*6)
	got := map[string]bool{}
	after := 0
	for _, r := range rc.requests() {
		got[r.Header.Get("X-Webhook-Delivery")] = true
		if r.At.After(killedAt) {
			after++
		}
	}
	for id := range want {
		require.True(t, got[id], "delivery %s succeeded but never reached the endpoint", id)
	}
	require.Positive(t, after, "nothing reached the endpoint after the kill")
}
