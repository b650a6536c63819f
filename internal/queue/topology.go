package queue

import (
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Priorities, highest first. Each has its own work queue: quorum queues do
// not support per-message priorities, so consumers prefer the high queue
// over the normal one and the normal over the low one instead.
var Priorities = []string{"high", "normal", "low"}

// Delay tiers: 100 ms doubling up to about 29 hours. A delayed message waits
// in the largest tier not longer than its remaining delay, comes back to its
// work queue, and the consumer sends it on for whatever remains; so a delay
// of d takes at most log2(d/100ms) hops and no message waits behind a longer
// one (every message in a tier queue has the same TTL).
const (
	minTier   = 100 * time.Millisecond
	tierCount = 21
)

// Tiers returns every delay tier, shortest first.
func Tiers() []time.Duration {
	out := make([]time.Duration, tierCount)
	for i := range out {
		out[i] = minTier << i
	}
	return out
}

// tierFor returns the largest tier not longer than d, or false when d is
// shorter than the smallest tier.
func tierFor(d time.Duration) (time.Duration, bool) {
	if d < minTier {
		return 0, false
	}
	t := minTier
	for i := 1; i < tierCount && minTier<<i <= d; i++ {
		t = minTier << i
	}
	return t, true
}

// Topology names every exchange and queue under one prefix, so that several
// deployments (or tests) can share a vhost.
type Topology struct {
	Prefix string
	// DeliveryLimit is how often one message may be handed out before it is
	// treated as poison and dead-lettered. Default 20.
	DeliveryLimit int
}

// WorkExchange receives fresh work, routed by priority.
func (t Topology) WorkExchange() string { return t.Prefix + ".work" }

// WorkQueue is the work queue of a priority.
func (t Topology) WorkQueue(priority string) string { return t.Prefix + ".work." + priority }

// DelayExchange routes delayed messages to their tier by "<ms>.<priority>".
func (t Topology) DelayExchange() string { return t.Prefix + ".delay" }

// DelayQueue is the tier queue of delay d.
func (t Topology) DelayQueue(d time.Duration) string {
	return fmt.Sprintf("%s.delay.%dms", t.Prefix, d.Milliseconds())
}

// RequeueExchange takes expired delayed messages back to their work queue.
func (t Topology) RequeueExchange() string { return t.Prefix + ".requeue" }

// DeadExchange and DeadQueue hold exhausted deliveries and poison messages.
func (t Topology) DeadExchange() string { return t.Prefix + ".dead" }

// DeadQueue is the dead-letter queue the dlq process consumes.
func (t Topology) DeadQueue() string { return t.Prefix + ".dead" }

// PublishExchange takes events from producers (docs/PUBLISHING.md): a
// fanout exchange, so that any routing key reaches the publish queue.
func (t Topology) PublishExchange() string { return t.Prefix + ".publish" }

// PublishQueue is the queue the api processes consume PublishExchange
// through.
func (t Topology) PublishQueue() string { return t.Prefix + ".publish" }

// PublishRejectedQueue keeps the messages of PublishExchange that were
// refused (headers x-error-code and x-error-message say why), and those
// the api took DeliveryLimit times without settling them.
func (t Topology) PublishRejectedQueue() string { return t.Prefix + ".publish.rejected" }

// MaxDeliveries is DeliveryLimit, or its default when unset.
func (t Topology) MaxDeliveries() int { return t.deliveryLimit() }

func (t Topology) deliveryLimit() int {
	if t.DeliveryLimit > 0 {
		return t.DeliveryLimit
	}
	return 20
}

// Declare creates every exchange, queue and binding, idempotently. Queues
// are durable quorum queues; dead-lettering is at-least-once so that no
// message is lost between a delay tier and its work queue.
func (t Topology) Declare(ch *amqp.Channel) error {
	exchanges := []struct{ name, kind string }{
		{t.WorkExchange(), amqp.ExchangeDirect},
		{t.DelayExchange(), amqp.ExchangeTopic},
		{t.RequeueExchange(), amqp.ExchangeTopic},
		{t.DeadExchange(), amqp.ExchangeFanout},
		{t.PublishExchange(), amqp.ExchangeFanout},
	}
	for _, x := range exchanges {
		if err := ch.ExchangeDeclare(x.name, x.kind, true, false, false, false, nil); err != nil {
			return fmt.Errorf("declare exchange %s: %w", x.name, err)
		}
	}
	dead := amqp.Table{"x-queue-type": "quorum"}
	if err := declareBound(ch, t.DeadQueue(), dead, t.DeadExchange(), ""); err != nil {
		return err
	}
	if err := t.declarePublish(ch); err != nil {
		return err
	}
	for _, p := range Priorities {
		args := amqp.Table{
			"x-queue-type":           "quorum",
			"x-delivery-limit":       int64(t.deliveryLimit()),
			"x-dead-letter-exchange": t.DeadExchange(),
			"x-dead-letter-strategy": "at-least-once",
			"x-overflow":             "reject-publish",
		}
		if err := declareBound(ch, t.WorkQueue(p), args, t.WorkExchange(), p); err != nil {
			return err
		}
		if err := ch.QueueBind(t.WorkQueue(p), "*."+p, t.RequeueExchange(), false, nil); err != nil {
			return fmt.Errorf("bind %s to %s: %w", t.WorkQueue(p), t.RequeueExchange(), err)
		}
	}
	for _, d := range Tiers() {
		args := amqp.Table{
			"x-queue-type":           "quorum",
			"x-message-ttl":          d.Milliseconds(),
			"x-dead-letter-exchange": t.RequeueExchange(),
			"x-dead-letter-strategy": "at-least-once",
			"x-overflow":             "reject-publish",
		}
		key := fmt.Sprintf("%d.*", d.Milliseconds())
		if err := declareBound(ch, t.DelayQueue(d), args, t.DelayExchange(), key); err != nil {
			return err
		}
	}
	return nil
}

// declarePublish declares the publish queue, bound to its exchange, and
// the queue of rejected publishes, which the broker dead-letters a message
// to (through the default exchange) once the api took it DeliveryLimit
// times without settling it: a message that crashes the api is kept, not
// taken forever.
func (t Topology) declarePublish(ch *amqp.Channel) error {
	if _, err := ch.QueueDeclare(t.PublishRejectedQueue(), true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
		return fmt.Errorf("declare queue %s: %w", t.PublishRejectedQueue(), err)
	}
	args := amqp.Table{
		"x-queue-type":              "quorum",
		"x-delivery-limit":          int64(t.deliveryLimit()),
		"x-dead-letter-exchange":    "",
		"x-dead-letter-routing-key": t.PublishRejectedQueue(),
		"x-dead-letter-strategy":    "at-least-once",
		"x-overflow":                "reject-publish",
	}
	return declareBound(ch, t.PublishQueue(), args, t.PublishExchange(), "")
}

func declareBound(ch *amqp.Channel, queue string, args amqp.Table, exchange, key string) error {
	if _, err := ch.QueueDeclare(queue, true, false, false, false, args); err != nil {
		return fmt.Errorf("declare queue %s: %w", queue, err)
	}
	if err := ch.QueueBind(queue, key, exchange, false, nil); err != nil {
		return fmt.Errorf("bind %s to %s: %w", queue, exchange, err)
	}
	return nil
}

// Delete removes every exchange and queue of the topology; tests use it to
// leave nothing behind.
func (t Topology) Delete(ch *amqp.Channel) error {
	queues := []string{t.DeadQueue(), t.PublishQueue(), t.PublishRejectedQueue()}
	for _, p := range Priorities {
		queues = append(queues, t.WorkQueue(p))
	}
	for _, d := range Tiers() {
		queues = append(queues, t.DelayQueue(d))
	}
	for _, q := range queues {
		if _, err := ch.QueueDelete(q, false, false, false); err != nil {
			return fmt.Errorf("delete queue %s: %w", q, err)
		}
	}
	for _, x := range []string{t.WorkExchange(), t.DelayExchange(), t.RequeueExchange(), t.DeadExchange(), t.PublishExchange()} {
		if err := ch.ExchangeDelete(x, false, false); err != nil {
			return fmt.Errorf("delete exchange %s: %w", x, err)
		}
	}
	return nil
}
