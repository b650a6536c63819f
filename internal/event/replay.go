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

	"github.com/hookline/hookline/internal/filter"
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
	// ErrFilteredOut: the webhook to replay to has a payload filter that
	// does not let the event through (now).
	ErrFilteredOut = errors.New("the webhook's filter does not match the event: change the filter to replay the event to it")
)

var (
	replaySourceSQL = `SELECT data IS NULL, coalesce(traceparent, ''), coalesce(tracestate, ''), event_type, source,
    coalesce(data::text, '')
FROM events WHERE id = $1 AND tenant_id = $2`
	// replayHookSQL holds the webhook named until the replay commits, so
	// that the filter it was checked against is the one in force.
	replayHookSQL = `SELECT active, filter FROM webhooks WHERE id = $1 AND tenant_id = $2 AND deleted_at IS NULL FOR SHARE`
	// replaySQL copies the event under its generated idempotency key (no
	// other event can hold it: nothing to store in event_keys), linked by
	// replay_of, and fans it out to the tenant's matching active webhooks
	// whose filter did not refuse it ($12), or to the one webhook named.
	// Fanning out, it checks the view of the tenant's filters the event
	// was evaluated against ($10-$11, see staleViewsSQL) and inserts
	// nothing but a row saying so if it is stale.
	replaySQL = `WITH views AS (
    SELECT 0 AS view, $2::uuid AS tenant_id WHERE $6::uuid IS NULL
), known AS (
    SELECT 0 AS view, k.* FROM unnest($10::uuid[], $11::timestamptz[]) AS k(webhook_id, updated_at)
), ` + staleViewsSQL + `, ev AS (
    INSERT INTO events (id, tenant_id, event_type, source, idempotency_key, request_hash, priority, data,
                        replay_of, correlation_id, created_at, traceparent, tracestate)
    SELECT $3, tenant_id, event_type, source, $4, request_hash, priority, data, id, $7, $5, nullif($8, ''), nullif($9, '')
    FROM events WHERE id = $1 AND tenant_id = $2 AND NOT EXISTS (SELECT 1 FROM stale)
    RETURNING id, tenant_id, event_type, priority, created_at, idempotency_key
), ins AS (
    INSERT INTO deliveries (id, tenant_id, event_id, webhook_id, priority, created_at, order_key)
    SELECT uuidv7(), ev.tenant_id, ev.id, w.id, ev.priority, ev.created_at, ` + "%[2]s" + `
    FROM ev JOIN webhooks w ON w.tenant_id = ev.tenant_id AND w.active AND w.deleted_at IS NULL
    WHERE CASE WHEN $6::uuid IS NULL THEN (%[1]s) AND (w.filter = '' OR w.id <> ALL ($12::uuid[]))
               ELSE w.id = $6::uuid END
    RETURNING id, webhook_id
)
SELECT ev.event_type, ev.priority, ins.id, ins.webhook_id, false FROM ev LEFT JOIN ins ON true
UNION ALL
SELECT NULL, NULL, NULL, NULL, true FROM stale`
)

var replayFanOutSQL = fmt.Sprintf(replaySQL, webhook.FilterSQL("w.events", "ev.event_type"), webhook.OrderKeySQL("w", "ev.event_type"))

// Replay publishes the tenant's event id again as a new event: same type,
// source, priority and payload, a fresh idempotency key and correlation id,
// replay_of naming the original. It fans out to the webhooks subscribed to
// it now whose payload filter lets it through, like a publish; or only to
// webhookID when that is given, whatever its event types, unless its
// payload filter does not let the event through (ErrFilteredOut).
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
	for attempt := 0; ; attempt++ {
		var view *filterView
		if webhookID == nil {
			var err error
			if view, err = s.filters.view(ctx, tenantID, attempt > 0); err != nil {
				return Result{}, fmt.Errorf("replay event: %w", err)
			}
		}
		res, stale, err := s.replayOnce(ctx, tenantID, id, webhookID, view)
		if err != nil || !stale {
			return res, err
		}
		if attempt == maxStaleViews {
			return Result{}, fmt.Errorf("replay event: the tenant's webhook filters changed at each of %d attempts", attempt+1)
		}
	}
}

// replaySource is what a replay reads of the original event.
type replaySource struct {
	pruned            bool
	origin            tracing.Parent
	eventType, source string
	data              []byte
}

// replayOnce replays with the view of the tenant's filters (nil when
// replaying to webhookID). It reports stale, having written nothing, when
// the view turned out out of date.
func (s *Service) replayOnce(ctx context.Context, tenantID, id uuid.UUID, webhookID *uuid.UUID, view *filterView) (Result, bool, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return Result{}, false, fmt.Errorf("replay event: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit
	var src replaySource
	switch err := tx.QueryRow(ctx, replaySourceSQL, id, tenantID).Scan(&src.pruned, &src.origin.TraceParent,
		&src.origin.TraceState, &src.eventType, &src.source, &src.data); {
	case errors.Is(err, pgx.ErrNoRows):
		return Result{}, false, ErrNotFound
	case err != nil:
		return Result{}, false, fmt.Errorf("replay event: %w", err)
	case src.pruned:
		return Result{}, false, ErrPayloadPruned
	}
	known, versions, refused := []uuid.UUID{}, []time.Time{}, []uuid.UUID{}
	if webhookID != nil {
		if err := s.checkReplayHook(ctx, tx, tenantID, *webhookID, src); err != nil {
			return Result{}, false, err
		}
	} else {
		for _, h := range view.hooks {
			known, versions = append(known, h.id), append(versions, h.updatedAt)
		}
		refused = append(refused, view.refused(src.eventType, src.source, src.data, s.log)...)
	}
	tracing.LinkFrom(ctx, src.origin)
	var parent tracing.Parent
	if s.tracer.On() {
		parent = tracing.ParentOf(ctx)
	}
	newID := uuid.Must(uuid.NewV7())
	res := Result{ID: newID, IdempotencyKey: generatedKey(newID), ReplayOf: &id,
		CreatedAt: time.Now().UTC().Truncate(time.Microsecond)}
	rows, err := tx.Query(ctx, replayFanOutSQL, id, tenantID, newID, res.IdempotencyKey, res.CreatedAt, webhookID, newID.String(),
		parent.TraceParent, parent.TraceState, known, versions, refused)
	if err != nil {
		return Result{}, false, fmt.Errorf("replay event: %w", err)
	}
	var tasks []wire.Task
	var eventType, priority *string
	var delID, hookID *uuid.UUID
	var stale bool
	_, err = pgx.ForEachRow(rows, []any{&eventType, &priority, &delID, &hookID, &stale}, func() error {
		if stale {
			return errStaleView
		}
		res.EventType, res.Priority = *eventType, *priority
		if delID != nil {
			tasks = append(tasks, wire.Task{DeliveryID: *delID, EventID: newID, WebhookID: *hookID, TenantID: tenantID,
				Priority: res.Priority, Attempt: 1, CreatedAt: res.CreatedAt, CorrelationID: newID.String()})
		}
		return nil
	})
	if errors.Is(err, errStaleView) {
		return Result{}, true, nil
	}
	if err != nil {
		return Result{}, false, fmt.Errorf("replay event: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return Result{}, false, fmt.Errorf("replay event: %w", err)
	}
	s.dispatch.Enqueue(tasks...)
	metrics.DeliveriesCreated.Add(float64(len(tasks)))
	res.Deliveries = len(tasks)
	return res, false, nil
}

// errStaleView stops reading the rows of a replay whose view was stale.
var errStaleView = errors.New("stale view of the webhook filters")

// checkReplayHook checks that the webhook a replay is sent to exists, is
// active, and that its filter (if any) lets the event through; its row is
// held until the replay commits.
func (s *Service) checkReplayHook(ctx context.Context, tx pgx.Tx, tenantID, webhookID uuid.UUID, src replaySource) error {
	var active bool
	var expr string
	switch err := tx.QueryRow(ctx, replayHookSQL, webhookID, tenantID).Scan(&active, &expr); {
	case errors.Is(err, pgx.ErrNoRows):
		return ErrWebhookNotFound
	case err != nil:
		return fmt.Errorf("replay event: %w", err)
	case !active:
		return ErrWebhookInactive
	case expr == "":
		return nil
	}
	p, err := s.filters.programs.Program(expr)
	if err != nil {
		s.log.Warn("webhook filter does not compile: it matches nothing", "webhook_id", webhookID.String(), "error", err)
	}
	ev := &filter.Event{EventType: src.eventType, Source: src.source}
	ev.Data, err = filter.DecodeData(src.data)
	if !evaluate(p, ev, err, webhookID, s.log) {
		return ErrFilteredOut
	}
	return nil
}
