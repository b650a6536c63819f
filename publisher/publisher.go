// Package publisher lets a Go program publish hookline events in-process,
// without going through the HTTP API: PublishEvent runs the same code path
// as POST /v1/events (validation, idempotency, fan-out, the durable commit,
// the outbox). It is the only package outside internal/, so that producers
// in other modules can import it.
package publisher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"

	"github.com/hookline/hookline/internal/db"
	"github.com/hookline/hookline/internal/event"
	"github.com/hookline/hookline/internal/fielderr"
	"github.com/hookline/hookline/internal/outbox"
	"github.com/hookline/hookline/internal/queue"
	"github.com/hookline/hookline/internal/redisclient"
	"github.com/hookline/hookline/internal/supervisor"
	"github.com/hookline/hookline/internal/tracing"
)

// Config says where the hookline deployment's services are.
type Config struct {
	// DatabaseURL is the hookline Postgres database (required).
	DatabaseURL string
	// AMQPURL is the RabbitMQ broker (required), or a comma-separated list
	// of its cluster's nodes, as the deployment's AMQP_URL. Events are
	// accepted while it is down and enqueued once it is back.
	AMQPURL string
	// AMQPPrefix is the deployment's queue prefix. Default "hookline".
	AMQPPrefix string
	// AMQPShards is the deployment's amqp.shards (AMQP_SHARDS), so that
	// a webhook's deliveries go to the shard its other deliveries take.
	// Default 1.
	AMQPShards int
	// RedisURL enables the idempotency fast path (optional), in the form
	// of RedisMode (the deployment's redis.url).
	RedisURL string
	// RedisMode is the deployment's redis.mode: "single" (the default),
	// "cluster" or "sentinel".
	RedisMode string
	// RedisPrefix is the deployment's Redis key prefix. Default "hookline:".
	RedisPrefix string
	// Logger receives warnings (broker outages). Default: discarded.
	Logger *slog.Logger
	// TracerProvider, when set, traces every PublishEvent: a span that is
	// a child of the span in the context PublishEvent is given, and whose
	// trace the event's deliveries continue in the workers (a program using
	// the global provider passes otel.GetTracerProvider()). Default: no
	// tracing.
	TracerProvider trace.TracerProvider
}

// Event is one event to publish: the publish_event call.
type Event struct {
	// TenantID is the tenant whose webhooks receive the event.
	TenantID uuid.UUID
	// EventType names the event, such as "order.created".
	EventType string
	// Data is the payload: a value that encodes to a JSON object, or a
	// json.RawMessage holding one.
	Data any
	// Source optionally names the producer.
	Source string
	// IdempotencyKey deduplicates repeats; generated (idk_<uuid>) when empty.
	IdempotencyKey string
	// Priority is "high", "normal" (default) or "low".
	Priority string
}

// Result is the accepted event.
type Result struct {
	ID             uuid.UUID
	IdempotencyKey string
	Deliveries     int
	CreatedAt      time.Time
	// Replayed is true when the idempotency key was seen before with the
	// same event: nothing was created, the original is returned.
	Replayed bool
}

// ErrIdempotencyConflict is returned for a key used before with a
// different event.
var ErrIdempotencyConflict = event.ErrIdempotencyConflict

// InvalidError names the field of an Event that is not acceptable.
type InvalidError = fielderr.Error

// Publisher publishes events. It is safe for concurrent use.
type Publisher struct {
	pool   *pgxpool.Pool
	rdb    redis.UniversalClient
	events *event.Service
	parts  *supervisor.Group
}

// Open connects to the deployment and starts the background parts that get
// committed deliveries onto RabbitMQ. Close it when done. It uses up to 12
// Postgres connections: 8 as it needs them, and 4 for its group commit,
// opened at once and kept open.
func Open(ctx context.Context, cfg Config) (*Publisher, error) {
	if cfg.DatabaseURL == "" || cfg.AMQPURL == "" {
		return nil, errors.New("publisher: DatabaseURL and AMQPURL are required")
	}
	if cfg.AMQPPrefix == "" {
		cfg.AMQPPrefix = "hookline"
	}
	if cfg.RedisPrefix == "" {
		cfg.RedisPrefix = "hookline:"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	pool, err := db.Open(ctx, cfg.DatabaseURL, 8)
	if err != nil {
		return nil, fmt.Errorf("publisher: %w", err)
	}
	p := &Publisher{pool: pool}
	if cfg.RedisURL != "" {
		rdb, err := redisclient.New(cfg.RedisMode, cfg.RedisURL)
		if err != nil {
			pool.Close()
			return nil, fmt.Errorf("publisher: %w", err)
		}
		p.rdb = rdb
	}
	conn := queue.NewConn(cfg.AMQPURL, cfg.Logger)
	pub := queue.NewPublisher(conn, queue.Topology{Prefix: cfg.AMQPPrefix, Shards: cfg.AMQPShards}, 2)
	dispatcher := outbox.NewDispatcher(pool, pub, cfg.Logger)
	relay := outbox.NewRelay(pool, pub, cfg.Logger)
	p.events = event.NewService(pool, p.rdb, cfg.RedisPrefix, dispatcher, cfg.Logger).WithTracer(tracing.NewTracer(cfg.TracerProvider))

	// Stopped in reverse: the group commit first, the broker connection
	// last.
	p.parts = supervisor.New(cfg.Logger)
	p.parts.Go("rabbitmq", conn.Run)
	p.parts.Go("outbox relay", relay.Run)
	p.parts.Go("outbox dispatcher", dispatcher.Run)
	p.parts.Go("group commit", p.events.Run)
	return p, nil
}

// PublishEvent accepts an event. It returns once the event and its
// deliveries are committed to Postgres; they reach RabbitMQ right after (or,
// during a broker outage, once it is back). With Config.TracerProvider set,
// the publish continues the trace of the span in ctx.
func (p *Publisher) PublishEvent(ctx context.Context, e Event) (Result, error) {
	data, ok := e.Data.(json.RawMessage)
	if !ok {
		raw, err := json.Marshal(e.Data)
		if err != nil {
			return Result{}, fielderr.New("data", "cannot be encoded as JSON: %v", err)
		}
		data = raw
	}
	res, err := p.events.Publish(ctx, e.TenantID, event.Request{
		EventType: e.EventType, Data: data, Source: e.Source, IdempotencyKey: e.IdempotencyKey, Priority: e.Priority,
	})
	if err != nil {
		return Result{}, err
	}
	return Result{ID: res.ID, IdempotencyKey: res.IdempotencyKey, Deliveries: res.Deliveries,
		CreatedAt: res.CreatedAt, Replayed: res.Replayed}, nil
}

// Close stops the background parts (publishing what is buffered, for up to
// closeWithin) and releases the connections. It returns the first error of
// a part: one that failed while the publisher ran, or did not stop in time.
func (p *Publisher) Close() error {
	err := p.parts.Stop(closeWithin)
	if p.rdb != nil {
		_ = p.rdb.Close()
	}
	p.pool.Close()
	return err
}

// closeWithin bounds Close: the outbox's last enqueues and the broker's
// confirms.
const closeWithin = 10 * time.Second

// Check fails once a background part of the publisher has stopped on its
// own (the publisher then no longer gets deliveries onto RabbitMQ); an
// embedding process can make it part of its readiness.
func (p *Publisher) Check(ctx context.Context) error { return p.parts.Check(ctx) }
