package event

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/hookline/hookline/internal/history"
)

// Summary is an event as GET /v1/events lists it: without its payload
// (up to 256 KiB each; GET /v1/events/{id} has it) or its deliveries.
type Summary struct {
	ID             uuid.UUID  `json:"id"`
	EventType      string     `json:"event_type"`
	Source         string     `json:"source"`
	IdempotencyKey string     `json:"idempotency_key"`
	Priority       string     `json:"priority"`
	ReplayOf       *uuid.UUID `json:"replay_of"`
	CorrelationID  string     `json:"correlation_id"`
	CreatedAt      time.Time  `json:"created_at"`
}

// ListFilter narrows List; nil fields do not filter. From is inclusive, To
// exclusive, on the time the event was created; Before is the cursor, the
// last event of the previous page.
type ListFilter struct {
	EventType *string
	From, To  *time.Time
	Before    *uuid.UUID
	Limit     int
}

// The tenant's events newest first, read backwards through
// events_tenant_type_idx (tenant_id, event_type, id) or the primary key
// side of events_tenant_idx (tenant_id, id): ids are UUIDv7, so the time
// bounds become id bounds (with history.IDSlack for clocks) and the rows
// read are the page asked for, whatever the length of the history.
// Planned with each request's values (never a generic plan, which cannot
// tell a narrow id range from the whole table).
const (
	listSummaryColumns = `id, event_type, source, idempotency_key, priority, replay_of, correlation_id, created_at`
	listEventsSQL      = `SELECT ` + listSummaryColumns + ` FROM events
WHERE tenant_id = $1 AND id >= $2 AND id < $3
  AND ($4::timestamptz IS NULL OR created_at >= $4) AND ($5::timestamptz IS NULL OR created_at < $5)
ORDER BY id DESC LIMIT $6`
	listEventsOfTypeSQL = `SELECT ` + listSummaryColumns + ` FROM events
WHERE tenant_id = $1 AND event_type = $7 AND id >= $2 AND id < $3
  AND ($4::timestamptz IS NULL OR created_at >= $4) AND ($5::timestamptz IS NULL OR created_at < $5)
ORDER BY id DESC LIMIT $6`
)

// List returns a page of the tenant's events, newest first.
func (s *Service) List(ctx context.Context, tenantID uuid.UUID, f ListFilter) ([]Summary, error) {
	lower, upper := history.IDBounds(f.From, f.To)
	if f.Before != nil && idLess(*f.Before, upper) {
		upper = *f.Before
	}
	args := []any{tenantID, lower, upper, f.From, f.To, f.Limit}
	sql := listEventsSQL
	if f.EventType != nil {
		sql, args = listEventsOfTypeSQL, append(args, *f.EventType)
	}
	rows, err := s.pool.Query(ctx, sql, append([]any{pgx.QueryExecModeDescribeExec}, args...)...)
	if err != nil {
		return nil, fmt.Errorf("list events: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Summary, error) {
		var e Summary
		err := row.Scan(&e.ID, &e.EventType, &e.Source, &e.IdempotencyKey, &e.Priority, &e.ReplayOf,
			&e.CorrelationID, &e.CreatedAt)
		e.CreatedAt = e.CreatedAt.UTC()
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("list events: %w", err)
	}
	return out, nil
}

// idLess orders ids as Postgres orders uuids: byte by byte.
func idLess(a, b uuid.UUID) bool {
	for i := range a {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return false
}
