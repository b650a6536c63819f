package event

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/hookline/hookline/internal/metrics"
	"github.com/hookline/hookline/internal/tracing"
	"github.com/hookline/hookline/internal/webhook"
	"github.com/hookline/hookline/internal/wire"
)

// Errors of Replay besides ErrNotFound.
var (
	// ErrPayloadPruned: retention removed the event's payload.
	ErrPayloadPruned = errors.New("the event's payload was removed by retention: it cannot be replayed")
	// ErrWebhookNotFound: the webhook to replay to is not the tenant's, or
	// was deleted.
	ErrWebhookNotFound = errors.New("no such webhook")
	// ErrWebhookInactive: the webhook to replay to is inactive.
	ErrWebhookInactive = errors.New("the webhook is inactive: activate it before replaying to it")
)

const (
	replaySourceSQL = `SELECT data IS NULL, coalesce(traceparent, ''), coalesce(tracestate, '')
FROM events WHERE id = $1 AND tenant_id = $2`
	replayHookSQL = `SELECT active FROM webhooks WHERE id = $1 AND tenant_id = $2 AND deleted_at IS NULL`
	// replaySQL copies the event under a fresh idempotency key, linked by
	// replay_of, and fans it out to the tenant's matching active webhooks,
	// or to the one webhook named.
	replaySQL = `WITH ev AS (
    INSERT INTO events (id, tenant_id, event_type, source, idempotency_key, request_hash, priority, data,
                        replay_of, correlation_id, created_at, traceparent, tracestate)
    SELECT $3, tenant_id, event_type, source, $4, request_hash, priority, data, id, $7, $5, nullif($8, ''), nullif($9, '')
    FROM events WHERE id = $1 AND tenant_id = $2
    RETURNING id, tenant_id, event_type, priority, created_at
), ins AS (
    INSERT INTO deliveries (id, tenant_id, event_id, webhook_id, priority, created_at, order_key)
    SELECT uuidv7(), ev.tenant_id, ev.id, w.id, ev.priority, ev.created_at, ` + "%[2]s" + `
    FROM ev JOIN webhooks w ON w.tenant_id = ev.tenant_id AND w.active AND w.deleted_at IS NULL
    WHERE CASE WHEN $6::uuid IS NULL THEN (%[1]s) ELSE w.id = $6::uuid END
    RETURNING id, webhook_id
)
SELECT ev.event_type, ev.priority, ins.id, ins.webhook_id FROM ev LEFT JOIN ins ON true`
)

var replayFanOutSQL = fmt.Sprintf(replaySQL, webhook.FilterSQL("w.events", "ev.event_type"), webhook.OrderKeySQL("w", "ev.event_type"))

// Replay publishes the tenant's event id again as a new event: same type,
// source, priority and payload, a fresh idempotency key and correlation id,
// replay_of naming the original. It fans out to the webhooks subscribed to
// it now, or only to webhookID when that is given (whatever its filters).
//
// With tracing on, the replay is a span, a child of the span in ctx and
// linked to the original's publish; the new event continues the replay's
// trace.
func (s *Service) Replay(ctx context.Context, tenantID, id uuid.UUID, webhookID *uuid.UUID) (Result, error) {
	ctx, span := s.tracer.Start(ctx, "hookline.replay", trace.SpanKindProducer)
	defer span.End()
	res, err := s.replay(ctx, tenantID, id, webhookID)
	if span.IsRecording() {
		span.SetAttributes(tracing.TenantID.String(tenantID.String()), attribute.String("hookline.replay_of", id.String()))
		if err == nil {
			span.SetAttributes(tracing.EventID.String(res.ID.String()), tracing.EventType.String(res.EventType),
				attribute.Int("hookline.deliveries", res.Deliveries))
		}
		tracing.Fail(span, err)
	}
	return res, err
}

func (s *Service) replay(ctx context.Context, tenantID, id uuid.UUID, webhookID *uuid.UUID) (Result, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return Result{}, fmt.Errorf("replay event: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit
	var pruned bool
	var origin tracing.Parent
	switch err := tx.QueryRow(ctx, replaySourceSQL, id, tenantID).Scan(&pruned, &origin.TraceParent, &origin.TraceState); {
	case errors.Is(err, pgx.ErrNoRows):
		return Result{}, ErrNotFound
	case err != nil:
		return Result{}, fmt.Errorf("replay event: %w", err)
	case pruned:
		return Result{}, ErrPayloadPruned
	}
	if webhookID != nil {
		var active bool
		switch err := tx.QueryRow(ctx, replayHookSQL, *webhookID, tenantID).Scan(&active); {
		case errors.Is(err, pgx.ErrNoRows):
			return Result{}, ErrWebhookNotFound
		case err != nil:
			return Result{}, fmt.Errorf("replay event: %w", err)
		case !active:
			return Result{}, ErrWebhookInactive
		}
	}
	tracing.LinkFrom(ctx, origin)
	var parent tracing.Parent
	if s.tracer.On() {
		parent = tracing.ParentOf(ctx)
	}
	newID := uuid.Must(uuid.NewV7())
	res := Result{ID: newID, IdempotencyKey: keyPrefix + uuid.NewString(), ReplayOf: &id,
		CreatedAt: time.Now().UTC().Truncate(time.Microsecond)}
	rows, err := tx.Query(ctx, replayFanOutSQL, id, tenantID, newID, res.IdempotencyKey, res.CreatedAt, webhookID, newID.String(),
		parent.TraceParent, parent.TraceState)
	if err != nil {
		return Result{}, fmt.Errorf("replay event: %w", err)
	}
	var tasks []wire.Task
	var delID, hookID *uuid.UUID
	_, err = pgx.ForEachRow(rows, []any{&res.EventType, &res.Priority, &delID, &hookID}, func() error {
		if delID != nil {
			tasks = append(tasks, wire.Task{DeliveryID: *delID, EventID: newID, WebhookID: *hookID, TenantID: tenantID,
				Priority: res.Priority, Attempt: 1, CreatedAt: res.CreatedAt, CorrelationID: newID.String()})
		}
		return nil
	})
	if err != nil {
		return Result{}, fmt.Errorf("replay event: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return Result{}, fmt.Errorf("replay event: %w", err)
	}
	s.dispatch.Enqueue(tasks...)
	metrics.DeliveriesCreated.Add(float64(len(tasks)))
	res.Deliveries = len(tasks)
	return res, nil
}
