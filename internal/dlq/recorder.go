// Package dlq is the dead-letter side of hookline: it records what reaches
// the dead-letter queue (deliveries exhausted by workers, and poison
// messages that no worker could settle) and sweeps up exhausted deliveries
// whose dead letter never arrived.
package dlq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/hookline/hookline/internal/delivery"
	"github.com/hookline/hookline/internal/metrics"
	"github.com/hookline/hookline/internal/notify"
	"github.com/hookline/hookline/internal/queue"
	"github.com/hookline/hookline/internal/tracing"
	"github.com/hookline/hookline/internal/wire"
)

// Recorder is the queue.Handler of the dead-letter queue.
type Recorder struct {
	pool     *pgxpool.Pool
	dispatch dispatcher
	log      *slog.Logger
	tracer   tracing.Tracer
}

// NewRecorder returns a recorder; d enqueues the deliveries of the owner
// notifications it records.
func NewRecorder(pool *pgxpool.Pool, d dispatcher, log *slog.Logger) *Recorder {
	return &Recorder{pool: pool, dispatch: d, log: log}
}

// WithTracer makes recording each dead letter a span: a child of the
// attempt that exhausted the delivery (whose trace context the worker's
// message carries), or, for a poison message, a trace of its own linked
// to the event's publish.
func (r *Recorder) WithTracer(t tracing.Tracer) *Recorder {
	r.tracer = t
	return r
}

// recordSQL marks a dead-lettered delivery. One a worker exhausted is
// already exhausted and only gains its dead_lettered_at; a poison message's
// delivery is still pending or retrying and becomes exhausted here, with
// the reason as its last error. It returns what the owner notification
// needs, and whether this is the first time the delivery is recorded.
const recordSQL = `WITH prev AS (
    SELECT id, dead_lettered_at IS NULL AS fresh FROM deliveries
    WHERE id = $1 AND status IN ('pending', 'retrying', 'exhausted')
    FOR UPDATE
)
UPDATE deliveries d SET
    status = 'exhausted',
    last_error = CASE WHEN d.status = 'exhausted' THEN d.last_error ELSE $2 END,
    completed_at = coalesce(d.completed_at, now()),
    dead_lettered_at = coalesce(d.dead_lettered_at, now()),
    updated_at = now()
FROM prev, events e
WHERE d.id = prev.id AND e.id = d.event_id
RETURNING prev.fresh, coalesce(e.traceparent, ''), coalesce(e.tracestate, ''), ` + exhaustedColumns

// exhaustedColumns describe an exhausted delivery d of event e for its
// owner notification.
const exhaustedColumns = `d.id, d.tenant_id, d.webhook_id, d.event_id, e.event_type, d.attempt_count,
    d.failure_category, d.last_status_code, d.last_error, d.completed_at, d.retry_of`

// exhausted is an exhausted delivery as its notification describes it.
type exhausted struct {
	DeliveryID      uuid.UUID  `json:"delivery_id"`
	TenantID        uuid.UUID  `json:"-"`
	WebhookID       uuid.UUID  `json:"webhook_id"`
	EventID         uuid.UUID  `json:"event_id"`
	EventType       string     `json:"event_type"`
	AttemptCount    int        `json:"attempt_count"`
	FailureCategory *string    `json:"failure_category"`
	LastStatusCode  *int       `json:"last_status_code"`
	LastError       *string    `json:"last_error"`
	ExhaustedAt     time.Time  `json:"exhausted_at"`
	RetryOf         *uuid.UUID `json:"retry_of"`
}

func (x *exhausted) fields() []any {
	return []any{&x.DeliveryID, &x.TenantID, &x.WebhookID, &x.EventID, &x.EventType, &x.AttemptCount,
		&x.FailureCategory, &x.LastStatusCode, &x.LastError, &x.ExhaustedAt, &x.RetryOf}
}

// notifyExhausted records the webhook.delivery_exhausted notification of x
// in tx, unless x delivered a notification itself.
func notifyExhausted(ctx context.Context, tx pgx.Tx, log *slog.Logger, x exhausted) ([]wire.Task, error) {
	if notify.IsNotification(x.EventType) {
		notify.Suppressed(notify.DeliveryExhausted)
		log.Info("owner notification suppressed: the exhausted delivery was a notification",
			"delivery_id", x.DeliveryID.String(), "event_type", x.EventType)
		return nil, nil
	}
	x.ExhaustedAt = x.ExhaustedAt.UTC()
	return notify.Record(ctx, tx, notify.Notification{TenantID: x.TenantID, Type: notify.DeliveryExhausted,
		About: x.WebhookID, Key: "exhausted:" + x.DeliveryID.String(), Data: x, At: time.Now()})
}

const retryDelay = time.Second

// Handle records one dead letter.
func (r *Recorder) Handle(ctx context.Context, d amqp.Delivery) queue.Disposition {
	t, err := wire.DecodeTask(d.Body)
	if err != nil {
		r.log.Error("undecodable dead letter dropped", "message_id", d.MessageId, "error", err, "body_sample", sample(d.Body))
		metrics.DeadLettered.WithLabelValues("malformed").Inc()
		return queue.Ack
	}
	reason, kind := deadReason(d)
	ctx, span := r.startSpan(ctx, d, t, kind)
	defer span.End()
	found, tasks, err := r.record(ctx, t.DeliveryID, reason)
	if err != nil {
		tracing.Fail(span, err)
		r.log.WarnContext(ctx, "dead letter not recorded yet; retrying", "delivery_id", t.DeliveryID.String(), "error", err)
		select {
		case <-ctx.Done():
		case <-time.After(retryDelay):
		}
		return queue.Requeue
	}
	if !found {
		kind = "gone"
	}
	r.dispatch.Enqueue(tasks...)
	metrics.DeadLettered.WithLabelValues(kind).Inc()
	r.log.InfoContext(ctx, "dead letter recorded", "delivery_id", t.DeliveryID.String(), "tenant_id", t.TenantID.String(),
		"webhook_id", t.WebhookID.String(), "event_id", t.EventID.String(), "reason", reason)
	return queue.Ack
}

// record marks the delivery dead-lettered and, the first time, records its
// owner notification in the same transaction.
func (r *Recorder) record(ctx context.Context, id uuid.UUID, reason string) (bool, []wire.Task, error) {
	tx, err := r.pool.Begin(ctx)
	if err != nil {
		return false, nil, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit
	var fresh bool
	var x exhausted
	var origin tracing.Parent
	err = tx.QueryRow(ctx, recordSQL, id, reason).Scan(append([]any{&fresh, &origin.TraceParent, &origin.TraceState}, x.fields()...)...)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil, nil
	}
	if err != nil {
		return false, nil, err
	}
	// A poison message carries no trace context: its span links to the
	// event's publish instead.
	if !sameTrace(ctx, origin) {
		tracing.LinkFrom(ctx, origin)
	}
	var tasks []wire.Task
	if fresh {
		if tasks, err = notifyExhausted(ctx, tx, r.log, x); err != nil {
			return false, nil, err
		}
	}
	return true, tasks, tx.Commit(ctx)
}

// startSpan starts the span of recording dead letter d (of task t).
func (r *Recorder) startSpan(ctx context.Context, d amqp.Delivery, t wire.Task, kind string) (context.Context, trace.Span) {
	if !r.tracer.On() {
		return ctx, trace.SpanFromContext(ctx)
	}
	parent := tracing.Parent{}
	parent.TraceParent, _ = d.Headers[delivery.HeaderTraceParent].(string)
	parent.TraceState, _ = d.Headers[delivery.HeaderTraceState].(string)
	ctx, span := r.tracer.Start(parent.Context(ctx), "hookline.dead_letter", trace.SpanKindConsumer)
	if span.IsRecording() {
		span.SetAttributes(tracing.TenantID.String(t.TenantID.String()), tracing.WebhookID.String(t.WebhookID.String()),
			tracing.EventID.String(t.EventID.String()), tracing.DeliveryID.String(t.DeliveryID.String()),
			attribute.String("hookline.dead_letter_kind", kind))
	}
	return ctx, span
}

// sameTrace reports whether the span in ctx belongs to p's trace.
func sameTrace(ctx context.Context, p tracing.Parent) bool {
	return trace.SpanContextFromContext(ctx).TraceID() == p.SpanContext().TraceID()
}

// deadReason tells an exhausted delivery (sent by a worker) from a poison
// message: dead-lettered by its work queue's delivery limit, or by the
// consumer after it crashed its handler too often (queue.HeaderPanics,
// with no trace of the broker's dead-lettering).
func deadReason(d amqp.Delivery) (string, string) {
	if r, ok := d.Headers[delivery.HeaderDeadReason].(string); ok {
		return r, "exhausted"
	}
	_, died := d.Headers["x-death"]
	_, counted := d.Headers["x-delivery-count"]
	if n, ok := d.Headers[queue.HeaderPanics].(int64); ok && !died && !counted {
		return fmt.Sprintf("poison message: its handler panicked %d times (last: %v)", n, d.Headers[queue.HeaderPanic]), "poison"
	}
	count := int64(0)
	if deaths, ok := d.Headers["x-death"].([]any); ok && len(deaths) > 0 {
		if death, ok := deaths[0].(amqp.Table); ok {
			if c, ok := death["count"].(int64); ok {
				count = c
			}
		}
	}
	if c, ok := d.Headers["x-delivery-count"].(int64); ok && c > count {
		count = c
	}
	return fmt.Sprintf("poison message: handed to workers %d times without being settled", count), "poison"
}

func sample(b []byte) string {
	if len(b) > 200 {
		b = b[:200]
	}
	return string(b)
}
