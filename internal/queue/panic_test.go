package queue_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/queue"
	"github.com/hookline/hookline/internal/queue/queuetest"
	"github.com/hookline/hookline/internal/testwait"
)

// handled records, per message id, how the consumer handed it over.
type handled struct {
	mu          sync.Mutex
	times       map[string]int
	redelivered map[string]bool
}

func (h *handled) add(d amqp.Delivery) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.times[d.MessageId]++
	if d.Redelivered || d.Headers["x-delivery-count"] != nil {
		h.redelivered[d.MessageId] = true
	}
}

func (h *handled) snapshot() (map[string]int, map[string]bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	times, re := map[string]int{}, map[string]bool{}
	for k, v := range h.times {
		times[k] = v
	}
	for k, v := range h.redelivered {
		re[k] = v
	}
	return times, re
}

// A handler that panics on one message neither stops the consumer nor
// touches the other messages it had prefetched: each of them is handled
// once, never redelivered (a crashed process would return them all with
// their delivery count raised, and enough crashes dead-letter them). The
// panicking message alone is tried again, and after MaxPanics panics it
// goes to the dead-letter queue saying so.
func TestPanickingMessageIsIsolated(t *testing.T) {
	t.Parallel()
	conn, topo, pub := setup(t)
	ctx := context.Background()
	msgs := []queue.Message{{ID: "bomb", Priority: "normal", Body: []byte("{}")}}
	for i := range 30 {
		msgs = append(msgs, queue.Message{ID: fmt.Sprintf("m%d", i), Priority: "normal", Body: []byte("{}")})
	}
	require.NoError(t, pub.Publish(ctx, msgs...))

	h := &handled{times: map[string]int{}, redelivered: map[string]bool{}}
	runConsumer(t, conn, topo, pub, queue.ConsumerConfig{Prefetch: 32, Concurrency: 4, Grace: time.Second, MaxPanics: 3},
		func(_ context.Context, d amqp.Delivery) queue.Disposition {
			h.add(d)
			if d.MessageId == "bomb" {
				var m map[string]int
				m["crash"]++ //nolint:staticcheck // the panic under test: assignment to a nil map
			}
			return queue.Ack
		})

	testwait.Eventually(t, 20*time.Second, func() bool {
		return queuetest.Depth(t, topo.DeadQueue()) == 1
	}, "the panicking message reached the dead-letter queue")
	require.NoError(t, pub.Publish(ctx, queue.Message{ID: "after", Priority: "normal", Body: []byte("{}")}))
	testwait.Eventually(t, 10*time.Second, func() bool {
		times, _ := h.snapshot()
		return times["after"] == 1
	}, "the consumer still takes work after the panics")

	times, redelivered := h.snapshot()
	require.Equal(t, 3, times["bomb"], "the panicking message is tried MaxPanics times")
	for i := range 30 {
		id := fmt.Sprintf("m%d", i)
		require.Equal(t, 1, times[id], "%s handled once", id)
		require.False(t, redelivered[id], "%s was never redelivered", id)
	}
	require.Zero(t, queuetest.Depth(t, topo.WorkQueue("normal")))

	dead := getOne(t, topo.DeadQueue())
	require.Equal(t, "bomb", dead.MessageId)
	require.Equal(t, int64(3), dead.Headers[queue.HeaderPanics])
	require.Contains(t, dead.Headers[queue.HeaderPanic], "assignment to entry in nil map")
}

// getOne takes one message off queue name.
func getOne(t *testing.T, name string) amqp.Delivery {
	t.Helper()
	c, err := amqp.Dial(queuetest.URL())
	require.NoError(t, err)
	defer c.Close()
	ch, err := c.Channel()
	require.NoError(t, err)
	defer ch.Close()
	d, ok, err := ch.Get(name, true)
	require.NoError(t, err)
	require.True(t, ok, "a message on %s", name)
	return d
}

// A Foreign consumer (the publish queue, which producers outside hookline
// write to) hands over a message carrying a due time in the future at
// once, not obeying a header hookline did not set, and sends a message
// that panics its handler MaxPanics times to its PoisonQueue, not to the
// dead-letter queue of deliveries, without the headers it strips.
func TestForeignConsumerIgnoresDueTimesAndPoisonsToItsQueue(t *testing.T) {
	t.Parallel()
	conn, topo, pub := setup(t)
	future := time.Now().Add(time.Hour).UnixMilli()
	for _, id := range []string{"due-later", "bomb"} {
		queuetest.Publish(t, topo.PublishExchange(), "", amqp.Publishing{MessageId: id, Body: []byte("{}"),
			Headers: amqp.Table{queue.HeaderNotBefore: future, "Authorization": "Bearer secret", "Other": "kept"}})
	}
	h := &handled{times: map[string]int{}, redelivered: map[string]bool{}}
	runConsumer(t, conn, topo, pub, queue.ConsumerConfig{Queues: []string{topo.PublishQueue()}, Prefetch: 8, Concurrency: 2,
		Grace: time.Second, MaxPanics: 2, Foreign: true, PoisonQueue: topo.PublishRejectedQueue(),
		PoisonStrip: []string{"Authorization"}},
		func(_ context.Context, d amqp.Delivery) queue.Disposition {
			h.add(d)
			if d.MessageId == "bomb" {
				panic("bomb")
			}
			return queue.Ack
		})
	testwait.Eventually(t, 20*time.Second, func() bool {
		return queuetest.Depth(t, topo.PublishRejectedQueue()) == 1
	}, "the panicking message reached the poison queue")
	times, _ := h.snapshot()
	require.Equal(t, 1, times["due-later"], "handed over at once, its due time ignored")
	require.Equal(t, 2, times["bomb"])
	require.Zero(t, queuetest.Depth(t, topo.DeadQueue()), "nothing in the deliveries' dead-letter queue")
	for _, tier := range queue.Tiers() {
		require.Zero(t, queuetest.Depth(t, topo.DelayQueue(tier)), "nothing sent to the %s delay tier", tier)
	}
	poisoned := getOne(t, topo.PublishRejectedQueue())
	require.Equal(t, "bomb", poisoned.MessageId)
	require.Equal(t, int64(2), poisoned.Headers[queue.HeaderPanics])
	require.NotContains(t, poisoned.Headers, "Authorization", "stripped")
	require.Equal(t, "kept", poisoned.Headers["Other"])
}
