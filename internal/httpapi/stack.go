package httpapi

import (
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/hookline/hookline/internal/breaker"
	"github.com/hookline/hookline/internal/config"
	"github.com/hookline/hookline/internal/console"
	"github.com/hookline/hookline/internal/dlq"
	"github.com/hookline/hookline/internal/event"
	"github.com/hookline/hookline/internal/history"
	"github.com/hookline/hookline/internal/outbox"
	"github.com/hookline/hookline/internal/queue"
	"github.com/hookline/hookline/internal/ratelimit"
	"github.com/hookline/hookline/internal/secret"
	"github.com/hookline/hookline/internal/supervisor"
	"github.com/hookline/hookline/internal/tenant"
	"github.com/hookline/hookline/internal/tracing"
	"github.com/hookline/hookline/internal/webhook"
)

// Stack is the api process built on its connections: the publish path (the
// publisher, the outbox dispatcher and relay, the group commit) and the
// collaborators of its Server. The api command, the tests and the load
// programs all build the api with NewStack, so that they run the same one.
type Stack struct {
	Publisher  *queue.Publisher
	Dispatcher *outbox.Dispatcher
	Relay      *outbox.Relay
	Events     *event.Service
	// Deps are the Server's collaborators, for New, but for Checks: the
	// caller knows what the process's readiness depends on (the
	// Publisher's Check among them).
	Deps Deps
}

// publisherChannels is the number of confirm-mode channels the api
// publishes on.
const publisherChannels = 4

// NewStack builds the api on pool, rdb and amqp: the queue topology of
// cfg.AMQP.Prefix, the Redis keys under cfg.Redis.KeyPrefix, webhook
// secrets sealed with cfg.Security.SecretKeys, and the console served.
// The caller runs amqp and Parts and closes the connections.
func NewStack(cfg config.Config, pool *pgxpool.Pool, rdb redis.UniversalClient, amqp *queue.Conn, log *slog.Logger) (*Stack, error) {
	keys, err := secret.FromConfig(cfg.Security.SecretKeys)
	if err != nil {
		return nil, err
	}
	pub := queue.NewPublisher(amqp, queue.Topology{Prefix: cfg.AMQP.Prefix, Shards: cfg.AMQP.Shards}, publisherChannels)
	dispatcher := outbox.NewDispatcher(pool, pub, log)
	events := event.NewService(pool, rdb, cfg.Redis.KeyPrefix, dispatcher, log).WithCommitWindow(cfg.API.CommitWindow.D())
	return &Stack{
		Publisher:  pub,
		Dispatcher: dispatcher,
		Relay:      outbox.NewRelay(pool, pub, log),
		Events:     events,
		Deps: Deps{
			Config:     cfg,
			Log:        log,
			Tenants:    tenant.NewStore(pool),
			Webhooks:   webhook.NewStore(pool, webhook.WithKeyring(keys), webhook.WithMaxPerTenant(cfg.API.MaxWebhooksPerTenant)),
			Events:     events,
			Deliveries: history.NewReader(pool),
			DLQ:        dlq.NewStore(pool, dispatcher),
			Breaker:    breaker.New(rdb, cfg.Redis.KeyPrefix),
			Overrides:  breaker.NewOverrides(pool),
			Limits:     ratelimit.New(rdb, cfg.Redis.KeyPrefix),
			Console:    console.Config{DB: pool, Keys: keys},
		},
	}, nil
}

// WithTracer traces the api with t: publishes, replays and retries of
// exhausted deliveries are spans, children of the trace context a request
// carries (traceparent and tracestate headers). Call it before New.
func (s *Stack) WithTracer(t tracing.Tracer) *Stack {
	s.Events.WithTracer(t)
	s.Deps.DLQ.WithTracer(t)
	s.Deps.Tracer = t
	return s
}

// Parts are the publish path's long-running parts in the order they start:
// the relay, the dispatcher, then the group commit that feeds it, so that
// stopping in reverse flushes each into the next. The broker connection
// must outlast them, and the HTTP server must stop before them.
func (s *Stack) Parts() []supervisor.Part {
	return []supervisor.Part{
		{Name: "outbox relay", Run: s.Relay.Run},
		{Name: "outbox dispatcher", Run: s.Dispatcher.Run},
		{Name: "group commit", Run: s.Events.Run},
	}
}
