package queue

import (
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
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

// MaxShards bounds Topology.Shards, and how far consumers look for the
// shard queues of a larger shard count still holding messages.
const MaxShards = 64

// Topology names every exchange and queue under one prefix, so that several
// deployments (or tests) can share a vhost.
type Topology struct {
	Prefix string
	// DeliveryLimit is how often one message may be handed out before it is
	// treated as poison and dead-lettered. Default 20.
	DeliveryLimit int
	// Shards is the number of work queues per priority (1 to MaxShards).
	// Default 1: one queue per priority, named as before shards existed.
	Shards int
}

// WorkExchange receives fresh work, routed by priority and shard (see
// Route.Key).
func (t Topology) WorkExchange() string { return t.Prefix + ".work" }

// WorkQueue is the work queue of a priority: its shard 0, the only one
// unless Shards is above 1.
func (t Topology) WorkQueue(priority string) string { return t.ShardQueue(Route{Priority: priority}) }

// ShardQueue is the work queue of r: "<prefix>.work.<priority>" for shard
// 0, "<prefix>.work.<priority>.<shard>" for the others.
func (t Topology) ShardQueue(r Route) string { return t.Prefix + ".work." + r.Key() }

// WorkQueues lists the work queues of a priority, shard 0 first.
func (t Topology) WorkQueues(priority string) []string {
	out := make([]string, t.shards())
	for i := range out {
		out[i] = t.ShardQueue(Route{Priority: priority, Shard: i})
	}
	return out
}

func (t Topology) shards() int { return min(max(t.Shards, 1), MaxShards) }

// ShardOf is the shard of the work messages of key (a webhook id): a
// stable hash of it, so that one webhook's deliveries share a queue and
// keep their order. An empty key is shard 0.
func (t Topology) ShardOf(key string) int {
	n := t.shards()
	if key == "" || n == 1 {
		return 0
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return int(h.Sum32() % uint32(n)) //nolint:gosec // n is at most MaxShards
}

// Route is the work queue a message goes to: a priority and a shard.
type Route struct {
	Priority string
	Shard    int
}

// Key is the routing key of r on the work exchange, and its suffix on the
// delay and requeue exchanges: "<priority>" for shard 0 (as before shards
// existed), "<priority>.<shard>" for the others.
func (r Route) Key() string {
	if r.Shard == 0 {
		return r.Priority
	}
	return r.Priority + "." + strconv.Itoa(r.Shard)
}

// RouteOf reads the route from a work message's routing key: "high" or
// "high.3" for fresh work, "1600.high" or "1600.high.3" for a message back
// from a delay tier. An unknown priority reads as normal, shard 0.
func RouteOf(key string) Route {
	words := strings.Split(key, ".")
	last := len(words) - 1
	if isPriority(words[last]) {
		return Route{Priority: words[last]}
	}
	if last >= 1 && isPriority(words[last-1]) {
		n, err := strconv.Atoi(words[last])
		if err == nil && n >= 1 && n < MaxShards && strconv.Itoa(n) == words[last] {
			return Route{Priority: words[last-1], Shard: n}
		}
	}
	return Route{Priority: "normal"}
}

func isPriority(s string) bool { return slices.Contains(Priorities, s) }

// DelayExchange routes delayed messages to their tier by "<ms>.<route
// key>".
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
		for shard := range t.shards() {
			if err := t.declareShard(ch, Route{Priority: p, Shard: shard}); err != nil {
				return err
			}
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
		// The keys of shards above 0 have one word more.
		if err := ch.QueueBind(t.DelayQueue(d), key+".*", t.DelayExchange(), false, nil); err != nil {
			return fmt.Errorf("bind %s to %s: %w", t.DelayQueue(d), t.DelayExchange(), err)
		}
	}
	return nil
}

// declareShard declares the work queue of r, bound to the work exchange by
// r's key and to the requeue exchange by any tier's "<ms>.<key>".
//
// Shards above 0 ask for their Raft leader on the node with the fewest
// leaders (x-queue-leader-locator: balanced, RabbitMQ 3.10 and later), so
// that a cluster's nodes share the work. Shard 0 is declared as the one
// work queue of each priority always was: the broker refuses a declaration
// whose arguments differ from those of the existing queue, so adding the
// argument would stop every deployment whose queues predate it. Its leader
// goes to the node the declaring process is connected to, unless a policy
// says otherwise (docs/OPERATIONS.md).
func (t Topology) declareShard(ch *amqp.Channel, r Route) error {
	args := amqp.Table{
		"x-queue-type":           "quorum",
		"x-delivery-limit":       int64(t.deliveryLimit()),
		"x-dead-letter-exchange": t.DeadExchange(),
		"x-dead-letter-strategy": "at-least-once",
		"x-overflow":             "reject-publish",
	}
	if r.Shard > 0 {
		args["x-queue-leader-locator"] = "balanced"
	}
	q := t.ShardQueue(r)
	if err := declareBound(ch, q, args, t.WorkExchange(), r.Key()); err != nil {
		return err
	}
	if err := ch.QueueBind(q, "*."+r.Key(), t.RequeueExchange(), false, nil); err != nil {
		return fmt.Errorf("bind %s to %s: %w", q, t.RequeueExchange(), err)
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

// leftoverShards returns the work queues of priority p above Shards that
// exist: shard Shards, then the next, up to the first missing one or
// MaxShards. A deployment whose shard count went down leaves them behind,
// still bound (hookline never deletes a queue), and they may hold
// messages, or receive them from the delay tiers.
func (t Topology) leftoverShards(conn *amqp.Connection, p string) ([]amqp.Queue, error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("open channel: %w", err)
	}
	defer ch.Close()
	var out []amqp.Queue
	for shard := t.shards(); shard < MaxShards; shard++ {
		name := t.ShardQueue(Route{Priority: p, Shard: shard})
		q, err := ch.QueueDeclarePassive(name, true, false, false, false, nil)
		var amqpErr *amqp.Error
		if errors.As(err, &amqpErr) && amqpErr.Code == amqp.NotFound {
			return out, nil // the broker closed ch
		}
		if err != nil {
			return nil, fmt.Errorf("look for queue %s: %w", name, err)
		}
		out = append(out, q)
	}
	return out, nil
}

// Delete removes every exchange and queue of the topology; tests use it to
// leave nothing behind.
func (t Topology) Delete(ch *amqp.Channel) error {
	queues := []string{t.DeadQueue(), t.PublishQueue(), t.PublishRejectedQueue()}
	for _, p := range Priorities {
		queues = append(queues, t.WorkQueues(p)...)
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
