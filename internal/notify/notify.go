// Package notify records owner notifications: events of the tenant's own
// (webhook.delivery_exhausted, webhook.circuit_opened,
// webhook.circuit_recovered, webhook.endpoint_disabled) about its endpoints, fanned out like any event
// to the tenant's webhooks subscribed to them.
//
// Notifications never loop. A notification is never delivered to the
// webhook it is about; a delivery of a notification that is exhausted, or
// whose outcome moves a circuit, generates no further notification (it is
// logged and counted as suppressed); and tenants cannot publish webhook.*
// events themselves.
package notify

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/hookline/hookline/internal/eventlog"
	"github.com/hookline/hookline/internal/metrics"
	"github.com/hookline/hookline/internal/tracing"
	"github.com/hookline/hookline/internal/webhook"
	"github.com/hookline/hookline/internal/wire"
)

// The notification event types.
const (
	DeliveryExhausted = "webhook.delivery_exhausted"
	CircuitOpened     = "webhook.circuit_opened"
	CircuitRecovered  = "webhook.circuit_recovered"
	EndpointDisabled  = "webhook.endpoint_disabled"
)

// Types lists every notification event type.
var Types = []string{DeliveryExhausted, CircuitOpened, CircuitRecovered, EndpointDisabled}

// ReservedPrefix starts every notification type; tenants may not publish
// event types under it.
const ReservedPrefix = "webhook."

// Source is the source of every notification event.
const Source = "hookline"

// IsNotification reports whether eventType is one of the notifications.
func IsNotification(eventType string) bool {
	return slices.Contains(Types, eventType)
}

// Reserved reports whether tenants are refused eventType on publish.
func Reserved(eventType string) bool {
	return strings.HasPrefix(eventType, ReservedPrefix)
}

// Notification is one event to record.
type Notification struct {
	TenantID uuid.UUID
	Type     string
	// About is the webhook the notification concerns; it never receives it.
	About uuid.UUID
	// Key makes the notification idempotent: recording it twice records
	// it once.
	Key  string
	Data any
	At   time.Time
}

// Querier is a pool or a transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// SubscribedSQL is true when the text[] column events asked for the
// notification of type eventType: by a filter that names the reserved
// prefix itself ("webhook.*", "webhook.circuit_*", ...). A catch-all "*"
// does not subscribe to notifications.
func SubscribedSQL(events, eventType string) string {
	return `EXISTS (SELECT 1 FROM unnest(` + events + `) AS f
    WHERE f LIKE '` + ReservedPrefix + `%' AND ` + eventType + ` LIKE replace(replace(f, '_', '\_'), '*', '%'))`
}

var subscribedSQL = SubscribedSQL("w.events", "ev.event_type")

// recordSQL inserts the notification event and its deliveries in one
// statement. The deliveries are not marked enqueued: the caller enqueues
// the returned tasks, or the outbox relay does a few seconds later.
var recordSQL = `WITH ` + eventlog.KeysSQL(`(SELECT $1::uuid AS id, $2::uuid AS tenant_id, $4::text AS idempotency_key) AS n`) + `, ev AS (
    INSERT INTO events (id, tenant_id, event_type, source, idempotency_key, request_hash, priority, data,
                        correlation_id, created_at, traceparent, tracestate)
    SELECT $1, $2, $3::text, '` + Source + `', $4, sha256(convert_to($4, 'UTF8')), 'high', $5::json, $8::text, $6::timestamptz,
           nullif($9::text, ''), nullif($10::text, '')
    WHERE EXISTS (SELECT 1 FROM keyed)
    RETURNING id, tenant_id, event_type, created_at
), ins AS (
    INSERT INTO deliveries (id, tenant_id, event_id, webhook_id, priority, created_at, order_key)
    SELECT uuidv7(), ev.tenant_id, ev.id, w.id, 'high', ev.created_at, ` + webhook.OrderKeySQL("w", "ev.event_type") + `
    FROM ev JOIN webhooks w ON w.tenant_id = ev.tenant_id AND w.active AND w.deleted_at IS NULL AND w.id <> $7
    WHERE ` + subscribedSQL + `
    RETURNING id, event_id, webhook_id
)
SELECT ins.id, ins.webhook_id FROM ev LEFT JOIN ins ON true`

// Record stores n with one delivery per subscribed webhook (other than the
// one it is about) and returns their outbox tasks. With tracing on, the
// notification's deliveries continue the trace of the span in ctx (the
// attempt that opened the circuit, the recording of the dead letter).
func Record(ctx context.Context, q Querier, n Notification) ([]wire.Task, error) {
	data, err := json.Marshal(n.Data)
	if err != nil {
		return nil, fmt.Errorf("encode notification: %w", err)
	}
	id := uuid.Must(uuid.NewV7())
	at := n.At.UTC().Truncate(time.Microsecond)
	parent := tracing.ParentOf(ctx)
	rows, err := q.Query(ctx, recordSQL, id, n.TenantID, n.Type, n.Key, data, at, n.About, id.String(),
		parent.TraceParent, parent.TraceState)
	if err != nil {
		return nil, fmt.Errorf("record %s notification: %w", n.Type, err)
	}
	var tasks []wire.Task
	var created bool
	var delID, hookID *uuid.UUID
	_, err = pgx.ForEachRow(rows, []any{&delID, &hookID}, func() error {
		created = true
		if delID != nil {
			tasks = append(tasks, wire.Task{DeliveryID: *delID, EventID: id, WebhookID: *hookID, TenantID: n.TenantID,
				Priority: "high", Attempt: 1, CreatedAt: at, CorrelationID: id.String()})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("record %s notification: %w", n.Type, err)
	}
	if created {
		metrics.OwnerNotifications.WithLabelValues(n.Type, "created").Inc()
	}
	return tasks, nil
}

// Suppressed counts a notification not made because it would have been
// about a notification.
func Suppressed(eventType string) {
	metrics.OwnerNotifications.WithLabelValues(eventType, "suppressed").Inc()
}
