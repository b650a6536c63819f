package queue

import (
	"context"
	"fmt"
	"runtime/debug"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/hookline/hookline/internal/metrics"
)

// Headers of a message whose handler panicked.
const (
	// HeaderPanics counts the panics a message caused.
	HeaderPanics = "x-panics"
	// HeaderPanic is the value of its last panic, cut to maxPanicText.
	HeaderPanic = "x-panic"
)

const (
	defaultMaxPanics = 3
	maxPanicText     = 200
)

// panicked is a recovered panic of a handler.
type panicked struct {
	value any
	stack []byte
}

// call runs the handler on d and recovers its panic. A crash must stay
// with its message: were the process to die, every message it had
// prefetched would come back with its delivery count raised, and after
// enough crashes the work queues' delivery limit would dead-letter other
// tenants' messages as poison.
func (c *Consumer) call(ctx context.Context, d amqp.Delivery) (disp Disposition, crash *panicked) {
	defer func() {
		if v := recover(); v != nil {
			crash = &panicked{value: v, stack: debug.Stack()}
		}
	}()
	return c.handler(ctx, d), nil
}

// afterPanic settles a message, taken from queue, whose handler panicked:
// a copy counting the panic goes to the tail of its queue, or once it has
// caused MaxPanics of them, to the dead-letter queue, and the message is
// acknowledged. Nothing else is touched. Should that publish fail, the
// message is returned to the broker, whose delivery limit bounds it.
func (c *Consumer) afterPanic(ctx context.Context, queue string, d amqp.Delivery, p *panicked) {
	n := panicsOf(d.Headers) + 1
	text := fmt.Sprint(p.value)
	log := c.conn.log.With("queue", queue, "message_id", d.MessageId, "panics", n)
	log.Error("message handler panicked", "panic", text, "stack", string(p.stack))
	m := Message{ID: d.MessageId, Body: d.Body, Headers: freshHeaders(d.Headers)}
	m.Headers[HeaderPanics] = int64(n)
	m.Headers[HeaderPanic] = cut(text, maxPanicText)
	outcome := "requeued"
	var err error
	switch {
	case n < c.cfg.MaxPanics:
		err = c.pub.PublishToQueue(ctx, queue, m)
	case c.cfg.Foreign:
		outcome = "dead_lettered"
		for _, h := range c.cfg.PoisonStrip {
			delete(m.Headers, h)
		}
		err = c.pub.PublishToQueue(ctx, c.cfg.PoisonQueue, m)
	case queue != c.topo.DeadQueue():
		outcome = "dead_lettered"
		err = c.pub.PublishDead(ctx, m)
	default:
		// A dead letter has nowhere further to go; the dlq sweeps find
		// its delivery again.
		outcome = "dropped"
		log.Error("dead letter dropped: its handler panicked too often", "body_sample", cut(string(d.Body), maxPanicText))
	}
	if err != nil {
		log.Warn("panicking message not republished; returned to its queue", "error", err)
		_ = d.Nack(false, true)
		return
	}
	metrics.HandlerPanics.WithLabelValues(outcome).Inc()
	if err := d.Ack(false); err != nil {
		log.Warn("settle message", "error", err)
	}
}

// panicsOf reads HeaderPanics.
func panicsOf(h amqp.Table) int {
	switch v := h[HeaderPanics].(type) {
	case int64:
		return int(v)
	case int32:
		return int(v)
	}
	return 0
}

// freshHeaders copies h without what the broker added on its way (its
// dead-letter history and delivery count) and without its due time, past.
func freshHeaders(h amqp.Table) amqp.Table {
	out := make(amqp.Table, len(h)+2)
	for k, v := range h {
		if k == HeaderNotBefore || k == "x-delivery-count" || k == "x-death" ||
			strings.HasPrefix(k, "x-first-death-") || strings.HasPrefix(k, "x-last-death-") {
			continue
		}
		out[k] = v
	}
	return out
}

// cut shortens s to at most n bytes on a character boundary.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "")
}
