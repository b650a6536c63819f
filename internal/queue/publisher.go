package queue

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
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
	// HeaderPublishID identifies one publish of a message, so that a
	// basic.return can be matched to the publish it answers (see returns).
	HeaderPublishID = "x-publish-id"
)

// Message is one unit of work to enqueue.
type Message struct {
	// ID identifies the message (the delivery id); consumers see it as
	// Delivery.MessageId.
	ID string
	// Priority is high, normal or low.
	Priority string
	// ShardKey chooses the work queue shard (Topology.ShardOf): messages
	// with one key go to one shard and keep their order. Workers' messages
	// carry their webhook's id. Empty: shard 0.
	ShardKey string
	// Body is the payload, opaque to the queue.
	Body []byte
	// NotBefore delays the message until then; zero means now.
	NotBefore time.Time
	// Headers are extra AMQP headers.
	Headers amqp.Table
}

// ErrNacked is returned when the broker refused a message.
var ErrNacked = errors.New("rabbitmq refused the message")

// ErrUnroutable is returned when the broker returned a message because no
// queue is bound for its route (every publish is mandatory). The broker
// confirms such a message all the same; without mandatory it would have
// been dropped while the caller believed it enqueued.
var ErrUnroutable = errors.New("rabbitmq routed the message to no queue")

// Publisher publishes persistent, mandatory messages with publisher
// confirms over a few channels of the shared connection, reopened after
// every reconnection. A publish succeeds only when the broker confirmed
// every message and returned none.
type Publisher struct {
	conn *Conn
	topo Topology
	size int
	// idPrefix and seq make the publish ids (HeaderPublishID) unique.
	idPrefix string
	seq      atomic.Uint64

	mu    sync.Mutex
	chans []pubChannel
	next  atomic.Uint64
}

// pubChannel is a confirm-mode channel with the returns it received.
type pubChannel struct {
	ch      *amqp.Channel
	returns *returns
}

// NewPublisher returns a publisher with channels confirm-mode channels.
// It declares the topology on every (re)connection.
func NewPublisher(conn *Conn, topo Topology, channels int) *Publisher {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	p := &Publisher{conn: conn, topo: topo, size: max(channels, 1), idPrefix: hex.EncodeToString(b) + "-"}
	conn.OnOpen(p.open)
	return p
}

func (p *Publisher) open(c *amqp.Connection) {
	chans := make([]pubChannel, 0, p.size)
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
		chans = append(chans, pubChannel{ch: ch, returns: watchReturns(ch)})
	}
	p.mu.Lock()
	p.chans = chans
	p.mu.Unlock()
}

// replace puts a new confirm-mode channel in the place of pc, which the
// broker refused a message on, and closes pc (publishes still waiting on
// it fail, and their callers publish again). On a cluster, a channel
// opened while a quorum queue's leader was being elected can go on
// refusing every message it routes to that queue, although the queue
// takes them (RabbitMQ 3.10); a new channel does not. Refusals are rare
// otherwise (a queue's limit, a broker's alarm), so a new channel costs
// nothing there.
func (p *Publisher) replace(pc pubChannel) {
	c, err := p.conn.Current()
	if err != nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	i := slices.IndexFunc(p.chans, func(o pubChannel) bool { return o.ch == pc.ch })
	if i < 0 {
		return // replaced already, or the connection was reopened
	}
	ch, err := c.Channel()
	if err == nil {
		err = ch.Confirm(false)
	}
	if err != nil {
		p.conn.log.Warn("rabbitmq publisher channel", "error", err)
		return
	}
	p.chans[i] = pubChannel{ch: ch, returns: watchReturns(ch)}
	p.conn.log.Warn("rabbitmq refused a message; publishing on a new channel")
	_ = pc.ch.Close()
}

func (p *Publisher) channel() (pubChannel, error) {
	if _, err := p.conn.Current(); err != nil {
		return pubChannel{}, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.chans) == 0 {
		return pubChannel{}, ErrNotConnected
	}
	i := int(p.next.Add(1) % uint64(len(p.chans))) //nolint:gosec // less than len(p.chans)
	pc := p.chans[i]
	if pc.ch.IsClosed() {
		return pubChannel{}, ErrNotConnected
	}
	return pc, nil
}

// Check reports whether the publisher can publish: connected, with its
// channels open (a topology that failed to declare leaves none). It is the
// api's readiness check for RabbitMQ.
func (p *Publisher) Check(context.Context) error {
	_, err := p.channel()
	return err
}

// Publish enqueues msgs and returns once the broker has confirmed every one
// (nil) or any failed: refused (ErrNacked), or returned for want of a
// queue (ErrUnroutable). On error some may have been enqueued: callers
// retry the whole set and consumers tolerate duplicates.
func (p *Publisher) Publish(ctx context.Context, msgs ...Message) error {
	now := time.Now()
	out := make([]outgoing, len(msgs))
	for i, m := range msgs {
		exchange, key := p.route(Route{Priority: m.Priority, Shard: p.topo.ShardOf(m.ShardKey)}, m.NotBefore, now)
		out[i] = outgoing{exchange: exchange, key: key, msg: m}
	}
	return p.send(ctx, now, out)
}

// publishRoute enqueues m for route r, whatever its ShardKey says: a
// message sent on from a delay tier stays on the shard it came from.
func (p *Publisher) publishRoute(ctx context.Context, r Route, m Message) error {
	now := time.Now()
	exchange, key := p.route(r, m.NotBefore, now)
	return p.send(ctx, now, []outgoing{{exchange: exchange, key: key, msg: m}})
}

// route picks the work queue of r for a due message and the delay tier
// for one that must wait until notBefore; the tier's key ends with r's, so
// that the requeue exchange takes the message back to r's queue.
func (p *Publisher) route(r Route, notBefore, now time.Time) (exchange, key string) {
	if tier, ok := tierFor(notBefore.Sub(now)); ok {
		return p.topo.DelayExchange(), strconv.FormatInt(tier.Milliseconds(), 10) + "." + r.Key()
	}
	return p.topo.WorkExchange(), r.Key()
}

// PublishDead sends a message straight to the dead-letter queue.
func (p *Publisher) PublishDead(ctx context.Context, m Message) error {
	m.NotBefore = time.Time{}
	return p.send(ctx, time.Now(), []outgoing{{exchange: p.topo.DeadExchange(), msg: m}})
}

// PublishToQueue sends a message straight to the queue named queue, at
// its tail (through the default exchange).
func (p *Publisher) PublishToQueue(ctx context.Context, queue string, m Message) error {
	return p.send(ctx, time.Now(), []outgoing{{key: queue, msg: m}})
}

// outgoing is a message and its route.
type outgoing struct {
	exchange, key string
	msg           Message
}

// send publishes out on one channel, mandatory and persistent, and waits
// for every confirm and for any return.
func (p *Publisher) send(ctx context.Context, now time.Time, out []outgoing) error {
	pc, err := p.channel()
	if err != nil {
		return err
	}
	ids := make([]string, len(out))
	confirms := make([]*amqp.DeferredConfirmation, 0, len(out))
	for i, o := range out {
		ids[i] = p.idPrefix + strconv.FormatUint(p.seq.Add(1), 36)
		headers := withHeader(o.msg.Headers, HeaderPublishID, ids[i])
		if !o.msg.NotBefore.IsZero() {
			// Rounded up to the millisecond, so never early.
			headers[HeaderNotBefore] = (o.msg.NotBefore.UnixNano() + int64(time.Millisecond) - 1) / int64(time.Millisecond)
		}
		dc, err := pc.ch.PublishWithDeferredConfirmWithContext(ctx, o.exchange, o.key, true, false, amqp.Publishing{
			DeliveryMode: amqp.Persistent,
			ContentType:  "application/json",
			MessageId:    o.msg.ID,
			Timestamp:    now,
			Headers:      headers,
			Body:         o.msg.Body,
		})
		if err != nil {
			return fmt.Errorf("publish: %w", err)
		}
		confirms = append(confirms, dc)
	}
	if err := WaitConfirms(ctx, confirms...); err != nil {
		if errors.Is(err, ErrNacked) {
			p.replace(pc)
		}
		return err
	}
	returned, err := pc.returns.take(ctx, ids)
	if err != nil {
		return fmt.Errorf("wait for returns: %w", err)
	}
	if len(returned) > 0 {
		r := returned[0]
		return fmt.Errorf("%w: %d of %d returned (%d %s, exchange %q, routing key %q)",
			ErrUnroutable, len(returned), len(out), r.ReplyCode, r.ReplyText, r.Exchange, r.RoutingKey)
	}
	return nil
}

// WaitConfirms waits for the broker's answer to each publish of confirms,
// in order, and returns ErrNacked for the first it refused, or the error
// that ended the wait (ctx's). The publishes were made on a channel in
// confirm mode.
func WaitConfirms(ctx context.Context, confirms ...*amqp.DeferredConfirmation) error {
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

func withHeader(h amqp.Table, k string, v any) amqp.Table {
	out := make(amqp.Table, len(h)+1)
	for key, val := range h {
		out[key] = val
	}
	out[k] = v
	return out
}
