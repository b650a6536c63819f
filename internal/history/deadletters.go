package history

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/hookline/hookline/internal/fielderr"
	"github.com/hookline/hookline/internal/retry"
	"github.com/hookline/hookline/internal/webhook"
)

// UnknownCategory is the failure category shown for an exhausted delivery
// that has none: a poison message, dead-lettered by its work queue before
// any attempt was recorded.
const UnknownCategory = "unknown"

// FailureCategories are the values a DLQ filter may name.
var FailureCategories = []string{
	string(retry.Timeout), string(retry.ServerError), string(retry.ClientError), string(retry.Network),
	string(retry.DNS), string(retry.SSL), string(retry.RateLimit), string(retry.PayloadTooLarge),
	string(retry.CircuitOpen), string(retry.SSRFBlocked), UnknownCategory,
}

// maxFilterValues bounds each list of a DLQ filter.
const maxFilterValues = 100

// DeadLetterFilter selects exhausted deliveries (the DLQ) of a tenant. Empty
// fields do not filter. From (inclusive) and To (exclusive) bound the time
// the delivery was exhausted.
type DeadLetterFilter struct {
	WebhookIDs        []uuid.UUID `json:"webhook_ids,omitempty"`
	EventTypes        []string    `json:"event_types,omitempty"`
	FailureCategories []string    `json:"failure_categories,omitempty"`
	From              *time.Time  `json:"from,omitempty"`
	To                *time.Time  `json:"to,omitempty"`
}

// Empty reports whether f selects the whole DLQ.
func (f DeadLetterFilter) Empty() bool {
	return len(f.WebhookIDs) == 0 && len(f.EventTypes) == 0 && len(f.FailureCategories) == 0 && f.From == nil && f.To == nil
}

// Validate names the first bad field of f, prefixed with path (for example
// "filter.").
func (f DeadLetterFilter) Validate(path string) error {
	switch {
	case len(f.WebhookIDs) > maxFilterValues:
		return fielderr.New(path+"webhook_ids", "at most %d values", maxFilterValues)
	case len(f.EventTypes) > maxFilterValues:
		return fielderr.New(path+"event_types", "at most %d values", maxFilterValues)
	case len(f.FailureCategories) > maxFilterValues:
		return fielderr.New(path+"failure_categories", "at most %d values", maxFilterValues)
	}
	for i, et := range f.EventTypes {
		if err := webhook.ValidateEventType(et); err != nil {
			return fielderr.New(fmt.Sprintf("%sevent_types[%d]", path, i), "%s", err.Error())
		}
	}
	for i, c := range f.FailureCategories {
		if !slices.Contains(FailureCategories, c) {
			return fielderr.New(fmt.Sprintf("%sfailure_categories[%d]", path, i), "must be one of %s",
				strings.Join(FailureCategories, ", "))
		}
	}
	if f.From != nil && f.To != nil && !f.From.Before(*f.To) {
		return fielderr.New(path+"to", "must be after from")
	}
	return nil
}

// DeadLetterWhere is the condition that selects the deliveries d (joined
// with their events e) that a DeadLetterFilter names; its arguments come
// from Args. The condition on e.tenant_id lets the planner find a rare
// event type's entries from its events.
const DeadLetterWhere = `d.tenant_id = @tenant_id AND e.tenant_id = @tenant_id AND d.status = 'exhausted'
  AND (@webhook_ids::uuid[] IS NULL OR d.webhook_id = ANY(@webhook_ids::uuid[]))
  AND (@event_types::text[] IS NULL OR e.event_type = ANY(@event_types::text[]))
  AND (@categories::text[] IS NULL OR coalesce(d.failure_category, '` + UnknownCategory + `') = ANY(@categories::text[]))
  AND (@from::timestamptz IS NULL OR d.completed_at >= @from::timestamptz)
  AND (@to::timestamptz IS NULL OR d.completed_at < @to::timestamptz)`

// NotRetried excludes deliveries that already have a retry (which is itself
// in the DLQ if it failed too).
const NotRetried = `NOT EXISTS (SELECT 1 FROM deliveries r WHERE r.retry_of = d.id)`

// Args returns the named arguments of DeadLetterWhere.
func (f DeadLetterFilter) Args(tenantID uuid.UUID) pgx.NamedArgs {
	a := pgx.NamedArgs{"tenant_id": tenantID, "webhook_ids": nil, "event_types": nil, "categories": nil,
		"from": f.From, "to": f.To}
	if len(f.WebhookIDs) > 0 {
		a["webhook_ids"] = f.WebhookIDs
	}
	if len(f.EventTypes) > 0 {
		a["event_types"] = f.EventTypes
	}
	if len(f.FailureCategories) > 0 {
		a["categories"] = f.FailureCategories
	}
	return a
}

// DeadLetter is an exhausted delivery as the DLQ lists it.
type DeadLetter struct {
	Delivery
	// RetriedBy is the newest retry of this delivery, if any.
	RetriedBy *uuid.UUID `json:"retried_by"`
}

// DeadLetterQuery is one page of the DLQ.
type DeadLetterQuery struct {
	Filter DeadLetterFilter
	// IncludeRetried lists deliveries that were retried since; by default
	// the DLQ shows only those still waiting for an operator.
	IncludeRetried bool
	After          *uuid.UUID
	Limit          int
}

const deadLettersSQL = `SELECT ` + deliveryColumns + `,
    (SELECT r.id FROM deliveries r WHERE r.retry_of = d.id ORDER BY r.id DESC LIMIT 1)
FROM deliveries d JOIN events e ON e.id = d.event_id
WHERE ` + DeadLetterWhere + `
  AND (@include_retried OR ` + NotRetried + `)
  AND (@after::uuid IS NULL OR (d.completed_at, d.id) >
       (SELECT a.completed_at, a.id FROM deliveries a WHERE a.id = @after::uuid AND a.tenant_id = @tenant_id))
ORDER BY d.completed_at, d.id
LIMIT @limit`

// DeadLetters returns a page of the tenant's DLQ in the order its
// deliveries were exhausted, oldest first; q.After is the last delivery of
// the previous page. Like List, planned with each request's values, so
// that the plan reads the index the filters given call for.
func (r *Reader) DeadLetters(ctx context.Context, tenantID uuid.UUID, q DeadLetterQuery) ([]DeadLetter, error) {
	args := q.Filter.Args(tenantID)
	args["include_retried"], args["after"], args["limit"] = q.IncludeRetried, q.After, q.Limit
	rows, err := r.pool.Query(ctx, deadLettersSQL, pgx.QueryExecModeDescribeExec, args)
	if err != nil {
		return nil, fmt.Errorf("list dead letters: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (DeadLetter, error) {
		var dl DeadLetter
		var err error
		dl.Delivery, err = scanDelivery(row, &dl.RetriedBy)
		return dl, err
	})
	if err != nil {
		return nil, fmt.Errorf("list dead letters: %w", err)
	}
	return out, nil
}

// DeadLetterCounts sums a filtered DLQ by failure category.
type DeadLetterCounts struct {
	Total      int            `json:"total"`
	ByCategory map[string]int `json:"by_category"`
}

// The DLQ is counted from dead_letter_rollups by whole UTC days and hours
// of exhaustion, and from the deliveries themselves only for the part of
// an hour that a from or to cuts (through deliveries_dead_letter_order_idx,
// at most an hour's exhausted deliveries of the tenant): the rows read
// never grow with the history.
const (
	deadLetterRollupSQL = `SELECT failure_category,
    sum(exhausted) - CASE WHEN @include_retried THEN 0 ELSE sum(retried) END
FROM dead_letter_rollups
WHERE tenant_id = @tenant_id AND hourly = @hourly AND at > '-infinity'
  AND at >= coalesce(@at_from::timestamptz, '-infinity') AND at < coalesce(@at_to::timestamptz, 'infinity')
  AND (@webhook_ids::uuid[] IS NULL OR webhook_id = ANY(@webhook_ids::uuid[]))
  AND (@event_types::text[] IS NULL OR event_type = ANY(@event_types::text[]))
  AND (@categories::text[] IS NULL OR failure_category = ANY(@categories::text[]))
GROUP BY 1`

	// Without a time filter: the all-time rows, one a webhook, event type
	// and category.
	deadLetterTotalSQL = `SELECT failure_category,
    sum(exhausted) - CASE WHEN @include_retried THEN 0 ELSE sum(retried) END
FROM dead_letter_rollups
WHERE tenant_id = @tenant_id AND hourly = false AND at = '-infinity'
  AND (@webhook_ids::uuid[] IS NULL OR webhook_id = ANY(@webhook_ids::uuid[]))
  AND (@event_types::text[] IS NULL OR event_type = ANY(@event_types::text[]))
  AND (@categories::text[] IS NULL OR failure_category = ANY(@categories::text[]))
GROUP BY 1`

	deadLetterCountsSQL = `SELECT coalesce(d.failure_category, '` + UnknownCategory + `'), count(*)
FROM deliveries d JOIN events e ON e.id = d.event_id
WHERE ` + DeadLetterWhere + `
  AND (@include_retried OR ` + NotRetried + `)
GROUP BY 1`
)

// CountDeadLetters counts the DLQ entries q.Filter selects (its page fields
// are ignored).
func (r *Reader) CountDeadLetters(ctx context.Context, tenantID uuid.UUID, q DeadLetterQuery) (DeadLetterCounts, error) {
	c := DeadLetterCounts{ByCategory: map[string]int{}}
	parts := countParts(q.Filter.From, q.Filter.To)
	for _, p := range parts.rollups {
		args := q.Filter.Args(tenantID)
		args["include_retried"], args["hourly"], args["at_from"], args["at_to"] = q.IncludeRetried, p.hourly, p.from, p.to
		sql := deadLetterRollupSQL
		if !p.hourly && p.from == nil && p.to == nil {
			sql = deadLetterTotalSQL
		}
		if err := r.addCounts(ctx, sql, args, &c); err != nil {
			return DeadLetterCounts{}, err
		}
	}
	for _, edge := range parts.raw {
		f := q.Filter
		f.From, f.To = &edge[0], &edge[1]
		args := f.Args(tenantID)
		args["include_retried"] = q.IncludeRetried
		if err := r.addCounts(ctx, deadLetterCountsSQL, args, &c); err != nil {
			return DeadLetterCounts{}, err
		}
	}
	for category, n := range c.ByCategory {
		if n == 0 {
			delete(c.ByCategory, category)
		}
	}
	return c, nil
}

func (r *Reader) addCounts(ctx context.Context, sql string, args pgx.NamedArgs, c *DeadLetterCounts) error {
	rows, err := r.pool.Query(ctx, sql, pgx.QueryExecModeDescribeExec, args)
	if err != nil {
		return fmt.Errorf("count dead letters: %w", err)
	}
	var category string
	var n int
	_, err = pgx.ForEachRow(rows, []any{&category, &n}, func() error {
		c.ByCategory[category] += n
		c.Total += n
		return nil
	})
	if err != nil {
		return fmt.Errorf("count dead letters: %w", err)
	}
	return nil
}

// rollupRange is a range of dead_letter_rollups rows: days, or hours when
// hourly, from from (inclusive) to to (exclusive), a nil bound being open.
type rollupRange struct {
	hourly   bool
	from, to *time.Time
}

// parts is how a time filter is counted: whole days and hours from the
// rollups, the rest of an hour from the deliveries.
type parts struct {
	rollups []rollupRange
	raw     [][2]time.Time
}

// countParts cuts [from, to) (either end open when nil) into the whole UTC
// days inside it, the whole hours around them, and the edges within an
// hour.
func countParts(from, to *time.Time) parts {
	var p parts
	var h1, d1, h2, d2 *time.Time
	if from != nil {
		h1, d1 = ptr(ceil(*from, time.Hour)), ptr(ceil(*from, 24*time.Hour))
	}
	if to != nil {
		h2, d2 = ptr(to.UTC().Truncate(time.Hour)), ptr(to.UTC().Truncate(24*time.Hour))
	}
	wholeDay := from == nil || to == nil || d1.Before(*d2)
	if !wholeDay {
		if !h1.Before(*h2) {
			p.raw = append(p.raw, [2]time.Time{*from, *to})
			return p
		}
		p.rollups = append(p.rollups, rollupRange{hourly: true, from: h1, to: h2})
		p.raw = edges(p.raw, from, h1, h2, to)
		return p
	}
	p.rollups = append(p.rollups, rollupRange{from: d1, to: d2})
	if from != nil && h1.Before(*d1) {
		p.rollups = append(p.rollups, rollupRange{hourly: true, from: h1, to: d1})
	}
	if to != nil && d2.Before(*h2) {
		p.rollups = append(p.rollups, rollupRange{hourly: true, from: d2, to: h2})
	}
	p.raw = edges(p.raw, from, h1, h2, to)
	return p
}

// edges adds [from, h1) and [h2, to) to raw where they are not empty.
func edges(raw [][2]time.Time, from, h1, h2, to *time.Time) [][2]time.Time {
	if from != nil && from.Before(*h1) {
		raw = append(raw, [2]time.Time{*from, *h1})
	}
	if to != nil && h2.Before(*to) {
		raw = append(raw, [2]time.Time{*h2, *to})
	}
	return raw
}

// ceil is t rounded up to a multiple of d (UTC).
func ceil(t time.Time, d time.Duration) time.Time {
	c := t.UTC().Truncate(d)
	if c.Before(t) {
		c = c.Add(d)
	}
	return c
}

func ptr(t time.Time) *time.Time { return &t }
