package queue

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Header names carried by every message.
const (
	// HeaderNotBefore is the unix millisecond time before which the message
	// must not be handed to a handler.
	HeaderNotBefore = "x-not-before-ms"
)

// Message is one unit of work to enqueue.
type Message struct {
	// ID identifies the message (the delivery id); consumers see it as
	// Delivery.MessageId.
	ID string
	// Priority is high, normal or low.
	Priority string
	// Body is the payload, opaque to the queue.
	Body []byte
	// NotBefore delays the message until then; zero means now.
	NotBefore time.Time
	// Headers are extra AMQP headers.
	Headers amqp.Table
}

// ErrNacked is returned when the broker refused a message.
var ErrNacked = errors.New("rabbitmq refused the message")

// Publisher publishes persistent messages with publisher confirms over a
// few channels of the shared connection, reopened after every reconnection.
type Publisher struct {
	conn *Conn
	topo Topology
	size int

	mu    sync.Mutex
	chans []*amqp.Channel
	next  atomic.Uint64
}

// NewPublisher returns a publisher with channels confirm-mode channels.
// It declares the topology on every (re)connection.
func NewPublisher(conn *Conn, topo Topology, channels int) *Publisher {
	p := &Publisher{conn: conn, topo: topo, size: max(channels, 1)}
	conn.OnOpen(p.open)
	return p
}

func (p *Publisher) open(c *amqp.Connection) {
	chans := make([]*amqp.Channel, 0, p.size)
	for range p.size {
		ch, err := c.Channel()
		if err == nil {
			err = ch.Confirm(false)
		}
		if err == nil && len(chans) == 0 {
			err = p.topo.Declare(ch)
		}
		if err != nil {
			p.conn.log.Error("rabbitmq publisher channel", "error", err)
			break
		}
		chans = append(chans, ch)
	}
	p.mu.Lock()
	p.chans = chans
	p.mu.Unlock()
}

func (p *Publisher) channel() (*amqp.Channel, error) {
	if _, err := p.conn.Current(); err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.chans) == 0 {
		return nil, ErrNotConnected
	}
	i := int(p.next.Add(1) % uint64(len(p.chans)))
	ch := p.chans[i]
	if ch.IsClosed() {
		return nil, ErrNotConnected
	}
	return ch, nil
}

// Check reports whether the publisher can publish: connected, with its
// channels open (a topology that failed to declare leaves none). It is the
// api's readiness check for RabbitMQ.
func (p *Publisher) Check(context.Context) error {
	_, err := p.channel()
	return err
}

// Publish enqueues msgs and returns once the broker has confirmed every one
// (nil) or any failed. On error some may have been enqueued: callers retry
// the whole set and consumers tolerate duplicates.
func (p *Publisher) Publish(ctx context.Context, msgs ...Message) error {
	ch, err := p.channel()
	if err != nil {
		return err
	}
	now := time.Now()
	confirms := make([]*amqp.DeferredConfirmation, 0, len(msgs))
	for _, m := range msgs {
		exchange, key := p.route(m, now)
		headers := m.Headers
		if !m.NotBefore.IsZero() {
			// Rounded up to the millisecond, so never early.
			headers = withHeader(headers, HeaderNotBefore, (m.NotBefore.UnixNano()+int64(time.Millisecond)-1)/int64(time.Millisecond))
		}
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, exchange, key, false, false, amqp.Publishing{
			DeliveryMode: amqp.Persistent,
			ContentType:  "application/json",
			MessageId:    m.ID,
			Timestamp:    now,
			Headers:      headers,
			Body:         m.Body,
		})
		if err != nil {
			return fmt.Errorf("publish: %w", err)
		}
		confirms = append(confirms, dc)
	}
	for _, dc := range confirms {
		ok, err := dc.WaitContext(ctx)
		if err != nil {
			return fmt.Errorf("wait for confirm: %w", err)
		}
		if !ok {
			return ErrNacked
		}
	}
	return nil
}

// route picks the work queue for a due message and the delay tier for one
// that must wait.
func (p *Publisher) route(m Message, now time.Time) (exchange, key string) {
	if tier, ok := tierFor(m.NotBefore.Sub(now)); ok {
		return p.topo.DelayExchange(), strconv.FormatInt(tier.Milliseconds(), 10) + "." + m.Priority
	}
	return p.topo.WorkExchange(), m.Priority
}

// PublishDead sends a message straight to the dead-letter queue.
func (p *Publisher) PublishDead(ctx context.Context, m Message) error {
	ch, err := p.channel()
	if err != nil {
		return err
	}
	dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, p.topo.DeadExchange(), "", false, false, amqp.Publishing{
		DeliveryMode: amqp.Persistent,
		ContentType:  "application/json",
		MessageId:    m.ID,
		Timestamp:    time.Now(),
		Headers:      m.Headers,
		Body:         m.Body,
	})
	if err != nil {
		return fmt.Errorf("publish dead letter: %w", err)
	}
	ok, err := dc.WaitContext(ctx)
	if err != nil {
		return fmt.Errorf("wait for confirm: %w", err)
	}
	if !ok {
		return ErrNacked
	}
	return nil
}

func withHeader(h amqp.Table, k string, v any) amqp.Table {
	out := make(amqp.Table, len(h)+1)
	for key, val := range h {
		out[key] = val
	}
	out[k] = v
	return out
}
