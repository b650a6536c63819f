package e2e

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus/testutil"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/dlq"
	"github.com/hookline/hookline/internal/metrics"
	"github.com/hookline/hookline/internal/queue"
	"github.com/hookline/hookline/internal/queue/queuetest"
	"github.com/hookline/hookline/internal/systemtest"
	"github.com/hookline/hookline/internal/testlog"
	"github.com/hookline/hookline/internal/testwait"
)

// A delivery whose work queue is not bound (deleted and redeclared by
// hand, or a topology change) used to be confirmed by the broker, dropped,
// marked enqueued, and left pending for ever. Publishes are mandatory now:
// the broker returns it, the publish fails, the delivery stays unmarked
// and the outbox relay keeps trying, so it is delivered once the queue is
// bound again.
func TestUnroutableDeliveryIsPublishedAgain(t *testing.T) {
	t.Parallel()
	logs := &testlog.Buffer{}
	s := newSystem(t, func(o *systemtest.Options) { o.Log = slog.New(slog.NewTextHandler(logs, nil)) })
	rc := newReceiver(t, func(int, http.ResponseWriter, *http.Request) {})
	s.webhook(rc.URL, nil)
	unbind := func(ch *amqp.Channel) error {
		return ch.QueueUnbind(s.Topology.WorkQueue("normal"), "normal", s.Topology.WorkExchange(), nil)
	}
	queuetest.WithChannel(t, unbind)

	id := s.deliveryOf(s.publish("order.created", map[string]any{}))
	enqueued := func() bool {
		return s.Count(`SELECT count(*) FROM deliveries WHERE id = $1 AND enqueued_at IS NOT NULL`, id) == 1
	}
	testwait.Eventually(t, 20*time.Second, func() bool {
		return enqueued() || strings.Contains(logs.String(), "outbox relay pass failed")
	}, "the delivery to be marked enqueued, or the relay to fail to publish it")
	require.False(t, enqueued(), "a message the broker dropped is not marked enqueued")
	require.Contains(t, logs.String(), queue.ErrUnroutable.Error())
	require.Empty(t, rc.requests())

	queuetest.WithChannel(t, func(ch *amqp.Channel) error {
		return ch.QueueBind(s.Topology.WorkQueue("normal"), "normal", s.Topology.WorkExchange(), false, nil)
	})
	s.waitStatus(id, "succeeded", 20*time.Second)
	require.Len(t, s.attempts(id), 1)
	require.Len(t, rc.requests(), 1)
}

// A delivery marked enqueued whose message never reached a worker (lost
// before publishes were mandatory, purged, or on a deleted queue) is found
// by the dlq sweep an hour after it was due, handed back to the outbox
// relay, and delivered. Parked deliveries, and those enqueued recently,
// are left alone.
func TestLostDeliveryIsSweptBackToTheRelay(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	rc := newReceiver(t, func(int, http.ResponseWriter, *http.Request) {})
	s.webhook(rc.URL, nil)
	first := s.deliveryOf(s.publish("order.created", map[string]any{}))
	s.waitStatus(first, "succeeded", 15*time.Second)

	ctx := context.Background()
	// copyOf stores a copy of the first delivery, created two hours ago
	// (its id taken then, n ms past the hour), pending and enqueued.
	copyOf := func(n int, enqueuedAgo, parkedAgo string) uuid.UUID {
		var id uuid.UUID
		require.NoError(t, s.Pool.QueryRow(ctx, `INSERT INTO deliveries (id, tenant_id, event_id, webhook_id, status, priority,
			enqueued_at, created_at, updated_at, parked_at, park_reason)
			SELECT uuidv7_floor(now() - interval '2 hours' + $1 * interval '1 ms'), tenant_id, event_id, webhook_id,
			       'pending', 'normal', now() - $2::interval, now() - interval '2 hours', now() - $2::interval,
			       now() - $3::interval, CASE WHEN $3::interval IS NOT NULL THEN 'order' END
			FROM deliveries WHERE id = $4
			RETURNING id`, n, enqueuedAgo, nilIfEmpty(parkedAgo), first).Scan(&id))
		return id
	}
	lost := copyOf(1, "2 hours", "")
	parked := copyOf(2, "2 hours", "2 hours")
	recent := copyOf(3, "10 minutes", "")

	before := testutil.ToFloat64(metrics.LostDeliveriesResent)
	sweeper := dlq.NewSweeper(s.DLQPool, &taskSink{}, slog.New(slog.DiscardHandler))
	require.NoError(t, sweeper.Sweep(ctx))
	s.waitStatus(lost, "succeeded", 20*time.Second)
	require.Len(t, s.attempts(lost), 1)
	require.GreaterOrEqual(t, testutil.ToFloat64(metrics.LostDeliveriesResent), before+1)
	for _, id := range []uuid.UUID{parked, recent} {
		require.Equal(t, 1, s.Count(`SELECT count(*) FROM deliveries WHERE id = $1 AND status = 'pending' AND enqueued_at IS NOT NULL`, id),
			"delivery %s left alone", id)
	}
}

func nilIfEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// A message that crashed its worker's handler too often reaches the
// dead-letter queue saying so, and its delivery is exhausted with that
// reason.
func TestPanickingMessageExhaustsItsDelivery(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	task, _, release := s.heldAttempt()
	id := task.DeliveryID
	m := task.Message(time.Time{})
	queuetest.Publish(t, s.Topology.DeadExchange(), "", amqp.Publishing{DeliveryMode: amqp.Persistent, Body: m.Body, MessageId: m.ID,
		Headers: amqp.Table{queue.HeaderPanics: int64(3), queue.HeaderPanic: "runtime error: invalid memory address or nil pointer dereference"}})
	s.waitStatus(id, "exhausted", 15*time.Second)
	release()
	var reason string
	require.NoError(t, s.Pool.QueryRow(context.Background(), `SELECT last_error FROM deliveries WHERE id = $1`, id).Scan(&reason))
	require.Equal(t, "poison message: its handler panicked 3 times (last: runtime error: invalid memory address or nil pointer dereference)", reason)
}
