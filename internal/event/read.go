package event

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/hookline/hookline/internal/fielderr"
)

// Event is a stored event with its deliveries.
type Event struct {
	ID             uuid.UUID         `json:"id"`
	EventType      string            `json:"event_type"`
	Source         string            `json:"source"`
	IdempotencyKey string            `json:"idempotency_key"`
	Priority       string            `json:"priority"`
	Data           json.RawMessage   `json:"data"`
	ReplayOf       *uuid.UUID        `json:"replay_of"`
	CorrelationID  string            `json:"correlation_id"`
	CreatedAt      time.Time         `json:"created_at"`
	Deliveries     []DeliverySummary `json:"deliveries"`
}

// DeliverySummary is one delivery of an event as listed with it.
type DeliverySummary struct {
	ID              uuid.UUID  `json:"id"`
	WebhookID       uuid.UUID  `json:"webhook_id"`
	Status          string     `json:"status"`
	AttemptCount    int        `json:"attempt_count"`
	LastStatusCode  *int       `json:"last_status_code"`
	FailureCategory *string    `json:"failure_category"`
	NextAttemptAt   *time.Time `json:"next_attempt_at"`
	CreatedAt       time.Time  `json:"created_at"`
	CompletedAt     *time.Time `json:"completed_at"`
}

const (
	eventColumns = `id, event_type, source, idempotency_key, priority, data, replay_of, correlation_id, created_at`
	getEventSQL  = `SELECT ` + eventColumns + ` FROM events WHERE tenant_id = $1 AND id = $2`
	byKeySQL     = `SELECT ` + eventColumns + ` FROM events WHERE tenant_id = $1 AND idempotency_key = $2 ORDER BY id DESC LIMIT 1`
	// Bounded: an event fans out to at most the tenant's webhooks plus their
	// manual retries.
	eventDeliveriesSQL = `SELECT id, webhook_id, status, attempt_count, last_status_code, failure_category,
	next_attempt_at, created_at, completed_at
FROM deliveries WHERE event_id = $1 ORDER BY id LIMIT 10000`
)

// Get returns the tenant's event id with its deliveries.
func (s *Service) Get(ctx context.Context, tenantID, id uuid.UUID) (Event, error) {
	return s.load(ctx, getEventSQL, tenantID, id)
}

// GetByKey returns the tenant's latest event with idempotency key key (a
// key may be used again once two days old: eventlog.KeysSQL). A key no
// publish accepts is refused (a *fielderr.Error), not looked up: Postgres
// would fail the query on invalid UTF-8 or NUL.
func (s *Service) GetByKey(ctx context.Context, tenantID uuid.UUID, key string) (Event, error) {
	if key == "" {
		return Event{}, fielderr.New("idempotency_key", "is required")
	}
	if err := checkKey(key); err != nil {
		return Event{}, err
	}
	return s.load(ctx, byKeySQL, tenantID, key)
}

func (s *Service) load(ctx context.Context, sql string, tenantID uuid.UUID, arg any) (Event, error) {
	var e Event
	var data []byte
	err := s.pool.QueryRow(ctx, sql, tenantID, arg).Scan(&e.ID, &e.EventType, &e.Source, &e.IdempotencyKey,
		&e.Priority, &data, &e.ReplayOf, &e.CorrelationID, &e.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Event{}, ErrNotFound
	}
	if err != nil {
		return Event{}, fmt.Errorf("load event: %w", err)
	}
	e.CreatedAt = e.CreatedAt.UTC()
	if data != nil {
		e.Data = data
	}
	rows, err := s.pool.Query(ctx, eventDeliveriesSQL, e.ID)
	if err != nil {
		return Event{}, fmt.Errorf("load deliveries of event %s: %w", e.ID, err)
	}
	e.Deliveries, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (DeliverySummary, error) {
		var d DeliverySummary
		err := row.Scan(&d.ID, &d.WebhookID, &d.Status, &d.AttemptCount, &d.LastStatusCode, &d.FailureCategory,
			&d.NextAttemptAt, &d.CreatedAt, &d.CompletedAt)
		d.CreatedAt = d.CreatedAt.UTC()
		return d, err
	})
	if err != nil {
		return Event{}, fmt.Errorf("load deliveries of event %s: %w", e.ID, err)
	}
	if e.Deliveries == nil {
		e.Deliveries = []DeliverySummary{}
	}
	return e, nil
}
