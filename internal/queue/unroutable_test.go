package queue_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/queue"
	"github.com/hookline/hookline/internal/queue/queuetest"
)

// A message no queue is bound for is confirmed by the broker all the same,
// and dropped: the publish must fail, so that the caller's fallback (the
// outbox relay) applies, instead of the delivery waiting for ever on a
// message that does not exist. The routable messages of the same call are
// enqueued, and concurrent publishes on the same channels each learn their
// own fate.
func TestUnroutablePublishFails(t *testing.T) {
	t.Parallel()
	_, topo, pub := setup(t)
	ctx := context.Background()

	err := pub.Publish(ctx, queue.Message{ID: "nowhere", Priority: "urgent", Body: []byte("{}")})
	require.ErrorIs(t, err, queue.ErrUnroutable)
	require.ErrorContains(t, err, `routing key "urgent"`)

	err = pub.Publish(ctx,
		queue.Message{ID: "a", Priority: "normal", Body: []byte("{}")},
		queue.Message{ID: "b", Priority: "", Body: []byte("{}")},
		queue.Message{ID: "c", Priority: "normal", Body: []byte("{}")})
	require.ErrorIs(t, err, queue.ErrUnroutable, "one message of three had no route")
	require.Equal(t, 2, queuetest.Depth(t, topo.WorkQueue("normal")))

	var wg sync.WaitGroup
	results := make([]error, 200)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			priority := "low"
			if i%2 == 1 {
				priority = "none"
			}
			results[i] = pub.Publish(ctx, queue.Message{ID: fmt.Sprintf("m%d", i), Priority: priority, Body: []byte("{}")})
		}()
	}
	wg.Wait()
	for i, err := range results {
		if i%2 == 1 {
			require.ErrorIs(t, err, queue.ErrUnroutable, "message %d had no route", i)
		} else {
			require.NoError(t, err, "message %d had a route", i)
		}
	}
	require.Equal(t, 100, queuetest.Depth(t, topo.WorkQueue("low")))

	// A dead letter whose queue is gone (unbound) is not lost silently
	// either.
	queuetest.WithChannel(t, func(ch *amqp.Channel) error { return ch.QueueUnbind(topo.DeadQueue(), "", topo.DeadExchange(), nil) })
	err = pub.PublishDead(ctx, queue.Message{ID: "dead", Body: []byte("{}")})
	require.ErrorIs(t, err, queue.ErrUnroutable)
}
