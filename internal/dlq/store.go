package dlq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/hookline/hookline/internal/eventlog"
	"github.com/hookline/hookline/internal/fielderr"
	"github.com/hookline/hookline/internal/history"
	"github.com/hookline/hookline/internal/tracing"
	"github.com/hookline/hookline/internal/webhook"
	"github.com/hookline/hookline/internal/wire"
)

// Errors of retries and batch operations. The API turns them into 404 and
// 409 answers.
var (
	ErrNotFound      = errors.New("not found")
	ErrNotExhausted  = errors.New("delivery is not exhausted: only exhausted deliveries can be retried")
	ErrRetryInFlight = errors.New("a retry of this delivery is already in flight")
	// ErrAlreadyResolved: the event has reached the webhook since (a retry
	// succeeded); another retry would deliver it again.
	ErrAlreadyResolved = errors.New("the delivery is resolved: a retry of it succeeded; retry with force to deliver the event again")
	ErrInactive        = errors.New("the webhook is inactive: activate it before retrying its deliveries")
	ErrPayloadPruned   = errors.New("the event's payload was removed by retention: it cannot be delivered again")
	ErrFinished        = errors.New("the batch operation has already finished")
	// ErrFilteredOut: the webhook's payload filter, as it is now, does not
	// let the event through.
	ErrFilteredOut = errors.New("the webhook's filter does not match the event: change the filter to retry the delivery")
)

// dispatcher takes committed deliveries to the broker (outbox.Dispatcher).
type dispatcher interface {
	Enqueue(tasks ...wire.Task)
}

// Store is the API side of the DLQ: single retries and batch operations.
type Store struct {
	pool     *pgxpool.Pool
	dispatch dispatcher
	tracer   tracing.Tracer
	filters  filterCheck
}

// NewStore returns a Store that hands new deliveries to d.
func NewStore(pool *pgxpool.Pool, d dispatcher) *Store {
	return &Store{pool: pool, dispatch: d, filters: newFilterCheck()}
}

// WithTracer makes every single retry a span, linked to the trace of the
// event's publish (which the attempts of the new delivery continue).
func (s *Store) WithTracer(t tracing.Tracer) *Store {
	s.tracer = t
	return s
}

// checkPriority validates a retry priority; empty means normal.
func checkPriority(field string, p *string) error {
	switch *p {
	case "":
		*p = "normal"
	case "high", "normal", "low":
	default:
		return fielderr.New(field, "must be high, normal or low")
	}
	return nil
}

// retryTargetSQL reads what decides a retry. The entry is resolved when
// a delivery of its event to its webhook has succeeded: one of its
// retries, or a retry of one of those. The order key is the one fan-out
// gives a delivery of this event to the webhook as it is now
// (webhook.OrderKeySQL), so that the retry waits its turn like any other.
var retryTargetSQL = `SELECT d.status, d.event_id, d.created_at, e.correlation_id, e.data IS NULL,
    coalesce(e.traceparent, ''), coalesce(e.tracestate, ''),
    w.active, w.deleted_at IS NOT NULL,
    EXISTS (SELECT 1 FROM deliveries r WHERE r.retry_of = d.id AND r.status IN ('pending', 'retrying')),
    EXISTS (SELECT 1 FROM deliveries r WHERE r.event_id = d.event_id AND r.webhook_id = d.webhook_id
            AND r.status = 'succeeded'),
    ` + webhook.OrderKeySQL("w", "e.event_type") + `, ` + filterColumnsSQL + `
FROM deliveries d JOIN events e ON e.id = d.event_id JOIN webhooks w ON w.id = d.webhook_id
WHERE d.id = $1 AND d.tenant_id = $2 AND d.webhook_id = $3
FOR UPDATE OF d`

// insertRetrySQL stores a retry, unless the entry has one unfinished. Its
// id is taken by uuidv7() from Postgres's clock, as every delivery's is,
// which the unfinished floors and the sweeps rely on (package unfinished).
//
// An entry has at most one unfinished retry: whoever creates one (this,
// and a batch chunk) first locks the entry's row (retryTargetSQL,
// lockEntriesSQL), and looks for a retry in a statement after the lock,
// whose snapshot holds any retry committed by whoever held it before. No
// unique index is needed, so none spans the history.
const insertRetrySQL = `INSERT INTO deliveries (id, tenant_id, event_id, webhook_id, priority, retry_of, order_key)
SELECT uuidv7(), $1, $2, $3, $4, $5, $6
WHERE NOT EXISTS (SELECT 1 FROM deliveries r WHERE r.retry_of = $5 AND r.status IN ('pending', 'retrying'))
RETURNING id, created_at`

// RetryOptions adjust a retry.
type RetryOptions struct {
	// Priority is high, normal or low; empty means normal.
	Priority string
	// Force retries an entry that is already resolved (ErrAlreadyResolved
	// otherwise): the event is delivered again.
	Force bool
}

// retryTarget is what retryTargetSQL reads.
type retryTarget struct {
	status, correlation                         string
	eventID                                     uuid.UUID
	createdAt                                   time.Time
	pruned, active, deleted, inFlight, resolved bool
	orderKey                                    *string
	// trace is the trace context of the event's publish.
	trace tracing.Parent
	// filtered is the webhook's payload filter and the event it judges.
	filtered filteredEvent
}

// check returns why t cannot be retried, or nil.
func (t retryTarget) check(force bool) error {
	switch {
	case t.deleted:
		return ErrNotFound
	case wire.Status(t.status) != wire.Exhausted:
		return ErrNotExhausted
	case t.inFlight:
		return ErrRetryInFlight
	case t.resolved && !force:
		return ErrAlreadyResolved
	case !t.active:
		return ErrInactive
	case t.pruned:
		return ErrPayloadPruned
	}
	return nil
}

// Retry is RetryWith at priority, without force.
func (s *Store) Retry(ctx context.Context, tenantID, webhookID, deliveryID uuid.UUID, priority string) (uuid.UUID, error) {
	return s.RetryWith(ctx, tenantID, webhookID, deliveryID, RetryOptions{Priority: priority})
}

// RetryWith gives an exhausted delivery a new delivery of the same event
// (and so the same idempotency key) to the same webhook, linked to it by
// retry_of, and enqueues it. The exhausted delivery is left as it was. An
// entry already resolved is retried only with opts.Force; one whose
// webhook's payload filter, as it is now, refuses the event is not
// (ErrFilteredOut).
func (s *Store) RetryWith(ctx context.Context, tenantID, webhookID, deliveryID uuid.UUID, opts RetryOptions) (uuid.UUID, error) {
	ctx, span := s.tracer.Start(ctx, "hookline.retry", trace.SpanKindInternal)
	defer span.End()
	id, err := s.retry(ctx, tenantID, webhookID, deliveryID, opts)
	if span.IsRecording() {
		span.SetAttributes(tracing.TenantID.String(tenantID.String()), tracing.WebhookID.String(webhookID.String()),
			attribute.String("hookline.retry_of", deliveryID.String()))
		if err == nil {
			span.SetAttributes(tracing.DeliveryID.String(id.String()))
		}
		tracing.Fail(span, err)
	}
	return id, err
}

func (s *Store) retry(ctx context.Context, tenantID, webhookID, deliveryID uuid.UUID, opts RetryOptions) (uuid.UUID, error) {
	priority := opts.Priority
	if err := checkPriority("priority", &priority); err != nil {
		return uuid.Nil, err
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return uuid.Nil, fmt.Errorf("retry delivery: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit
	if _, err := tx.Exec(ctx, eventlog.HoldSQL); err != nil {
		return uuid.Nil, fmt.Errorf("retry delivery: %w", err)
	}

	var t retryTarget
	err = tx.QueryRow(ctx, retryTargetSQL, deliveryID, tenantID, webhookID).Scan(&t.status, &t.eventID, &t.createdAt,
		&t.correlation, &t.pruned, &t.trace.TraceParent, &t.trace.TraceState,
		&t.active, &t.deleted, &t.inFlight, &t.resolved, &t.orderKey,
		&t.filtered.expr, &t.filtered.eventType, &t.filtered.source, &t.filtered.data)
	if errors.Is(err, pgx.ErrNoRows) {
		return uuid.Nil, ErrNotFound
	}
	if err != nil {
		return uuid.Nil, fmt.Errorf("retry delivery: %w", err)
	}
	tracing.LinkFrom(ctx, t.trace)
	if err := t.check(opts.Force); err != nil {
		return uuid.Nil, err
	}
	if !s.filters.passes(t.filtered, webhookID) {
		return uuid.Nil, ErrFilteredOut
	}
	var id uuid.UUID
	var now time.Time
	err = tx.QueryRow(ctx, insertRetrySQL, tenantID, t.eventID, webhookID, priority, deliveryID, t.orderKey).Scan(&id, &now)
	if errors.Is(err, pgx.ErrNoRows) {
		return uuid.Nil, ErrRetryInFlight
	}
	if err != nil {
		return uuid.Nil, fmt.Errorf("retry delivery: %w", err)
	}
	if t.orderKey != nil {
		if err := lowerOrderFloors(ctx, tx, []string{*t.orderKey}, []wire.Task{{DeliveryID: id, EventID: t.eventID}}); err != nil {
			return uuid.Nil, err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return uuid.Nil, fmt.Errorf("retry delivery: %w", err)
	}
	s.dispatch.Enqueue(wire.Task{DeliveryID: id, EventID: t.eventID, WebhookID: webhookID, TenantID: tenantID,
		Priority: priority, Attempt: 1, CreatedAt: now, CorrelationID: t.correlation})
	return id, nil
}

// BatchRequest is the body of POST /v1/dlq/retry-batch.
type BatchRequest struct {
	Filter    history.DeadLetterFilter `json:"filter"`
	RateLimit struct {
		RequestsPerSecond int `json:"requests_per_second"`
	} `json:"rate_limit"`
	Priority string `json:"priority"`
}

// maxBatchRate bounds a batch's requests per second.
const maxBatchRate = 10_000

// Batch is a batch operation as the API shows it.
type Batch struct {
	ID    uuid.UUID `json:"id"`
	State string    `json:"state"`
	// Kind is retry (Filter says what it retries) or recover (Recovery
	// says what it recovers; Filter is empty).
	Kind              string                   `json:"kind"`
	Filter            history.DeadLetterFilter `json:"filter"`
	Recovery          *Recovery                `json:"recovery"`
	RequestsPerSecond int                      `json:"requests_per_second"`
	Priority          string                   `json:"priority"`
	Total             int                      `json:"total"`
	Processed         int                      `json:"processed"`
	Skipped           int                      `json:"skipped"`
	Succeeded         int                      `json:"succeeded"`
	Failed            int                      `json:"failed"`
	Error             *string                  `json:"error"`
	CreatedAt         time.Time                `json:"created_at"`
	StartedAt         *time.Time               `json:"started_at"`
	FinishedAt        *time.Time               `json:"finished_at"`
}

// Final reports whether b will not change state any more.
func (b Batch) Final() bool {
	return b.State == "completed" || b.State == "cancelled" || b.State == "failed"
}

const batchColumns = `id, state, filter, requests_per_second, priority, total, processed, skipped, succeeded, failed,
    error, created_at, started_at, finished_at, kind, recovery`

func scanBatch(row pgx.Row) (Batch, error) {
	var b Batch
	var filter, recovery []byte
	err := row.Scan(&b.ID, &b.State, &filter, &b.RequestsPerSecond, &b.Priority, &b.Total, &b.Processed, &b.Skipped,
		&b.Succeeded, &b.Failed, &b.Error, &b.CreatedAt, &b.StartedAt, &b.FinishedAt, &b.Kind, &recovery)
	if err != nil {
		return Batch{}, err
	}
	if err := json.Unmarshal(filter, &b.Filter); err != nil {
		return Batch{}, fmt.Errorf("decode batch filter: %w", err)
	}
	if recovery != nil {
		b.Recovery = &Recovery{}
		if err := json.Unmarshal(recovery, b.Recovery); err != nil {
			return Batch{}, fmt.Errorf("decode recovery: %w", err)
		}
	}
	b.CreatedAt = b.CreatedAt.UTC()
	for _, t := range []*time.Time{b.StartedAt, b.FinishedAt} {
		if t != nil {
			*t = t.UTC()
		}
	}
	return b, nil
}

const insertBatchSQL = `INSERT INTO batch_operations (id, tenant_id, filter, requests_per_second, priority)
VALUES ($1, $2, $3, $4, $5) RETURNING ` + batchColumns

// CreateBatch records a batch retry for a dlq process to run. The filter
// must name something: a batch says what it retries.
func (s *Store) CreateBatch(ctx context.Context, tenantID uuid.UUID, r BatchRequest) (Batch, error) {
	if r.Filter.Empty() {
		return Batch{}, fielderr.New("filter", "must name at least one of webhook_ids, event_types, failure_categories, from, to")
	}
	if err := r.Filter.Validate("filter."); err != nil {
		return Batch{}, err
	}
	if rps := r.RateLimit.RequestsPerSecond; rps < 1 || rps > maxBatchRate {
		return Batch{}, fielderr.New("rate_limit.requests_per_second", "must be between 1 and %d", maxBatchRate)
	}
	if err := checkPriority("priority", &r.Priority); err != nil {
		return Batch{}, err
	}
	filter, err := json.Marshal(r.Filter)
	if err != nil {
		return Batch{}, fmt.Errorf("encode batch filter: %w", err)
	}
	b, err := scanBatch(s.pool.QueryRow(ctx, insertBatchSQL, uuid.Must(uuid.NewV7()), tenantID, filter,
		r.RateLimit.RequestsPerSecond, r.Priority))
	if err != nil {
		return Batch{}, fmt.Errorf("create batch operation: %w", err)
	}
	return b, nil
}

const getBatchSQL = `SELECT ` + batchColumns + ` FROM batch_operations WHERE id = $1 AND tenant_id = $2`

// Batch returns one of the tenant's batch operations.
func (s *Store) Batch(ctx context.Context, tenantID, id uuid.UUID) (Batch, error) {
	b, err := scanBatch(s.pool.QueryRow(ctx, getBatchSQL, id, tenantID))
	if errors.Is(err, pgx.ErrNoRows) {
		return Batch{}, ErrNotFound
	}
	if err != nil {
		return Batch{}, fmt.Errorf("load batch operation: %w", err)
	}
	return b, nil
}

const listBatchesSQL = `SELECT ` + batchColumns + ` FROM batch_operations
WHERE tenant_id = $1 AND ($2::uuid IS NULL OR id < $2)
ORDER BY id DESC LIMIT $3`

// Batches returns a page of the tenant's batch operations, newest first.
func (s *Store) Batches(ctx context.Context, tenantID uuid.UUID, before *uuid.UUID, limit int) ([]Batch, error) {
	rows, err := s.pool.Query(ctx, listBatchesSQL, tenantID, before, limit)
	if err != nil {
		return nil, fmt.Errorf("list batch operations: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Batch, error) { return scanBatch(row) })
	if err != nil {
		return nil, fmt.Errorf("list batch operations: %w", err)
	}
	return out, nil
}

const cancelBatchSQL = `UPDATE batch_operations SET state = 'cancelled', finished_at = now()
WHERE id = $1 AND tenant_id = $2 AND state IN ('pending', 'running')
RETURNING ` + batchColumns

// CancelBatch stops a pending or running batch: no further delivery is
// given a retry. Retries it already enqueued go on, and their outcomes are
// still counted.
func (s *Store) CancelBatch(ctx context.Context, tenantID, id uuid.UUID) (Batch, error) {
	b, err := scanBatch(s.pool.QueryRow(ctx, cancelBatchSQL, id, tenantID))
	if errors.Is(err, pgx.ErrNoRows) {
		if _, err := s.Batch(ctx, tenantID, id); err != nil {
			return Batch{}, err
		}
		return Batch{}, ErrFinished
	}
	if err != nil {
		return Batch{}, fmt.Errorf("cancel batch operation: %w", err)
	}
	return b, nil
}

// lowerOrderFloors keeps the floors of the order keys of new deliveries
// (keys, one per task; "" for none) at or below them: a retry or recovery
// gives an order key a delivery of an older event, which keeps its place
// before the later ones (see package delivery, "Ordered delivery").
func lowerOrderFloors(ctx context.Context, tx pgx.Tx, keys []string, tasks []wire.Task) error {
	events, ids := make([]uuid.UUID, len(tasks)), make([]uuid.UUID, len(tasks))
	for i, t := range tasks {
		events[i], ids[i] = t.EventID, t.DeliveryID
	}
	k, e, i := webhook.OrderFloors(keys, events, ids)
	if len(k) == 0 {
		return nil
	}
	if _, err := tx.Exec(ctx, webhook.LowerOrderFloorsSQL, k, e, i); err != nil {
		return fmt.Errorf("lower order floors: %w", err)
	}
	return nil
}
