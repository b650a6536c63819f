package event

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/hookline/hookline/internal/metrics"
	"github.com/hookline/hookline/internal/webhook"
	"github.com/hookline/hookline/internal/wire"
)

// TestEventType is the type of the events SendTest sends.
const TestEventType = "hookline.test"

// testEventSQL inserts a test event and its one delivery, to the webhook
// named when it is the tenant's, active and not deleted, whatever its
// event types and filter; no row when it is not.
var testEventSQL = `WITH hook AS (
    SELECT w.* FROM webhooks w WHERE w.id = $8 AND w.tenant_id = $2 AND w.active AND w.deleted_at IS NULL FOR SHARE
), ev AS (
    INSERT INTO events (id, tenant_id, event_type, source, idempotency_key, request_hash, priority, data, correlation_id, created_at)
    SELECT $1, $2, '` + TestEventType + `', 'hookline', $3, $4, 'normal', $5::json, $6, $7
    WHERE EXISTS (SELECT 1 FROM hook)
    RETURNING id, tenant_id, event_type, priority, created_at, idempotency_key
)
INSERT INTO deliveries (id, tenant_id, event_id, webhook_id, priority, created_at, order_key)
SELECT uuidv7(), ev.tenant_id, ev.id, w.id, ev.priority, ev.created_at, ` + webhook.OrderKeySQL("w", "ev.event_type") + `
FROM ev, hook w
RETURNING id`

const testHookStateSQL = `SELECT active FROM webhooks WHERE id = $1 AND tenant_id = $2 AND deleted_at IS NULL`

// SendTest publishes an event of type hookline.test to the tenant's
// webhook webhookID alone, whatever its event types and filter, so that
// its owner can see a signed delivery arrive: ErrWebhookNotFound when the
// webhook is not the tenant's, ErrWebhookInactive when it is paused.
func (s *Service) SendTest(ctx context.Context, tenantID, webhookID uuid.UUID) (Result, error) {
	id := uuid.Must(uuid.NewV7())
	res := Result{ID: id, IdempotencyKey: generatedKey(id), EventType: TestEventType,
		Priority: "normal", CreatedAt: time.Now().UTC().Truncate(time.Microsecond)}
	data, err := json.Marshal(map[string]any{"test": true, "webhook_id": webhookID,
		"message": "A test event sent from hookline to check this endpoint.", "sent_at": res.CreatedAt})
	if err != nil {
		return Result{}, fmt.Errorf("test event: %w", err)
	}
	hash := sha256.Sum256(data)
	var delID uuid.UUID
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, testEventSQL, res.ID, tenantID, res.IdempotencyKey, hash[:], string(data), res.ID.String(),
			res.CreatedAt, webhookID).Scan(&delID)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		var active bool
		switch err := s.pool.QueryRow(ctx, testHookStateSQL, webhookID, tenantID).Scan(&active); {
		case errors.Is(err, pgx.ErrNoRows):
			return Result{}, ErrWebhookNotFound
		case err != nil:
			return Result{}, fmt.Errorf("test event: %w", err)
		}
		return Result{}, ErrWebhookInactive
	}
	if err != nil {
		return Result{}, fmt.Errorf("test event: %w", err)
	}
	s.dispatch.Enqueue(wire.Task{DeliveryID: delID, EventID: res.ID, WebhookID: webhookID, TenantID: tenantID,
		Priority: res.Priority, Attempt: 1, CreatedAt: res.CreatedAt, CorrelationID: res.ID.String()})
	metrics.DeliveriesCreated.Inc()
	res.Deliveries = 1
	return res, nil
}
