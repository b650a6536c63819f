package queue

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/hookline/hookline/internal/metrics"
)

// Disposition is what a handler decides about a message.
type Disposition int

const (
	// Ack: the message is done with (delivered, or its outcome recorded).
	Ack Disposition = iota
	// Requeue: our own failure (database down, shutdown); the message goes
	// back to its queue without being counted against the endpoint.
	Requeue
	// DeadLetter: the message cannot be handled (malformed); it goes to the
	// dead-letter queue.
	DeadLetter
)

// Handler handles one message. ctx ends when the consumer's grace period
// after shutdown runs out.
type Handler func(ctx context.Context, d amqp.Delivery) Disposition

// ConsumerConfig tunes a Consumer.
type ConsumerConfig struct {
	// Queues are consumed in order of preference: a message waiting on an
	// earlier queue is taken before one on a later queue. Default: the
	// three work queues, high first.
	Queues []string
	// Prefetch bounds unacknowledged messages per priority queue.
	Prefetch int
	// Concurrency is the number of handler goroutines.
	Concurrency int
	// Grace is how long in-flight handlers may run after Run's ctx ends.
	Grace time.Duration
	// MaxPanics is how often a message may crash its handler (a panic)
	// before it is dead-lettered. Default 3.
	MaxPanics int
	// Foreign marks queues that producers outside hookline publish to:
	// their messages' headers are not hookline's, so a due time in them
	// (HeaderNotBefore) is not obeyed, and a message that crashed its
	// handler MaxPanics times goes to PoisonQueue, not to the dead-letter
	// queue of deliveries.
	Foreign bool
	// PoisonQueue receives the messages of a Foreign consumer that crashed
	// their handler MaxPanics times, without the headers named in
	// PoisonStrip (a producer's credential).
	PoisonQueue string
	PoisonStrip []string
}

// Consumer consumes its queues (by default the three work queues, preferring
// high over normal over low) and hands messages to a bounded pool of
// handlers. Messages that come
// back from a delay tier early are sent on to the next tier (or held for the
// last few milliseconds) before any handler sees them.
type Consumer struct {
	conn    *Conn
	topo    Topology
	pub     *Publisher
	cfg     ConsumerConfig
	handler Handler
	// consuming is set while a session is subscribed to every queue.
	consuming atomic.Bool
}

// Check is a readiness check: it fails unless the consumer is subscribed to
// all of its queues (before its first session, between sessions, and after
// Run has returned).
func (c *Consumer) Check(context.Context) error {
	if !c.consuming.Load() {
		return errors.New("not consuming")
	}
	return nil
}

// NewConsumer returns a consumer; Run starts it.
func NewConsumer(conn *Conn, topo Topology, pub *Publisher, cfg ConsumerConfig, h Handler) *Consumer {
	cfg.Prefetch = max(cfg.Prefetch, 1)
	cfg.Concurrency = max(cfg.Concurrency, 1)
	if cfg.MaxPanics <= 0 {
		cfg.MaxPanics = defaultMaxPanics
	}
	if len(cfg.Queues) == 0 {
		for _, p := range Priorities {
			cfg.Queues = append(cfg.Queues, topo.WorkQueue(p))
		}
	}
	return &Consumer{conn: conn, topo: topo, pub: pub, cfg: cfg, handler: h}
}

// Run consumes until ctx ends, resubscribing after connection losses. On
// shutdown it stops taking messages, lets handlers finish within the grace
// period, and leaves the rest unacknowledged for the broker to redeliver.
func (c *Consumer) Run(ctx context.Context) error {
	workCtx, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()
	stop := context.AfterFunc(ctx, func() {
		time.AfterFunc(c.cfg.Grace, cancelWork)
	})
	defer stop()
	for ctx.Err() == nil {
		conn, err := c.conn.Current()
		if err != nil {
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
			continue
		}
		if err := c.session(ctx, workCtx, conn); err != nil {
			c.conn.log.Warn("consumer session ended", "error", err)
			select { // do not spin when the broker keeps refusing
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
	return nil
}

// session consumes on one connection until it fails or ctx ends.
func (c *Consumer) session(ctx, workCtx context.Context, conn *amqp.Connection) error {
	sources := make([]<-chan amqp.Delivery, len(c.cfg.Queues))
	ackers := make([]*acker, len(c.cfg.Queues))
	var chans []*amqp.Channel
	// The ackers send what they hold once every handler is done, before
	// their channels close.
	ackCtx, stopAcks := context.WithCancel(context.Background())
	var acks sync.WaitGroup
	defer func() {
		stopAcks()
		acks.Wait()
		for _, ch := range chans {
			_ = ch.Close()
		}
	}()
	for i, q := range c.cfg.Queues {
		ch, err := conn.Channel()
		if err != nil {
			return fmt.Errorf("open channel: %w", err)
		}
		chans = append(chans, ch)
		if err := ch.Qos(c.cfg.Prefetch, 0, false); err != nil {
			return fmt.Errorf("qos: %w", err)
		}
		d, err := ch.Consume(q, "", false, false, false, false, nil)
		if err != nil {
			return fmt.Errorf("consume %s: %w", q, err)
		}
		sources[i] = d
		ackers[i] = newAcker(ch, c.conn.log)
		acks.Add(1)
		go func() { defer acks.Done(); ackers[i].run(ackCtx) }()
	}
	c.consuming.Store(true)
	defer c.consuming.Store(false)
	var wg sync.WaitGroup
	for range c.cfg.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				d, i, ok := next(ctx, sources)
				if !ok {
					return
				}
				d.Acknowledger = ackers[i]
				c.handle(workCtx, c.cfg.Queues[i], d)
			}
		}()
	}
	wg.Wait()
	return nil
}

// next takes the next message, preferring higher priorities, and returns
// the index of its source. It returns false when ctx ends or a source
// closes (the channel died).
func next(ctx context.Context, sources []<-chan amqp.Delivery) (amqp.Delivery, int, bool) {
	if ctx.Err() != nil {
		return amqp.Delivery{}, 0, false
	}
	for i, src := range sources {
		select {
		case d, ok := <-src:
			return d, i, ok
		default:
		}
	}
	cases := make([]reflect.SelectCase, 0, len(sources)+1)
	cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())})
	for _, src := range sources {
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(src)})
	}
	chosen, v, ok := reflect.Select(cases)
	if chosen == 0 || !ok {
		return amqp.Delivery{}, 0, false
	}
	return v.Interface().(amqp.Delivery), chosen - 1, true
}

// handle hands d, taken from queue, to the handler and settles it.
func (c *Consumer) handle(ctx context.Context, queue string, d amqp.Delivery) {
	if !c.cfg.Foreign && c.deferUntilDue(ctx, d) {
		return
	}
	disp, crash := c.call(ctx, d)
	if crash != nil {
		c.afterPanic(ctx, queue, d, crash)
		return
	}
	var err error
	switch disp {
	case Ack:
		err = d.Ack(false)
	case Requeue:
		err = d.Nack(false, true)
	case DeadLetter:
		err = d.Nack(false, false)
	}
	if err != nil {
		c.conn.log.Warn("settle message", "message_id", d.MessageId, "error", err)
	}
}

// deferUntilDue sends a message that is not yet due on to its next delay
// tier and reports true, or waits out a remainder shorter than the smallest
// tier and reports false.
func (c *Consumer) deferUntilDue(ctx context.Context, d amqp.Delivery) bool {
	ms, ok := d.Headers[HeaderNotBefore].(int64)
	if !ok {
		return false
	}
	due := time.UnixMilli(ms)
	wait := time.Until(due)
	if wait <= 0 {
		return false
	}
	if wait < minTier {
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
		return false
	}
	err := c.pub.Publish(ctx, Message{
		ID: d.MessageId, Priority: priorityOf(d.RoutingKey), Body: d.Body, NotBefore: due, Headers: d.Headers,
	})
	if err != nil {
		_ = d.Nack(false, true)
		return true
	}
	metrics.DeliveryRepublishes.WithLabelValues("delay_hop").Inc()
	_ = d.Ack(false)
	return true
}

// priorityOf reads the priority from a routing key: "high" for fresh work,
// "<ms>.high" for a message back from a delay tier.
func priorityOf(key string) string {
	for _, p := range Priorities {
		if key == p || len(key) > len(p) && key[len(key)-len(p)-1:] == "."+p {
			return p
		}
	}
	return "normal"
}
