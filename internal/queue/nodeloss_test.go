package queue_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/queue"
	"github.com/hookline/hookline/internal/queue/queuetest"
	"github.com/hookline/hookline/internal/testwait"
)

// A publisher connected to the node that leads a work queue loses that
// node: it reconnects to another at once, and once the queue's new leader
// is elected its publishes are confirmed again, every one. On RabbitMQ
// 3.10 a channel opened during the election refused every message routed
// to that queue for as long as it lived, though the queue took them; the
// publisher replaces a channel the broker refused a message on.
func TestPublishesAreConfirmedAfterTheLeadersNodeDies(t *testing.T) {
	t.Parallel()
	mq := queuetest.StartCluster(t, "hookline-loss", 5740)
	urls := queue.SplitURLs(mq.URL)
	// Declared through the third node: it leads shard 0's queues.
	topo := queuetest.NewTopologyAt(t, urls[2], 3)
	var conn *queue.Conn
	var pub *queue.Publisher
	for conn == nil || conn.Node() != "127.0.0.1:5743" { // each Conn starts at a random node
		c := queue.NewConn(urls[2]+","+urls[0], slog.New(slog.DiscardHandler))
		p := queue.NewPublisher(c, topo, 2)
		runConn(t, c)
		conn, pub = c, p
	}
	key := ""
	for i := 0; key == ""; i++ {
		if topo.ShardOf(fmt.Sprint(i)) == 0 {
			key = fmt.Sprint(i)
		}
	}
	publish := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return pub.Publish(ctx, queue.Message{ID: "m", Priority: "normal", ShardKey: key, Body: []byte("{}")})
	}
	require.NoError(t, publish())
	mq.Kill(mq.Nodes[2])

	// Until the new leader is elected, publishes may fail; then 50 in a
	// row must be confirmed.
	streak, refusals := 0, 0
	var lastErr error
	testwait.Eventually(t, time.Minute, func() bool {
		for ; streak < 50; streak++ {
			if lastErr = publish(); lastErr != nil {
				streak = 0
				refusals++
				return false
			}
		}
		return true
	}, "still refused (%d refusals): %v", &refusals, &lastErr)
	require.NotEqual(t, "127.0.0.1:5743", conn.Node())
	// Every confirmed publish is in the queue (a refused one may be too).
	require.GreaterOrEqual(t, queuetest.DepthAt(t, urls[0], topo.WorkQueue("normal")), 51)
}
