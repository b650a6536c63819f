package e2e

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus/testutil"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/dlq"
	"github.com/hookline/hookline/internal/metrics"
	"github.com/hookline/hookline/internal/queue/queuetest"
	"github.com/hookline/hookline/internal/testwait"
	"github.com/hookline/hookline/internal/wire"
)

// A message no worker can read goes to the dead-letter queue at once, and
// the dlq process takes it off (logged), instead of circulating.
func TestMalformedMessageIsDeadLettered(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	before := testutil.ToFloat64(metrics.DeadLettered.WithLabelValues("malformed"))
	queuetest.Publish(t, s.Topology.WorkExchange(), "normal", amqp.Publishing{DeliveryMode: amqp.Persistent, Body: []byte("not a task")})
	testwait.Eventually(t, 15*time.Second, func() bool {
		return testutil.ToFloat64(metrics.DeadLettered.WithLabelValues("malformed")) > before
	}, "the dlq took the malformed message")
	require.Zero(t, queuetest.Depth(t, s.Topology.WorkQueue("normal")))
}

// A poison message (dead-lettered by its work queue after too many
// deliveries, with no worker verdict) makes its delivery exhausted with a
// reason saying so.
func TestPoisonMessageExhaustsItsDelivery(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	task, rc, release := s.heldAttempt()
	id := task.DeliveryID
	m := task.Message(time.Time{})
	queuetest.Publish(t, s.Topology.DeadExchange(), "", amqp.Publishing{DeliveryMode: amqp.Persistent, Body: m.Body, MessageId: m.ID,
		Headers: amqp.Table{"x-delivery-count": int64(20)}})
	s.waitStatus(id, "exhausted", 15*time.Second)
	var lastErr string
	require.NoError(t, s.Pool.QueryRow(context.Background(), `SELECT last_error FROM deliveries WHERE id = $1`, id).Scan(&lastErr))
	require.Contains(t, lastErr, "poison message")
	require.Contains(t, lastErr, "20 times")

	// The attempt that was in flight finishes after the delivery became
	// exhausted: it is not recorded, the delivery stays exhausted.
	release()
	testwait.Eventually(t, 15*time.Second, func() bool { return len(rc.requests()) == 1 }, "one request")
	testwait.Never(t, time.Second, func() bool {
		return s.Count(`SELECT count(*) FROM deliveries WHERE id = $1 AND status <> 'exhausted'`, id) > 0
	}, "the late attempt changed the exhausted delivery")
	require.Zero(t, s.Count(`SELECT count(*) FROM delivery_attempts WHERE delivery_id = $1`, id))
}

func TestQueueDepthAndDLQGauges(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	rc := newReceiver(t, func(_ int, w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusGone) })
	s.webhook(rc.URL, nil)
	id := s.deliveryOf(s.publish("order.created", map[string]any{}))
	s.waitStatus(id, "exhausted", 15*time.Second)
	var tenantID uuid.UUID
	require.NoError(t, s.Pool.QueryRow(context.Background(), `SELECT tenant_id FROM deliveries WHERE id = $1`, id).Scan(&tenantID))

	conn := queuetest.Conn(t, "")
	queuetest.WaitConnected(t, conn)
	g := dlq.NewGauges(s.Pool, conn, s.Topology, slog.New(slog.DiscardHandler))
	require.NoError(t, g.Refresh(context.Background()))
	require.Equal(t, 1.0, testutil.ToFloat64(metrics.DLQDeliveries.WithLabelValues(tenantID.String())))
	for _, q := range []string{"high", "normal", "low", "dead"} {
		require.Equal(t, 0.0, testutil.ToFloat64(metrics.QueueDepth.WithLabelValues(q)), q)
	}
}

// heldAttempt publishes an event to a new webhook whose endpoint holds the
// first attempt until release is called (at the latest when the test
// ends), and returns the delivery's task once that attempt has begun: the
// delivery stays pending meanwhile.
func (s *system) heldAttempt() (task wire.Task, rc *receiver, release func()) {
	s.t.Helper()
	held := make(chan struct{})
	arrived := make(chan struct{}, 1)
	rc = newReceiver(s.t, func(_ int, _ http.ResponseWriter, _ *http.Request) {
		arrived <- struct{}{}
		<-held
	})
	release = sync.OnceFunc(func() { close(held) })
	s.t.Cleanup(release)
	hookID, _ := s.webhook(rc.URL, nil)
	eventID := s.publish("order.created", map[string]any{})
	select {
	case <-arrived:
	case <-time.After(15 * time.Second):
		s.t.Fatal("the attempt never started")
	}
	task = wire.Task{DeliveryID: s.deliveryOf(eventID), EventID: uuid.MustParse(eventID), WebhookID: uuid.MustParse(hookID),
		TenantID: s.tenantID, Priority: "normal", Attempt: 1, CreatedAt: time.Now()}
	return task, rc, release
}
