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
	// work queues, high first, the shards of one priority in turn (see
	// Consumer).
	Queues []string
	// Prefetch bounds unacknowledged messages per queue (per shard of each
	// priority).
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

// Consumer consumes its queues and hands messages to a bounded pool of
// handlers. By default it consumes the work queues, preferring high over
// normal over low, and taking from the shards of one priority in turn, so
// that no shard waits behind another's backlog; besides the Shards of its
// topology it consumes, at that priority, any higher shard queue that
// exists when it subscribes (shards left by a larger shard count, up to
// MaxShards), so that their messages are not stranded. Messages that come
// back from a delay tier early are sent on to the next tier (or held for
// the last few milliseconds) before any handler sees them.
type Consumer struct {
	conn    *Conn
	topo    Topology
	pub     *Publisher
	cfg     ConsumerConfig
	handler Handler
	// work: cfg.Queues was empty, the consumer takes the work queues.
	work bool
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
	return &Consumer{conn: conn, topo: topo, pub: pub, cfg: cfg, handler: h, work: len(cfg.Queues) == 0}
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
	levels, err := c.queues(conn)
	if err != nil {
		return err
	}
	var queues []string
	src := &sources{}
	for _, level := range levels {
		var idx []int
		for _, q := range level {
			idx = append(idx, len(queues))
			queues = append(queues, q)
		}
		src.levels = append(src.levels, idx)
	}
	src.chans = make([]<-chan amqp.Delivery, len(queues))
	ackers := make([]*acker, len(queues))
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
	for i, q := range queues {
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
		src.chans[i] = d
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
				d, i, ok := src.next(ctx)
				if !ok {
					return
				}
				d.Acknowledger = ackers[i]
				c.handle(workCtx, queues[i], d)
			}
		}()
	}
	wg.Wait()
	return nil
}

// queues lists the queues to consume, by preference: one level per queue
// of cfg.Queues, or for the work queues one level per priority holding its
// shards, those of the topology and any higher ones that exist.
func (c *Consumer) queues(conn *amqp.Connection) ([][]string, error) {
	if !c.work {
		levels := make([][]string, len(c.cfg.Queues))
		for i, q := range c.cfg.Queues {
			levels[i] = []string{q}
		}
		return levels, nil
	}
	levels := make([][]string, len(Priorities))
	for i, p := range Priorities {
		left, err := c.topo.leftoverShards(conn, p)
		if err != nil {
			return nil, err
		}
		for _, q := range left {
			log := c.conn.log.Info
			if q.Messages > 0 {
				log = c.conn.log.Warn
			}
			log("consuming a work queue beyond amqp.shards (docs/OPERATIONS.md, changing the shard count)",
				"queue", q.Name, "messages", q.Messages, "shards", c.topo.shards())
		}
		levels[i] = c.topo.WorkQueues(p)
		for _, q := range left {
			levels[i] = append(levels[i], q.Name)
		}
	}
	return levels, nil
}

// sources are the delivery channels of a session's queues, in levels of
// preference: a message waiting at an earlier level is taken before one at
// a later level, and the queues of one level (the shards of a priority)
// are looked at in turn, each first as often as the others.
type sources struct {
	chans  []<-chan amqp.Delivery
	levels [][]int
	turn   atomic.Uint64
}

// next takes the next message and returns the index of its source. It
// returns false when ctx ends or a source closes (the channel died).
func (s *sources) next(ctx context.Context) (amqp.Delivery, int, bool) {
	if ctx.Err() != nil {
		return amqp.Delivery{}, 0, false
	}
	turn := s.turn.Add(1)
	for _, level := range s.levels {
		start := int(turn % uint64(len(level))) //nolint:gosec // less than len(level)
		for k := range level {
			i := level[(start+k)%len(level)]
			select {
			case d, ok := <-s.chans[i]:
				return d, i, ok
			default:
			}
		}
	}
	cases := make([]reflect.SelectCase, 0, len(s.chans)+1)
	cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())})
	for _, src := range s.chans {
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
	r := RouteOf(d.RoutingKey)
	err := c.pub.publishRoute(ctx, r, Message{
		ID: d.MessageId, Priority: r.Priority, Body: d.Body, NotBefore: due, Headers: d.Headers,
	})
	if err != nil {
		_ = d.Nack(false, true)
		return true
	}
	metrics.DeliveryRepublishes.WithLabelValues("delay_hop").Inc()
	_ = d.Ack(false)
	return true
}
