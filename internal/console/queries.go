package console

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/hookline/hookline/internal/history"
	"github.com/hookline/hookline/internal/wire"
)

// The console's own read queries: views the stores do not offer. Each one
// is bounded by an index (named beside it) so that a page stays fast on a
// webhook with a long history; none counts a webhook's whole history.

const historyColumns = `d.id, d.event_id, d.webhook_id, e.event_type, d.status, d.priority, d.attempt_count,
    d.postponed_count, d.last_status_code, d.last_error, d.failure_category, d.next_attempt_at, d.retry_of,
    d.created_at, d.updated_at, d.completed_at`

// historyFilter selects a page of a webhook's deliveries, newest first.
type historyFilter struct {
	Before *uuid.UUID
	// Floor, for a page of pending or retrying deliveries, is the head
	// of the webhook's unfinished span (history.Reader.UnfinishedSpan):
	// the walk stops there instead of at the webhook's first delivery.
	Floor *uuid.UUID
	// Only and Under, for the rest of such a page, are the span's old
	// unfinished deliveries, read by id, and its head, which they are
	// before (Floor is then the span's floor, at or before them).
	Only      []uuid.UUID
	Under     *uuid.UUID
	Status    string
	EventType string
	From, To  *time.Time
	Limit     int
}

// historySQL builds the newest-first page query. It walks
// deliveries_webhook_idx (webhook_id, id) backwards from the cursor; a time
// filter also bounds the id range, so that the walk stops at its edge. The
// status is a literal (validated as a wire.Status) so that the
// planner may use the partial index of exhausted deliveries.
func historySQL(tenantID, webhookID uuid.UUID, f historyFilter) (string, pgx.NamedArgs) {
	where := []string{"d.webhook_id = @webhook_id", "d.tenant_id = @tenant_id"}
	args := pgx.NamedArgs{"webhook_id": webhookID, "tenant_id": tenantID, "limit": f.Limit}
	if f.Before != nil {
		where = append(where, "d.id < @before")
		args["before"] = *f.Before
	}
	if wire.Status(f.Status).Valid() {
		where = append(where, "d.status = '"+f.Status+"'")
	}
	if f.Floor != nil {
		where = append(where, "d.id >= @floor")
		args["floor"] = *f.Floor
	}
	if f.Only != nil {
		where = append(where, "d.id = ANY (@only)")
		args["only"] = f.Only
	}
	if f.Under != nil {
		where = append(where, "d.id < @under")
		args["under"] = *f.Under
	}
	if f.EventType != "" {
		// The event's tenant too, as in history's list: the planner may
		// then find a rare type from the tenant's events of that type
		// instead of walking the webhook's deliveries until a page of it
		// turns up.
		// Each event's deliveries in the weeks from its own to that of its
		// latest delivery, as there.
		where = append(where, "e.event_type = @event_type", "e.tenant_id = @tenant_id",
			"d.id >= uuidv7_floor(e.created_at - interval '1 day')",
			"d.id < uuidv7_floor(coalesce(e.late_deliveries_until, e.created_at) + interval '1 day')")
		args["event_type"] = f.EventType
	}
	if f.From != nil {
		where = append(where, "d.created_at >= @from", "d.id >= @from_id")
		args["from"], args["from_id"] = *f.From, history.IDAt(f.From.Add(-history.IDSlack))
	}
	if f.To != nil {
		where = append(where, "d.created_at < @to", "d.id < @to_id")
		args["to"], args["to_id"] = *f.To, history.IDAt(f.To.Add(history.IDSlack))
	}
	sql := `SELECT ` + historyColumns + `
FROM deliveries d JOIN events e ON e.id = d.event_id
WHERE ` + strings.Join(where, " AND ") + `
ORDER BY d.id DESC
LIMIT @limit`
	return sql, args
}

// history returns a page of a webhook's deliveries, newest first. A page
// of pending or retrying ones reads the range from the head of the
// webhook's unfinished span, then its old unfinished deliveries by id.
func (c *Console) history(ctx context.Context, tenantID, webhookID uuid.UUID, f historyFilter) ([]history.Delivery, error) {
	if !history.Unfinished(f.Status) {
		return c.historyPage(ctx, tenantID, webhookID, f)
	}
	sp, err := c.deliveries.UnfinishedSpan(ctx, tenantID, webhookID)
	if err != nil {
		return nil, fmt.Errorf("delivery history: %w", err)
	}
	f.Floor = &sp.Head
	out, err := c.historyPage(ctx, tenantID, webhookID, f)
	if err != nil || len(out) >= f.Limit || len(sp.Behind) == 0 {
		return out, err
	}
	// The old ones by id, their state filtered here: a query naming a
	// state of deliveries_unfinished_idx may be planned as a walk of that
	// index over the webhook's history, with the ids as a filter.
	status, limit := f.Status, f.Limit-len(out)
	f.Floor, f.Only, f.Under, f.Status, f.Limit = &sp.Floor, sp.Behind, &sp.Head, "", len(sp.Behind)
	rest, err := c.historyPage(ctx, tenantID, webhookID, f)
	if err != nil {
		return nil, err
	}
	for _, d := range rest {
		if string(d.Status) == status && limit > 0 {
			out, limit = append(out, d), limit-1
		}
	}
	return out, nil
}

// historyPage runs one page query of history.
func (c *Console) historyPage(ctx context.Context, tenantID, webhookID uuid.UUID, f historyFilter) ([]history.Delivery, error) {
	sql, args := historySQL(tenantID, webhookID, f)
	// Planned with the request's values, never as a generic plan: one
	// blind to how rare the event type is walked a webhook's deliveries
	// week after week for a page of it (3.7 s at p50 at 20 million, against
	// 33 ms from the type's events).
	rows, err := c.db.Query(ctx, sql, pgx.QueryExecModeDescribeExec, args)
	if err != nil {
		return nil, fmt.Errorf("delivery history: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (history.Delivery, error) {
		var d history.Delivery
		err := row.Scan(&d.ID, &d.EventID, &d.WebhookID, &d.EventType, &d.Status, &d.Priority, &d.AttemptCount,
			&d.PostponedCount, &d.LastStatusCode, &d.LastError, &d.FailureCategory, &d.NextAttemptAt, &d.RetryOf,
			&d.CreatedAt, &d.UpdatedAt, &d.CompletedAt)
		return d, err
	})
	if err != nil {
		return nil, fmt.Errorf("delivery history: %w", err)
	}
	return out, nil
}

// lastAttempt is a webhook's most recent attempt.
type lastAttempt struct {
	StatusCode *int
	Error      *string
	At         time.Time
}

// summary is what the webhooks page shows of each webhook's recent record.
type summary struct {
	Last *lastAttempt
	// Attempts and Successes over the last 24 hours.
	Attempts, Successes int
}

const (
	// One row per webhook (migration 000018).
	lastAttemptsSQL = `SELECT webhook_id, status_code, error, executed_at FROM webhook_last_attempts
WHERE webhook_id = ANY(@webhook_ids) AND tenant_id = @tenant_id`
	// The last 24 hours of each webhook from its rollups: hourly rows for
	// the whole hours, minute rows at the edges (history.Reader.Recent).
)

// summaries reads the last attempt and the 24-hour attempt counts of the
// webhooks ids.
func (c *Console) summaries(ctx context.Context, tenantID uuid.UUID, ids []uuid.UUID) (map[uuid.UUID]*summary, error) {
	out := make(map[uuid.UUID]*summary, len(ids))
	for _, id := range ids {
		out[id] = &summary{}
	}
	args := pgx.NamedArgs{"webhook_ids": ids, "tenant_id": tenantID}
	rows, err := c.db.Query(ctx, lastAttemptsSQL, args)
	if err != nil {
		return nil, fmt.Errorf("last attempts: %w", err)
	}
	var id uuid.UUID
	var la lastAttempt
	if _, err := pgx.ForEachRow(rows, []any{&id, &la.StatusCode, &la.Error, &la.At}, func() error {
		l := la
		out[id].Last = &l
		return nil
	}); err != nil {
		return nil, fmt.Errorf("last attempts: %w", err)
	}
	recent, err := c.deliveries.RecentAttempts(ctx, tenantID, ids, 24*time.Hour, c.now())
	if err != nil {
		return nil, err
	}
	for id, n := range recent {
		out[id].Attempts, out[id].Successes = int(n[0]), int(n[1])
	}
	return out, nil
}

// exhaustedHook is a webhook with deliveries exhausted recently and not
// retried since.
type exhaustedHook struct {
	WebhookID uuid.UUID
	URL       string
	Count     int
	Latest    time.Time
}

// exhaustedSQL counts, by live webhook, the DLQ entries of the tenant
// exhausted since @since (an hour's start) from the hourly rows of
// dead_letter_rollups, and finds each such webhook's latest entry through
// deliveries_webhook_dead_letter_idx (webhook_id, completed_at, id),
// newest first: it reads the hours of the window, not its deliveries.
const exhaustedSQL = `WITH counts AS (
    SELECT webhook_id, sum(exhausted - retried) AS n FROM dead_letter_rollups
    WHERE tenant_id = @tenant_id AND hourly AND at >= @since
    GROUP BY webhook_id HAVING sum(exhausted - retried) > 0
)
SELECT c.webhook_id, w.url, c.n, l.completed_at
FROM counts c
JOIN webhooks w ON w.id = c.webhook_id AND w.tenant_id = @tenant_id AND w.deleted_at IS NULL
CROSS JOIN LATERAL (
    SELECT d.completed_at FROM deliveries d
    WHERE d.webhook_id = c.webhook_id AND d.status = 'exhausted' AND ` + history.NotRetried + `
    ORDER BY d.completed_at DESC LIMIT 1) l
ORDER BY l.completed_at DESC
LIMIT 20`

// recentlyExhausted lists the webhooks with deliveries exhausted in the
// last 24 hours (from the start of the hour 24 hours ago) that nobody
// retried yet.
func (c *Console) recentlyExhausted(ctx context.Context, tenantID uuid.UUID) ([]exhaustedHook, error) {
	since := c.now().UTC().Add(-24 * time.Hour).Truncate(time.Hour)
	rows, err := c.db.Query(ctx, exhaustedSQL, pgx.NamedArgs{"tenant_id": tenantID, "since": since})
	if err != nil {
		return nil, fmt.Errorf("recently exhausted: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (exhaustedHook, error) {
		var h exhaustedHook
		err := row.Scan(&h.WebhookID, &h.URL, &h.Count, &h.Latest)
		return h, err
	})
	if err != nil {
		return nil, fmt.Errorf("recently exhausted: %w", err)
	}
	return out, nil
}
