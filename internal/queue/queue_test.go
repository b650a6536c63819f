package queue_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/queue"
	"github.com/hookline/hookline/internal/queue/queuetest"
	"github.com/hookline/hookline/internal/testwait"
)

func setup(t *testing.T) (*queue.Conn, queue.Topology, *queue.Publisher) {
	t.Helper()
	topo := queuetest.NewTopology(t)
	conn := queue.NewConn(queuetest.URL(), slog.New(slog.DiscardHandler))
	pub := queue.NewPublisher(conn, topo, 2)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = conn.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	queuetest.WaitConnected(t, conn)
	return conn, topo, pub
}

// recorder is a handler that records message ids in arrival order.
type recorder struct {
	mu      sync.Mutex
	ids     []string
	arrived map[string]time.Time
	want    int
	done    chan struct{}
	result  queue.Disposition
}

func newRecorder(want int) *recorder {
	return &recorder{want: want, done: make(chan struct{}), arrived: map[string]time.Time{}}
}

func (r *recorder) handle(_ context.Context, d amqp.Delivery) queue.Disposition {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ids = append(r.ids, d.MessageId)
	if _, seen := r.arrived[d.MessageId]; !seen {
		r.arrived[d.MessageId] = time.Now()
	}
	if len(r.ids) == r.want {
		close(r.done)
	}
	return r.result
}

func (r *recorder) wait(t *testing.T, timeout time.Duration) {
	t.Helper()
	select {
	case <-r.done:
	case <-time.After(timeout):
		r.mu.Lock()
		defer r.mu.Unlock()
		t.Fatalf("received %d of %d messages within %s", len(r.ids), r.want, timeout)
	}
}

func runConsumer(t *testing.T, conn *queue.Conn, topo queue.Topology, pub *queue.Publisher, cfg queue.ConsumerConfig, h queue.Handler) {
	t.Helper()
	c := queue.NewConsumer(conn, topo, pub, cfg, h)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = c.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

func TestHighPriorityOvertakesNormalBacklog(t *testing.T) {
	t.Parallel()
	conn, topo, pub := setup(t)
	ctx := context.Background()
	msgs := make([]queue.Message, 1000)
	for i := range msgs {
		msgs[i] = queue.Message{ID: fmt.Sprintf("n%d", i), Priority: "normal", Body: []byte("{}")}
	}
	require.NoError(t, pub.Publish(ctx, msgs...))
	require.NoError(t, pub.Publish(ctx, queue.Message{ID: "urgent", Priority: "high", Body: []byte("{}")}))
	require.Equal(t, 1000, queuetest.Depth(t, topo.WorkQueue("normal")))
	require.Equal(t, 1, queuetest.Depth(t, topo.WorkQueue("high")))

	rec := newRecorder(30)
	runConsumer(t, conn, topo, pub, queue.ConsumerConfig{Prefetch: 10, Concurrency: 1, Grace: time.Second}, rec.handle)
	rec.wait(t, 20*time.Second)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	pos := -1
	for i, id := range rec.ids {
		if id == "urgent" {
			pos = i
		}
	}
	require.GreaterOrEqual(t, pos, 0, "the high-priority message was consumed")
	require.Less(t, pos, 5, "the high-priority message is among the first few, got position %d", pos)
}

// A delayed message is handed out no earlier than due and, with a consumer
// free, no later than due + max(2 s, 10 % of the delay).
func TestDelayedMessagesAreDueOnTime(t *testing.T) {
	t.Parallel()
	conn, topo, pub := setup(t)
	delays := []time.Duration{50 * time.Millisecond, 150 * time.Millisecond, 700 * time.Millisecond, 1500 * time.Millisecond, 3300 * time.Millisecond}
	rec := newRecorder(len(delays))
	runConsumer(t, conn, topo, pub, queue.ConsumerConfig{Prefetch: 10, Concurrency: 4, Grace: time.Second}, rec.handle)

	due := map[string]time.Time{}
	for i, d := range delays {
		id := fmt.Sprintf("d%d", i)
		due[id] = time.Now().Add(d)
		require.NoError(t, pub.Publish(context.Background(), queue.Message{ID: id, Priority: []string{"high", "normal", "low"}[i%3], Body: []byte("{}"), NotBefore: due[id]}))
	}
	rec.wait(t, 20*time.Second)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for i, d := range delays {
		id := fmt.Sprintf("d%d", i)
		late := rec.arrived[id].Sub(due[id])
		require.GreaterOrEqual(t, late, time.Duration(0), "%s (delay %s) arrived %s early", id, d, -late)
		require.LessOrEqual(t, late, max(2*time.Second, d/10), "%s (delay %s) arrived %s late", id, d, late)
	}
}

// A message that keeps coming back (its handler requeues it every time) is
// dead-lettered after the delivery limit instead of circulating forever.
func TestPoisonMessageIsDeadLettered(t *testing.T) {
	t.Parallel()
	conn, topo, pub := setup(t)
	require.NoError(t, pub.Publish(context.Background(), queue.Message{ID: "poison", Priority: "normal", Body: []byte("{}")}))
	rec := newRecorder(1_000_000)
	rec.result = queue.Requeue
	runConsumer(t, conn, topo, pub, queue.ConsumerConfig{Prefetch: 1, Concurrency: 1, Grace: time.Second}, rec.handle)

	testwait.Eventually(t, 20*time.Second, func() bool { return queuetest.Depth(t, topo.DeadQueue()) == 1 },
		"the poison message dead-lettered")
	rec.mu.Lock()
	defer rec.mu.Unlock()
	require.LessOrEqual(t, len(rec.ids), 22, "handed out about delivery-limit (20) times, not forever")
	require.Equal(t, 0, queuetest.Depth(t, topo.WorkQueue("normal")))
}

func TestPublishWithoutBrokerFails(t *testing.T) {
	t.Parallel()
	conn := queue.NewConn("amqp://guest:guest@127.0.0.1:1/", slog.New(slog.DiscardHandler))
	pub := queue.NewPublisher(conn, queue.Topology{Prefix: "unused"}, 1)
	err := pub.Publish(context.Background(), queue.Message{ID: "x", Priority: "normal"})
	require.ErrorIs(t, err, queue.ErrNotConnected)
}

// After Run's context ends the consumer takes no further message, even with
// a backlog waiting, and Run returns once the handlers in flight finish.
func TestConsumerStopsTakingWorkOnShutdown(t *testing.T) {
	t.Parallel()
	conn, topo, pub := setup(t)
	msgs := make([]queue.Message, 200)
	for i := range msgs {
		msgs[i] = queue.Message{ID: fmt.Sprintf("m%d", i), Priority: "normal", Body: []byte("{}")}
	}
	require.NoError(t, pub.Publish(context.Background(), msgs...))

	ctx, cancel := context.WithCancel(context.Background())
	var handled atomic.Int64
	first := make(chan struct{})
	var once sync.Once
	c := queue.NewConsumer(conn, topo, pub, queue.ConsumerConfig{Prefetch: 50, Concurrency: 2, Grace: 10 * time.Second},
		func(context.Context, amqp.Delivery) queue.Disposition {
			handled.Add(1)
			once.Do(func() { close(first) })
			<-time.After(20 * time.Millisecond) // each message takes a while to handle
			return queue.Ack
		})
	done := make(chan struct{})
	go func() { _ = c.Run(ctx); close(done) }()
	<-first
	cancel()
	// Working through the backlog would take 2 s (200 messages, two at a
	// time, 20 ms each): the count of those handled tells, not how soon
	// Run returns on a busy machine.
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the consumer did not stop")
	}
	require.LessOrEqual(t, handled.Load(), int64(10), "only the messages in flight were finished, the backlog was left")
	testwait.Eventually(t, 10*time.Second, func() bool {
		return queuetest.Depth(t, topo.WorkQueue("normal"))+int(handled.Load()) >= 200
	}, "unhandled messages are back on the queue")
}

// The consumer is ready only while it is subscribed: a queue deleted under
// it ends its subscription, and readiness fails until it has subscribed
// again.
func TestConsumerReadinessFollowsItsSubscription(t *testing.T) {
	t.Parallel()
	conn, topo, pub := setup(t)
	c := queue.NewConsumer(conn, topo, pub, queue.ConsumerConfig{}, newRecorder(1).handle)
	require.Error(t, c.Check(context.Background()), "not ready before it runs")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = c.Run(ctx); close(done) }()
	testwait.Eventually(t, 10*time.Second, func() bool { return c.Check(ctx) == nil }, "the consumer ready")

	queuetest.WithChannel(t, func(ch *amqp.Channel) error {
		_, err := ch.QueueDelete(topo.WorkQueue("normal"), false, false, false)
		return err
	})
	testwait.Eventually(t, 10*time.Second, func() bool { return c.Check(ctx) != nil }, "readiness failing once its queue was deleted")
	queuetest.WithChannel(t, topo.Declare)
	testwait.Eventually(t, 10*time.Second, func() bool { return c.Check(ctx) == nil }, "ready again once its queue is back")

	cancel()
	<-done
	require.Error(t, c.Check(context.Background()), "not ready after Run returned")
}
