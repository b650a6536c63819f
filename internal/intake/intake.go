// Package intake takes events from producers through RabbitMQ: the api
// processes consume the publish queue (bound to the exchange
// <amqp.prefix>.publish) and publish each message as POST /v1/events
// would publish its request, whose body the message's is.
//
// The message's headers Authorization, Hookline-Tenant and
// Idempotency-Key mean what the HTTP headers of those names mean and are
// checked by the same code (httpapi.Server.AuthenticatePublisher,
// httpapi.ParsePublish). What follows from each outcome:
//
//   - accepted or replayed: the message is acknowledged, only once the
//     event is durably committed (Publish returns after its group
//     commit), so that a message is never lost between the broker and
//     Postgres;
//   - refused (authentication, validation, a conflicting idempotency
//     key): a copy goes to <amqp.prefix>.publish.rejected with the code
//     and message the HTTP route would answer in x-error-code and
//     x-error-message, and the message is acknowledged: it is kept, never
//     dropped, and never taken again;
//   - our own failure (the database down): the message is held and
//     published again with a growing pause, never refused for it; at
//     shutdown it goes back to the queue;
//   - handed out by the broker as often as its delivery limit allows,
//     less one (the api died or stopped with it each time): kept in the
//     rejected queue as redelivery_limit, before the broker would
//     dead-letter it there itself with every header, the producer's
//     credential included; a message that panics the handler goes there
//     too, without its credential, after a few panics;
//   - the tenant over its publish rate limit: the message waits in the
//     api for the bucket's next token, then goes on. The producer is
//     slowed (its messages wait in the queue) rather than refused, since
//     a message, unlike a request, has nobody to read a 429.
//
// A message without an idempotency key (neither the header nor the body's
// field) takes its AMQP message_id as its key when it has one, so that a
// message the broker hands out again (the api died after the commit,
// before the ack) is a replay, not a second event. A message with neither
// is given a key before its first publish, so that publishing it again
// within the process is a replay too; only a crash between its commit and
// its ack can then publish it twice.
package intake

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/hookline/hookline/internal/event"
	"github.com/hookline/hookline/internal/httpapi"
	"github.com/hookline/hookline/internal/metrics"
	"github.com/hookline/hookline/internal/queue"
	"github.com/hookline/hookline/internal/tenant"
)

// Headers of a message, as over HTTP.
const (
	HeaderAuthorization  = "Authorization"
	HeaderTenant         = httpapi.TenantHeader
	HeaderIdempotencyKey = "Idempotency-Key"
)

// Headers of a refused message's copy in the rejected queue.
const (
	HeaderErrorCode    = "x-error-code"
	HeaderErrorMessage = "x-error-message"
	// HeaderErrorStatus is the HTTP status the route would have answered.
	HeaderErrorStatus = "x-error-status"
)

// authenticator checks a producer's credentials (httpapi.Server).
type authenticator interface {
	AuthenticatePublisher(ctx context.Context, authorization, tenantRef string) (tenant.Principal, error)
}

// publisher commits events (event.Service).
type publisher interface {
	Publish(ctx context.Context, tenantID uuid.UUID, r event.Request) (event.Result, error)
}

// limiter takes publish tokens (ratelimit.Limiter).
type limiter interface {
	TakePublish(ctx context.Context, now time.Time, tenantID string, rps, burst int) (ok bool, wait time.Duration, err error)
}

// Config tunes a Source.
type Config struct {
	// Prefetch is how many messages the source holds and publishes at
	// once.
	Prefetch int
	// MaxPayloadBytes is the largest body accepted (api.max_payload_bytes).
	MaxPayloadBytes int64
	// Grace is how long publishes in flight may finish after shutdown.
	Grace time.Duration
}

// Source consumes the publish queue.
type Source struct {
	cfg      Config
	topo     queue.Topology
	pub      *queue.Publisher
	auth     authenticator
	events   publisher
	limits   limiter
	log      *slog.Logger
	consumer *queue.Consumer
	// stopping is closed when Run's ctx ends.
	stopping <-chan struct{}
	// retryBase and retryMax bound the pause before publishing again
	// after our own failure.
	retryBase, retryMax time.Duration
}

// New returns a Source consuming topo's publish queue on conn, refusing to
// its rejected queue through pub. limits may be nil (no rate limit).
func New(cfg Config, conn *queue.Conn, topo queue.Topology, pub *queue.Publisher, auth authenticator, events publisher,
	limits limiter, log *slog.Logger) *Source {
	s := &Source{cfg: cfg, topo: topo, pub: pub, auth: auth, events: events, limits: limits,
		log: log.With("source", "amqp"), retryBase: 100 * time.Millisecond, retryMax: 5 * time.Second}
	s.consumer = queue.NewConsumer(conn, topo, pub, queue.ConsumerConfig{
		Queues: []string{topo.PublishQueue()}, Prefetch: cfg.Prefetch, Concurrency: cfg.Prefetch, Grace: cfg.Grace,
		Foreign: true, PoisonQueue: topo.PublishRejectedQueue(), PoisonStrip: []string{HeaderAuthorization},
	}, s.handle)
	return s
}

// Run consumes until ctx ends, then lets the publishes in flight finish
// within the grace period; what is left, and the messages waiting for a
// publish token or for the database, go back to the queue. Call it once.
func (s *Source) Run(ctx context.Context) error {
	s.stopping = ctx.Done()
	return s.consumer.Run(ctx)
}

// Check is a readiness check: the source is subscribed to its queue.
func (s *Source) Check(ctx context.Context) error { return s.consumer.Check(ctx) }

// handle publishes one message and decides its fate (see the package
// comment).
func (s *Source) handle(ctx context.Context, d amqp.Delivery) queue.Disposition {
	start := time.Now()
	outcome := "error"
	defer func() {
		metrics.PublishRequests.WithLabelValues(outcome).Inc()
		metrics.PublishDuration.Observe(time.Since(start).Seconds())
	}()
	if n := deliveries(d); n >= s.topo.MaxDeliveries()-1 {
		// The broker would dead-letter it at the next return, with every
		// header, the producer's credential included.
		outcome = "error"
		return s.keep(ctx, d, 500, "redelivery_limit",
			fmt.Sprintf("not published: the api took this message %d times without settling it (it stopped each time)", n))
	}
	var (
		p   tenant.Principal
		req event.Request
		res event.Result
	)
	err := s.again(ctx, func() (err error) {
		p, req, err = s.read(ctx, d)
		return err
	})
	if err == nil {
		if !s.waitForToken(ctx, p) {
			return queue.Requeue
		}
		err = s.again(ctx, func() (err error) {
			res, err = s.events.Publish(ctx, p.TenantID, req)
			return err
		})
	}
	switch {
	case errors.Is(err, errStopping):
		return queue.Requeue
	case err != nil:
		return s.refuse(ctx, d, err, &outcome)
	case res.Replayed:
		outcome = "replayed"
	default:
		outcome = "accepted"
	}
	return queue.Ack
}

// errStopping ends a wait cut off by shutdown.
var errStopping = errors.New("intake: stopping")

// again runs f until it succeeds or fails with the producer's error
// (which it returns), pausing longer each time after our own failures
// (the database or Redis down), or until the source stops (errStopping).
func (s *Source) again(ctx context.Context, f func() error) error {
	for pause := s.retryBase; ; pause = min(pause*2, s.retryMax) {
		err := f()
		if err == nil {
			return nil
		}
		if _, _, _, theirs := httpapi.PublishProblem(err); theirs {
			return err
		}
		s.log.Warn("publish from the queue failed; trying again", "error", err, "retry_in", pause.String())
		if !s.sleep(ctx, pause) {
			return errStopping
		}
	}
}

// read authenticates d and parses its body into the request to publish.
func (s *Source) read(ctx context.Context, d amqp.Delivery) (tenant.Principal, event.Request, error) {
	p, err := s.auth.AuthenticatePublisher(ctx, header(d, HeaderAuthorization), header(d, HeaderTenant))
	if err != nil {
		return tenant.Principal{}, event.Request{}, err
	}
	req, err := httpapi.ParsePublish(d.Body, s.cfg.MaxPayloadBytes, header(d, HeaderIdempotencyKey))
	if err != nil {
		return tenant.Principal{}, event.Request{}, err
	}
	if req.IdempotencyKey == "" && d.MessageId != "" {
		req.IdempotencyKey, req.OwnKey = d.MessageId, true
	}
	if req.CorrelationID = header(d, "X-Correlation-Id"); req.CorrelationID == "" {
		req.CorrelationID = d.CorrelationId
	}
	return p, req, nil
}

// waitForToken waits until the tenant's publish bucket gives a token and
// reports true, or false when ctx ends first. When Redis does not answer
// the publish goes ahead, as over HTTP.
func (s *Source) waitForToken(ctx context.Context, p tenant.Principal) bool {
	if s.limits == nil {
		return true
	}
	for {
		ok, wait, err := s.limits.TakePublish(ctx, time.Now(), p.TenantID.String(), p.PublishLimit.RequestsPerSecond, p.PublishLimit.Burst)
		if ok || err != nil {
			return true
		}
		metrics.RateLimitHits.WithLabelValues("publish").Inc()
		if !s.sleep(ctx, max(wait, time.Millisecond)) {
			return false
		}
	}
}

// refuse keeps d in the rejected queue with the answer the HTTP route
// would give err (see keep).
func (s *Source) refuse(ctx context.Context, d amqp.Delivery, err error, outcome *string) queue.Disposition {
	status, code, message, theirs := httpapi.PublishProblem(err)
	if !theirs {
		s.log.Error("message from the publish queue failed", "error", err)
	}
	*outcome = refusedOutcome(err, status)
	return s.keep(ctx, d, status, code, message)
}

// keep puts a copy of d in the rejected queue with status, code and
// message, and acknowledges d; should that copy not be confirmed, d goes
// back to the queue.
func (s *Source) keep(ctx context.Context, d amqp.Delivery, status int, code, message string) queue.Disposition {
	headers := amqp.Table{}
	for k, v := range d.Headers {
		// The credential stays with the producer; the rest of what it
		// sent is kept for it to inspect.
		if k != HeaderAuthorization && k != "x-delivery-count" {
			headers[k] = v
		}
	}
	headers[HeaderErrorCode] = code
	headers[HeaderErrorMessage] = message
	headers[HeaderErrorStatus] = int32(status) //nolint:gosec // an HTTP status
	m := queue.Message{ID: d.MessageId, Body: d.Body, Headers: headers}
	if perr := s.pub.PublishToQueue(ctx, s.topo.PublishRejectedQueue(), m); perr != nil {
		s.log.Warn("refused message not kept; returned to the publish queue", "error", perr)
		return queue.Requeue
	}
	return queue.Ack
}

// refusedOutcome is the publish_requests_total outcome of a refusal.
func refusedOutcome(err error, status int) string {
	switch {
	case errors.Is(err, event.ErrIdempotencyConflict):
		return "conflict"
	case status == 413:
		return "too_large"
	case status < 500:
		return "invalid"
	}
	return "error"
}

// deliveries is how often the broker handed d out before, as its quorum
// queue counts (x-delivery-count, absent the first time).
func deliveries(d amqp.Delivery) int {
	switch v := d.Headers["x-delivery-count"].(type) {
	case int64:
		return int(v)
	case int32:
		return int(v)
	}
	return 0
}

// header reads a string header of d.
func header(d amqp.Delivery, name string) string {
	switch v := d.Headers[name].(type) {
	case string:
		return v
	case []byte:
		return string(v)
	}
	return ""
}

// sleep waits d and reports true, or false when the source stops
// (Run's ctx ends) or ctx ends first.
func (s *Source) sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-s.stopping:
		return false
	case <-t.C:
		return true
	}
}
