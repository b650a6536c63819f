// Package history reads what happened to deliveries, for the API and the
// console: a delivery with its attempts, a webhook's deliveries, the DLQ
// listing and counts, and a webhook's health. The worker writes that
// history (package delivery); this package only reads it.
package history

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookline/hookline/internal/wire"
)

// ErrNotFound means no such delivery for the tenant.
var ErrNotFound = errors.New("delivery not found")

// Delivery is a delivery as the API shows it.
type Delivery struct {
	ID              uuid.UUID   `json:"id"`
	EventID         uuid.UUID   `json:"event_id"`
	WebhookID       uuid.UUID   `json:"webhook_id"`
	EventType       string      `json:"event_type"`
	Status          wire.Status `json:"status"`
	Priority        string      `json:"priority"`
	AttemptCount    int         `json:"attempt_count"`
	PostponedCount  int         `json:"postponed_count"`
	LastStatusCode  *int        `json:"last_status_code"`
	LastError       *string     `json:"last_error"`
	FailureCategory *string     `json:"failure_category"`
	NextAttemptAt   *time.Time  `json:"next_attempt_at"`
	// WaitingFor says why a delivery waits, while it is parked (see
	// docs/SCHEDULING.md): order, backoff, rate_limited, circuit_open, host_busy,
	// tenant_share, inactive, unverified or released; null otherwise.
	WaitingFor  *string    `json:"waiting_for"`
	RetryOf     *uuid.UUID `json:"retry_of"`
	CreatedAt   time.Time  `json:"created_at"`
	UpdatedAt   time.Time  `json:"updated_at"`
	CompletedAt *time.Time `json:"completed_at"`
	// DeadLetteredAt is when the dlq process recorded the exhausted
	// delivery from the dead-letter queue; null before that.
	DeadLetteredAt *time.Time `json:"dead_lettered_at"`
}

// Detail is a delivery with every attempt, oldest first.
type Detail struct {
	Delivery
	Attempts []Attempt `json:"attempts"`
}

// Attempt is one recorded attempt.
type Attempt struct {
	AttemptNumber      int               `json:"attempt_number"`
	StatusCode         *int              `json:"status_code"`
	FailureCategory    *string           `json:"failure_category"`
	Error              *string           `json:"error"`
	DurationMS         int               `json:"duration_ms"`
	ResponseHeaders    map[string]string `json:"response_headers"`
	ResponseBodySample *string           `json:"response_body_sample"`
	ScheduledAt        time.Time         `json:"scheduled_at"`
	ExecutedAt         time.Time         `json:"executed_at"`
}

// Reader serves the delivery history routes.
type Reader struct {
	pool *pgxpool.Pool
}

// NewReader returns a Reader.
func NewReader(pool *pgxpool.Pool) *Reader { return &Reader{pool: pool} }

const deliveryColumns = `d.id, d.event_id, d.webhook_id, e.event_type, d.status, d.priority, d.attempt_count,
    d.postponed_count, d.last_status_code, d.last_error, d.failure_category, d.next_attempt_at, d.park_reason, d.retry_of,
    d.created_at, d.updated_at, d.completed_at, d.dead_lettered_at`

const (
	getDeliverySQL = `SELECT ` + deliveryColumns + `
FROM deliveries d JOIN events e ON e.id = d.event_id
WHERE d.id = $1 AND d.tenant_id = $2`

	// A delivery's attempts are in the attempt log, or, once retention
	// dropped their day's partition while the delivery was still needed
	// (exhausted and not resolved, or in flight), in
	// delivery_attempts_retained; never in both.
	attemptsSQL = `SELECT attempt_number, status_code, failure_category, error, duration_ms, response_headers,
    response_body_sample, scheduled_at, executed_at
FROM delivery_attempts WHERE delivery_id = $1 AND delivery_created_at = $2
UNION ALL
SELECT attempt_number, status_code, failure_category, error, duration_ms, response_headers,
    response_body_sample, scheduled_at, executed_at
FROM delivery_attempts_retained WHERE delivery_id = $1
ORDER BY attempt_number`

	// The time bounds are id bounds too ($9 and $10): the page starts where
	// from is in deliveries_webhook_idx instead of at the webhook's first
	// delivery. Planned with the values of each request (see
	// QueryExecModeDescribeExec in List), so that the filters not given
	// fold away. e.tenant_id lets a rare event type be found from its
	// events (events_tenant_type_idx) rather than by walking the
	// webhook's deliveries until a page of it turns up; each event's
	// deliveries are then looked up in the weeks from its own to the one
	// of its latest delivery, not in every week: a delivery is made with
	// or after its event (its id by Postgres's clock, after the event's
	// transaction began), and those made later (retries, recoveries) mark
	// the event with late_deliveries_until (migration 35); a day's margin
	// covers a clock set back. Without an event type, the webhook's
	// deliveries are read in id order and the bounds are not needed.
	listDeliveriesSQL = `SELECT ` + deliveryColumns + `
FROM deliveries d JOIN events e ON e.id = d.event_id
WHERE d.webhook_id = $1 AND d.tenant_id = $2 AND e.tenant_id = $2 AND d.id >= $9 AND d.id < $10
  AND ($5::text IS NULL OR (d.id >= uuidv7_floor(e.created_at - interval '1 day')
      AND d.id < uuidv7_floor(coalesce(e.late_deliveries_until, e.created_at) + interval '1 day')))
  AND ($3::uuid IS NULL OR d.id > $3)
  AND ($4::text IS NULL OR d.status = $4)
  AND ($5::text IS NULL OR e.event_type = $5)
  AND ($6::timestamptz IS NULL OR d.created_at >= $6)
  AND ($7::timestamptz IS NULL OR d.created_at < $7)
  AND ($11::uuid[] IS NULL OR d.id = ANY ($11))
ORDER BY d.id
LIMIT $8`
)

// Get returns the tenant's delivery with all its attempts.
func (r *Reader) Get(ctx context.Context, tenantID, id uuid.UUID) (Detail, error) {
	dl, err := scanDelivery(r.pool.QueryRow(ctx, getDeliverySQL, id, tenantID))
	if errors.Is(err, pgx.ErrNoRows) {
		return Detail{}, ErrNotFound
	}
	if err != nil {
		return Detail{}, fmt.Errorf("load delivery %s: %w", id, err)
	}
	d := Detail{Delivery: dl}
	rows, err := r.pool.Query(ctx, attemptsSQL, id, d.CreatedAt)
	if err != nil {
		return Detail{}, fmt.Errorf("load attempts of delivery %s: %w", id, err)
	}
	d.Attempts, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (Attempt, error) {
		var a Attempt
		var headers []byte
		err := row.Scan(&a.AttemptNumber, &a.StatusCode, &a.FailureCategory, &a.Error, &a.DurationMS, &headers,
			&a.ResponseBodySample, &a.ScheduledAt, &a.ExecutedAt)
		if err == nil && headers != nil {
			err = json.Unmarshal(headers, &a.ResponseHeaders)
		}
		a.ScheduledAt, a.ExecutedAt = a.ScheduledAt.UTC(), a.ExecutedAt.UTC()
		return a, err
	})
	if err != nil {
		return Detail{}, fmt.Errorf("load attempts of delivery %s: %w", id, err)
	}
	if d.Attempts == nil {
		d.Attempts = []Attempt{}
	}
	return d, nil
}

// ListFilter narrows List; nil fields do not filter.
type ListFilter struct {
	After     *uuid.UUID
	Status    *string
	EventType *string
	From, To  *time.Time
	Limit     int
}

// List returns a page of a webhook's deliveries, oldest first. A page of
// pending or retrying ones reads the webhook's unfinished span: its old
// unfinished deliveries by id, then the range from its head. Its
// statement is planned with each request's values, never as a generic
// plan: a generic plan, blind to which optional filters are NULL and how
// wide the id bounds are, sorts a webhook's whole history to return 50
// rows (measured: 85 ms at 4,000 deliveries of the webhook, against 0.7
// ms planned for the request).
func (r *Reader) List(ctx context.Context, tenantID, webhookID uuid.UUID, f ListFilter) ([]Delivery, error) {
	lower, upper := IDBounds(f.From, f.To)
	var out []Delivery
	if f.Status != nil && Unfinished(*f.Status) {
		sp, err := r.UnfinishedSpan(ctx, tenantID, webhookID)
		if err != nil {
			return nil, fmt.Errorf("list deliveries: %w", err)
		}
		if len(sp.Behind) > 0 {
			if out, err = r.listBehind(ctx, tenantID, webhookID, f, later(lower, sp.Floor), earlier(upper, sp.Head), sp.Behind); err != nil {
				return nil, err
			}
		}
		lower = later(lower, sp.Head)
	}
	if len(out) >= f.Limit {
		return out, nil
	}
	rest, err := r.list(ctx, tenantID, webhookID, f, f.Limit-len(out), lower, upper, nil)
	if err != nil {
		return nil, err
	}
	return append(out, rest...), nil
}

// listBehind returns the page's deliveries among behind, the span's old
// ones, with ids in [lower, upper). Their state is filtered here, not in
// the statement: a statement naming a state of deliveries_unfinished_idx
// may be planned as a walk of that index over the webhook's history, with
// the ids as a filter; without one, the ids are looked up by key.
func (r *Reader) listBehind(ctx context.Context, tenantID, webhookID uuid.UUID, f ListFilter, lower, upper uuid.UUID,
	behind []uuid.UUID) ([]Delivery, error) {
	byID := f
	byID.Status = nil
	all, err := r.list(ctx, tenantID, webhookID, byID, len(behind), lower, upper, behind)
	if err != nil {
		return nil, err
	}
	out := all[:0]
	for _, d := range all {
		if string(d.Status) == *f.Status && len(out) < f.Limit {
			out = append(out, d)
		}
	}
	return out, nil
}

// list runs listDeliveriesSQL for at most limit deliveries with ids in
// [lower, upper), and among only when it is not nil.
func (r *Reader) list(ctx context.Context, tenantID, webhookID uuid.UUID, f ListFilter, limit int, lower, upper uuid.UUID,
	only []uuid.UUID) ([]Delivery, error) {
	rows, err := r.pool.Query(ctx, listDeliveriesSQL, pgx.QueryExecModeDescribeExec, webhookID, tenantID, f.After, f.Status,
		f.EventType, f.From, f.To, limit, lower, upper, only)
	if err != nil {
		return nil, fmt.Errorf("list deliveries: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Delivery, error) { return scanDelivery(row) })
	if err != nil {
		return nil, fmt.Errorf("list deliveries: %w", err)
	}
	return out, nil
}

// scanDelivery reads deliveryColumns, then any extra columns into extra.
func scanDelivery(row pgx.Row, extra ...any) (Delivery, error) {
	var d Delivery
	err := row.Scan(append([]any{&d.ID, &d.EventID, &d.WebhookID, &d.EventType, &d.Status, &d.Priority, &d.AttemptCount,
		&d.PostponedCount, &d.LastStatusCode, &d.LastError, &d.FailureCategory, &d.NextAttemptAt, &d.WaitingFor, &d.RetryOf,
		&d.CreatedAt, &d.UpdatedAt, &d.CompletedAt, &d.DeadLetteredAt}, extra...)...)
	d.CreatedAt, d.UpdatedAt = d.CreatedAt.UTC(), d.UpdatedAt.UTC()
	d.CompletedAt, d.DeadLetteredAt = utcOrNil(d.CompletedAt), utcOrNil(d.DeadLetteredAt)
	return d, err
}

func utcOrNil(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}
