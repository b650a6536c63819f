package event

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/hookline/hookline/internal/eventlog"
	"github.com/hookline/hookline/internal/metrics"
	"github.com/hookline/hookline/internal/tracing"
	"github.com/hookline/hookline/internal/webhook"
	"github.com/hookline/hookline/internal/wire"
)

// dispatcher takes committed deliveries to the broker.
type dispatcher interface {
	Enqueue(tasks ...wire.Task)
}

// Service publishes and reads events.
type Service struct {
	pool     *pgxpool.Pool
	redis    redis.UniversalClient
	prefix   string
	dispatch dispatcher
	log      *slog.Logger
	commits  *committer
	// cacheDownUntil (unix nanoseconds) pauses the Redis fast path.
	cacheDownUntil atomic.Int64
	// tracer traces publishes and replays; the zero Tracer: tracing off.
	tracer tracing.Tracer
	// filters holds the tenants' webhook filters for fan-out.
	filters *filterViews
}

// NewService returns a Service. rdb may be nil (no Redis fast path).
func NewService(pool *pgxpool.Pool, rdb redis.UniversalClient, redisPrefix string, d dispatcher, log *slog.Logger) *Service {
	return &Service{pool: pool, redis: rdb, prefix: redisPrefix, dispatch: d, log: log, commits: newCommitter(pool, log),
		filters: newFilterViews(pool, log)}
}

// WithCommitWindow sets how long a publish waits for other events to
// share its commit (DefaultCommitWindow unless set): a longer window makes
// fewer, larger commits, less work for Postgres per event, at the cost of
// up to that long more before each publish is answered. 0: no publish
// waits for company, and a commit takes only the events already waiting.
// Call it before Run.
func (s *Service) WithCommitWindow(d time.Duration) *Service {
	s.commits.window(d)
	return s
}

// WithTracer makes the service trace publishes and replays with t. Call it
// before Run.
func (s *Service) WithTracer(t tracing.Tracer) *Service {
	s.tracer = t
	return s
}

// publishSQL inserts a batch of events and fans them out in one statement,
// hence one transaction: every event of the batch is committed with all its
// deliveries, or nothing is. Events whose idempotency key another event
// holds (eventlog.KeysSQL), or that repeat one within the batch, are
// skipped and return no row. $21 is the id each key names (claimedID):
// an event whose key is its own generated one (the id is its own) stores
// no key, and one whose key is another event's generated key is skipped
// while the tenant's event of that id holds it. Each
// inserted event returns one row of its own and one per delivery (a union,
// not a join of the two lists, which Postgres would run as a nested loop:
// events times deliveries). Event types are matched by webhook.FilterSQL;
// payload filters were evaluated before (see filters.go): each event names
// the view of its tenant's filtered webhooks it was evaluated against
// ($13; views $14-$15, their webhooks' versions $16-$18) and the webhooks
// that refused it ($19-$20). The events of a stale view are left out, and
// the view is returned in the fourth column.
var publishSQL = publishStatement(true)

// publishOwnKeysSQL is publishSQL for a batch whose every event has its own
// generated key (no key given, the common case): with no key to look up
// or to store, it leaves out the lookup of claimed events and the two
// inserts into event_keys, whose plan nodes Postgres would otherwise set
// up at every execution for no row (22-57 us of a commit's 440-720 of
// Postgres CPU, measured interleaved with publishSQL on one connection).
// It takes the same parameters and returns the same rows.
var publishOwnKeysSQL = publishStatement(false)

// publishStatement is publishSQL, or without givenKeys publishOwnKeysSQL.
func publishStatement(givenKeys bool) string {
	fresh := `fresh AS (
    SELECT id, tenant_id, idempotency_key, claim FROM input
    WHERE NOT EXISTS (SELECT 1 FROM stale WHERE stale.view = input.view)`
	inserted := `SELECT id FROM fresh`
	if givenKeys {
		fresh += `
      AND (claim IS NULL OR claim = id OR NOT EXISTS (SELECT 1 FROM events e
          WHERE e.id = input.claim AND e.tenant_id = input.tenant_id AND e.idempotency_key = input.idempotency_key))
), ` + eventlog.KeysSQL("(SELECT * FROM fresh WHERE claim IS DISTINCT FROM id) AS given")
		inserted = `SELECT event_id FROM keyed UNION ALL SELECT id FROM fresh WHERE claim = id`
	} else {
		fresh += `
)`
	}
	return `WITH input AS (
    SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::text[], $5::text[], $6::bytea[],
                         $7::text[], $8::text[], $9::text[], $10::timestamptz[], $11::text[], $12::text[], $13::int[],
                         $21::uuid[])
        AS t(id, tenant_id, event_type, source, idempotency_key, request_hash, priority, data, correlation_id, created_at,
             traceparent, tracestate, view, claim)
), views AS (
    SELECT * FROM unnest($14::int[], $15::uuid[]) AS v(view, tenant_id)
), known AS (
    SELECT * FROM unnest($16::int[], $17::uuid[], $18::timestamptz[]) AS k(view, webhook_id, updated_at)
), ` + staleViewsSQL + `, refused AS (
    SELECT * FROM unnest($19::uuid[], $20::uuid[]) AS r(event_id, webhook_id)
), ` + fresh + `, ev AS (
    INSERT INTO events (id, tenant_id, event_type, source, idempotency_key, request_hash, priority, data, correlation_id, created_at,
                        traceparent, tracestate)
    SELECT id, tenant_id, event_type, source, idempotency_key, request_hash, priority, data::json, correlation_id, created_at,
           nullif(traceparent, ''), nullif(tracestate, '')
    FROM input
    WHERE id IN (` + inserted + `)
    RETURNING id, tenant_id, event_type, priority, created_at
), ins AS (
    INSERT INTO deliveries (id, tenant_id, event_id, webhook_id, priority, created_at, order_key)
    SELECT uuidv7(), ev.tenant_id, ev.id, w.id, ev.priority, ev.created_at, ` + webhook.OrderKeySQL("w", "ev.event_type") + `
    FROM ev JOIN webhooks w ON w.tenant_id = ev.tenant_id AND w.active AND w.deleted_at IS NULL
    WHERE ` + webhook.FilterSQL("w.events", "ev.event_type") + `
      AND (w.filter = '' OR NOT EXISTS (SELECT 1 FROM refused r WHERE r.event_id = ev.id AND r.webhook_id = w.id))
    RETURNING id, event_id, webhook_id
)
SELECT id, NULL::uuid, NULL::uuid, NULL::int FROM ev
UNION ALL
SELECT event_id, id, webhook_id, NULL FROM ins
UNION ALL
SELECT NULL, NULL, NULL, view FROM stale`
}

// staleViewsSQL is the CTE stale: the views (of CTE views: view,
// tenant_id) that do not hold every active filtered webhook of their
// tenant at its current version (CTE known: view, webhook_id, updated_at).
const staleViewsSQL = `stale AS (
    SELECT DISTINCT v.view FROM views v JOIN webhooks w ON w.tenant_id = v.tenant_id
    WHERE w.filter <> '' AND w.deleted_at IS NULL AND w.active
      AND NOT EXISTS (SELECT 1 FROM known k WHERE k.view = v.view AND k.webhook_id = w.id AND k.updated_at = w.updated_at)
)`

const existingColumns = `e.id, e.request_hash, e.event_type, e.priority, e.created_at,
    (SELECT count(*) FROM deliveries d WHERE d.event_id = e.id AND d.retry_of IS NULL)`

var (
	existingSQL = eventlog.OwnerSQL(existingColumns)
	// existingOwnSQL finds the tenant's ($1) event of id $3 when its
	// generated key is $2.
	existingOwnSQL = `SELECT ` + existingColumns + ` FROM events e WHERE e.tenant_id = $1 AND e.idempotency_key = $2 AND e.id = $3`
)

// Publish accepts an event for tenantID: validates it, returns the original
// event for a repeated idempotency key with the same request, refuses one
// with a different request (ErrIdempotencyConflict), or commits the event
// with one delivery per matching active webhook and hands those to the
// outbox. It returns only after the commit, which it shares with the other
// events published at the same moment (see committer).
//
// With tracing on, the publish is a span, a child of the span in ctx (the
// producer's, when it sent one), and the event stores that span's trace
// context for the attempts of its deliveries to continue.
func (s *Service) Publish(ctx context.Context, tenantID uuid.UUID, r Request) (Result, error) {
	ctx, span := s.tracer.Start(ctx, "hookline.publish", trace.SpanKindProducer)
	defer span.End()
	res, err := s.publish(ctx, tenantID, r)
	if span.IsRecording() {
		span.SetAttributes(tracing.TenantID.String(tenantID.String()), tracing.EventType.String(r.EventType))
		if err == nil {
			span.SetAttributes(tracing.EventID.String(res.ID.String()), attribute.Int("hookline.deliveries", res.Deliveries),
				attribute.Bool("hookline.idempotent_replay", res.Replayed))
		}
		tracing.Fail(span, err)
	}
	return res, err
}

func (s *Service) publish(ctx context.Context, tenantID uuid.UUID, r Request) (Result, error) {
	span := trace.SpanFromContext(ctx)
	givenKey := r.IdempotencyKey != "" && !r.OwnKey
	hash, err := normalize(&r)
	if err != nil {
		return Result{}, err
	}
	span.AddEvent("validated")
	if givenKey {
		res, ok, err := s.cached(ctx, tenantID, r.IdempotencyKey, hash)
		if span.IsRecording() {
			span.AddEvent("idempotency_checked", trace.WithAttributes(attribute.Bool("hookline.cache_hit", ok)))
		}
		if ok || err != nil {
			return res, err
		}
	}
	p := newPending(tenantID, r, hash, time.Now().UTC().Truncate(time.Microsecond))
	if p.req.CorrelationID == "" {
		p.req.CorrelationID = p.id.String()
	}
	if s.tracer.On() {
		p.trace = tracing.ParentOf(ctx)
	}
	if err := s.commit(ctx, p); err != nil {
		return Result{}, err
	}
	span.AddEvent("committed")
	if !p.inserted {
		return s.existing(ctx, tenantID, p.req.IdempotencyKey, hash)
	}
	s.dispatch.Enqueue(p.tasks...)
	span.AddEvent("enqueued")
	metrics.DeliveriesCreated.Add(float64(len(p.tasks)))
	res := Result{ID: p.id, IdempotencyKey: p.req.IdempotencyKey, EventType: r.EventType, Priority: r.Priority,
		Deliveries: len(p.tasks), CreatedAt: p.createdAt}
	if givenKey {
		s.remember(ctx, tenantID, res, hash)
	}
	return res, nil
}

// maxStaleViews bounds how often one publish finds the view of its
// tenant's filters stale: each time, a webhook's filter changed between
// the view's load and the commit.
const maxStaleViews = 3

// commit evaluates the tenant's webhook filters on p and submits it to the
// group commit; again, with the view loaded afresh, while the view it was
// evaluated against turns out stale.
func (s *Service) commit(ctx context.Context, p *pending) error {
	for attempt := 0; ; attempt++ {
		view, err := s.filters.view(ctx, p.tenantID, attempt > 0)
		if err != nil {
			return err
		}
		p.view = view
		p.refused = view.refused(p.req.EventType, p.req.Source, p.req.Data, s.log)
		if err := s.commits.submit(ctx, p); err != nil {
			return err
		}
		if !p.stale {
			return nil
		}
		if attempt == maxStaleViews {
			return fmt.Errorf("publish: the tenant's webhook filters changed at each of %d attempts", attempt+1)
		}
	}
}

// Run commits published events until ctx ends, then commits what is still
// waiting. Publish blocks while it does not run.
func (s *Service) Run(ctx context.Context) error {
	return s.commits.run(ctx)
}

// existing answers a key that is already taken: the original event when the
// request is the same, ErrIdempotencyConflict otherwise.
func (s *Service) existing(ctx context.Context, tenantID uuid.UUID, key string, hash []byte) (Result, error) {
	var res Result
	var storedHash []byte
	scan := func(row pgx.Row) error {
		return row.Scan(&res.ID, &storedHash, &res.EventType, &res.Priority, &res.CreatedAt, &res.Deliveries)
	}
	err := pgx.ErrNoRows
	if id, ok := claimedID(key); ok {
		err = scan(s.pool.QueryRow(ctx, existingOwnSQL, tenantID, key, id))
	}
	if errors.Is(err, pgx.ErrNoRows) {
		err = scan(s.pool.QueryRow(ctx, existingSQL, tenantID, key))
	}
	if errors.Is(err, pgx.ErrNoRows) {
		// The conflicting row vanished (deleted with its tenant): try again.
		return Result{}, fmt.Errorf("idempotency key %q conflicted but no event holds it", key)
	}
	if err != nil {
		return Result{}, fmt.Errorf("load event by idempotency key: %w", err)
	}
	if !bytes.Equal(storedHash, hash) {
		return Result{}, ErrIdempotencyConflict
	}
	res.IdempotencyKey = key
	res.CreatedAt = res.CreatedAt.UTC()
	res.Replayed = true
	s.remember(ctx, tenantID, res, hash)
	return res, nil
}

// The Redis fast path remembers accepted producer-given keys for 24 hours so
// that repeats are answered without a database round trip (generated keys
// cannot repeat and skip it). event_keys' primary key (eventlog.KeysSQL)
// stays the authority: when Redis is down or has forgotten, the database
// answers the same.
const cacheTTL = 24 * time.Hour

// cacheTimeout bounds a fast-path call; after a failure the fast path is
// skipped for cachePause so that a Redis outage costs publishers nothing.
const (
	cacheTimeout = 100 * time.Millisecond
	cachePause   = 5 * time.Second
)

type cachedResult struct {
	Result
	Hash []byte `json:"h"`
}

func (s *Service) cacheKey(tenantID uuid.UUID, key string) string {
	return s.prefix + "idem:" + tenantID.String() + ":" + key
}

func (s *Service) cacheUsable() bool {
	return s.redis != nil && time.Now().UnixNano() >= s.cacheDownUntil.Load()
}

func (s *Service) cacheFailed() {
	metrics.IdempotencyCache.WithLabelValues("error").Inc()
	s.cacheDownUntil.Store(time.Now().Add(cachePause).UnixNano())
}

func (s *Service) cached(ctx context.Context, tenantID uuid.UUID, key string, hash []byte) (Result, bool, error) {
	if !s.cacheUsable() {
		return Result{}, false, nil
	}
	ctx, cancel := context.WithTimeout(ctx, cacheTimeout)
	defer cancel()
	raw, err := s.redis.Get(ctx, s.cacheKey(tenantID, key)).Bytes()
	switch {
	case errors.Is(err, redis.Nil):
		metrics.IdempotencyCache.WithLabelValues("miss").Inc()
		return Result{}, false, nil
	case err != nil:
		s.cacheFailed()
		return Result{}, false, nil
	}
	var c cachedResult
	if err := json.Unmarshal(raw, &c); err != nil {
		return Result{}, false, nil
	}
	metrics.IdempotencyCache.WithLabelValues("hit").Inc()
	if !bytes.Equal(c.Hash, hash) {
		return Result{}, true, ErrIdempotencyConflict
	}
	c.IdempotencyKey = key
	c.Replayed = true
	return c.Result, true, nil
}

func (s *Service) remember(ctx context.Context, tenantID uuid.UUID, res Result, hash []byte) {
	if !s.cacheUsable() {
		return
	}
	raw, err := json.Marshal(cachedResult{Result: res, Hash: hash})
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, cacheTimeout)
	defer cancel()
	if err := s.redis.Set(ctx, s.cacheKey(tenantID, res.IdempotencyKey), raw, cacheTTL).Err(); err != nil {
		s.cacheFailed()
	}
}
