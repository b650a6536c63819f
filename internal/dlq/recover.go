package dlq

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/hookline/hookline/internal/fielderr"
	"github.com/hookline/hookline/internal/history"
	"github.com/hookline/hookline/internal/notify"
	"github.com/hookline/hookline/internal/webhook"
)

// A recovery gives one webhook, over a window of event times, what it
// failed and what it missed, as a batch operation run by the same runner,
// at the same pace and with the same checkpoints as a batch retry:
//
//   - failed: its DLQ entries (exhausted deliveries not yet retried) of
//     events published in the window, each given a retry, exactly like a
//     batch retry gives one (deliveries_one_retry_idx, the checkpoint);
//   - missed: events of its tenant published in the window that it
//     subscribes to (its event types and, for events other than
//     notifications, its payload filter as it is now) but that made no
//     delivery to it because it was disabled (a period of webhook_pauses),
//     and whose payload is still kept. Events from before the webhook
//     existed are not its to receive: a recovery would otherwise hand the
//     tenant's whole stored history to any endpoint just registered. Each is given
//     one delivery, in the transaction that moves the checkpoint past it,
//     and only if the event has no delivery to the webhook at all, which
//     a unique index (deliveries_one_recovery_idx) holds against any
//     recovery running at the same moment. A recovery run twice, or
//     resumed after its process died, delivers no event twice (bar the
//     at-least-once of the chunk being published at a kill).
//
// Deliveries still queued for a disabled webhook are not missed: they wait,
// parked, and go when it is enabled again, so a recovery never makes a
// second delivery of their events. A recovery walks the failed deliveries
// first, then the missed events, each in id order; total, and the counts
// in recovery, are fixed when it starts.

// Batch operation kinds.
const (
	KindRetry   = "retry"
	KindRecover = "recover"
)

// What a recovery may include.
const (
	IncludeFailed = "failed"
	IncludeMissed = "missed"
)

// RecoverRequest is the body of POST /v1/webhooks/{id}/recover.
type RecoverRequest struct {
	// From (required, inclusive) and To (exclusive, default now) bound
	// the time the events were published.
	From *time.Time `json:"from"`
	To   *time.Time `json:"to"`
	// Include is failed, missed or both (the default).
	Include   []string `json:"include"`
	RateLimit struct {
		RequestsPerSecond int `json:"requests_per_second"`
	} `json:"rate_limit"`
	Priority string `json:"priority"`
	// DryRun counts what the recovery would cover and starts nothing.
	DryRun bool `json:"dry_run"`
}

// Recovery is what a recovery covers, as its batch operation shows it.
type Recovery struct {
	WebhookID uuid.UUID `json:"webhook_id"`
	From      time.Time `json:"from"`
	To        time.Time `json:"to"`
	Include   []string  `json:"include"`
	// Failed and Missed count the deliveries and events it covers: fixed
	// when it starts (nil until then), or counted by a dry run.
	Failed *int `json:"failed"`
	Missed *int `json:"missed"`
}

func (r Recovery) includes(what string) bool { return slices.Contains(r.Include, what) }

// maxRecoveryWindow bounds a recovery's window, and so the events one
// recovery reads.
const maxRecoveryWindow = 366 * 24 * time.Hour

// recovery validates r for webhookID at now.
func (r *RecoverRequest) recovery(webhookID uuid.UUID, now time.Time) (Recovery, error) {
	if r.From == nil {
		return Recovery{}, fielderr.New("from", "is required")
	}
	rec := Recovery{WebhookID: webhookID, From: r.From.UTC().Truncate(time.Microsecond), To: now.UTC().Truncate(time.Microsecond)}
	if r.To != nil {
		rec.To = r.To.UTC().Truncate(time.Microsecond)
	}
	switch {
	case !rec.From.Before(rec.To):
		return Recovery{}, fielderr.New("to", "must be after from")
	case rec.To.Sub(rec.From) > maxRecoveryWindow:
		return Recovery{}, fielderr.New("from", "the window may be at most %s", maxRecoveryWindow)
	}
	if len(r.Include) == 0 {
		r.Include = []string{IncludeFailed, IncludeMissed}
	}
	for i, what := range r.Include {
		if what != IncludeFailed && what != IncludeMissed {
			return Recovery{}, fielderr.New(fmt.Sprintf("include[%d]", i), "must be %s or %s", IncludeFailed, IncludeMissed)
		}
		if !slices.Contains(rec.Include, what) {
			rec.Include = append(rec.Include, what)
		}
	}
	if !r.DryRun {
		if rps := r.RateLimit.RequestsPerSecond; rps < 1 || rps > maxBatchRate {
			return Recovery{}, fielderr.New("rate_limit.requests_per_second", "must be between 1 and %d", maxBatchRate)
		}
	}
	return rec, checkPriority("priority", &r.Priority)
}

// args are the named arguments of the recovery's statements, the
// deliveries exhausted by startedAt.
func (r Recovery) args(tenantID uuid.UUID, startedAt time.Time) pgx.NamedArgs {
	return pgx.NamedArgs{"tenant_id": tenantID, "webhook_id": r.WebhookID, "from": r.From, "to": r.To,
		"from_id": uuidAt(r.From.Add(-idSlack)), "to_id": uuidAt(r.To.Add(idSlack)), "started_at": startedAt}
}

// idSlack widens the window on event ids (UUIDv7, made moments before the
// event's commit time) so that their index bounds the scan of events.
const idSlack = time.Minute

// uuidAt is the smallest UUIDv7 of time t.
func uuidAt(t time.Time) uuid.UUID {
	var u uuid.UUID
	var ms [8]byte
	binary.BigEndian.PutUint64(ms[:], uint64(max(t.UnixMilli(), 0))) //nolint:gosec // clamped at 0
	copy(u[:6], ms[2:])
	return u
}

// recoveryFailedWhere selects the webhook's DLQ entries d (of events e)
// published in the window and exhausted by the time the recovery started.
const recoveryFailedWhere = `d.tenant_id = @tenant_id AND d.webhook_id = @webhook_id AND d.status = 'exhausted'
  AND d.completed_at <= @started_at AND e.created_at >= @from AND e.created_at < @to AND ` + history.NotRetried

// pauseSlack widens each period a webhook spent disabled: an event
// committed just after the webhook was disabled may carry a time just
// before. An event that did reach the webhook has a delivery to it and is
// not missed, whatever its time.
const pauseSlack = `interval '10 seconds'`

// recoveryMissedWhere selects the events e of the window that the webhook
// w subscribes to by event type (a notification only by a webhook.*
// filter, and never one about w itself), published while w existed and was
// disabled, with their payload, and without any delivery to w.
// The payload filter is Go's to apply (see passesMissed).
var recoveryMissedWhere = `e.tenant_id = @tenant_id AND e.id >= @from_id AND e.id < @to_id
  AND e.created_at >= @from AND e.created_at < @to AND e.data IS NOT NULL
  AND CASE WHEN e.event_type LIKE '` + notify.ReservedPrefix + `%'
      THEN ` + notify.SubscribedSQL("w.events", "e.event_type") + ` AND (e.data->>'webhook_id') IS DISTINCT FROM w.id::text
      ELSE ` + webhook.FilterSQL("w.events", "e.event_type") + ` END
  AND e.created_at >= w.created_at AND EXISTS (
      SELECT 1 FROM webhook_pauses p WHERE p.webhook_id = w.id AND e.created_at >= p.paused_at - ` + pauseSlack + `
        AND (p.resumed_at IS NULL OR e.created_at < p.resumed_at + ` + pauseSlack + `))
  AND NOT EXISTS (SELECT 1 FROM deliveries x WHERE x.event_id = e.id AND x.webhook_id = w.id)`

const countFailedSQL = `SELECT count(*), max(d.id::text COLLATE "C")::uuid
FROM deliveries d JOIN events e ON e.id = d.event_id
WHERE ` + recoveryFailedWhere

var countMissedSQL = `SELECT count(*), max(e.id::text COLLATE "C")::uuid
FROM events e JOIN webhooks w ON w.id = @webhook_id
WHERE ` + recoveryMissedWhere

// missedPageSQL pages through the missed events for a payload filter.
var missedPageSQL = `SELECT e.id, e.event_type, e.source, e.data, e.correlation_id,
    coalesce(e.traceparent, ''), coalesce(e.tracestate, '')
FROM events e JOIN webhooks w ON w.id = @webhook_id
WHERE ` + recoveryMissedWhere + `
  AND (@after::uuid IS NULL OR e.id > @after::uuid) AND (@upto::uuid IS NULL OR e.id <= @upto::uuid)
ORDER BY e.id
LIMIT @limit`

const hookFilterSQL = `SELECT active AND deleted_at IS NULL, filter FROM webhooks WHERE id = $1`

// querier is a pool or a transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// missedEvent is one row of missedPageSQL.
type missedEvent struct {
	id                      uuid.UUID
	eventType, source, corr string
	data                    []byte
	traceParent, traceState string
}

func scanMissed(rows pgx.Rows) ([]missedEvent, error) {
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (missedEvent, error) {
		var m missedEvent
		err := row.Scan(&m.id, &m.eventType, &m.source, &m.data, &m.corr, &m.traceParent, &m.traceState)
		return m, err
	})
}

// passesMissed reports whether the webhook's payload filter expr lets a
// missed event through. Notifications are not filtered, as their fan-out
// is not.
func (c filterCheck) passesMissed(expr string, ev missedEvent, webhookID uuid.UUID) bool {
	if expr == "" || notify.Reserved(ev.eventType) {
		return true
	}
	return c.passes(filteredEvent{expr: expr, eventType: ev.eventType, source: ev.source, data: ev.data}, webhookID)
}

// countPage is how many missed events a count through a payload filter
// reads at a time.
const countPage = 1000

// countRecovery counts what rec covers now (failed exhausted by
// startedAt), and the last delivery and event of each set.
func countRecovery(ctx context.Context, q querier, check filterCheck, tenantID uuid.UUID, rec Recovery,
	startedAt time.Time) (failed, missed int, lastFailed, lastMissed *uuid.UUID, err error) {
	args := rec.args(tenantID, startedAt)
	if rec.includes(IncludeFailed) {
		if err := q.QueryRow(ctx, countFailedSQL, args).Scan(&failed, &lastFailed); err != nil {
			return 0, 0, nil, nil, fmt.Errorf("count failed deliveries: %w", err)
		}
	}
	if rec.includes(IncludeMissed) {
		missed, lastMissed, err = countMissed(ctx, q, check, rec, args)
	}
	return failed, missed, lastFailed, lastMissed, err
}

func countMissed(ctx context.Context, q querier, check filterCheck, rec Recovery, args pgx.NamedArgs) (int, *uuid.UUID, error) {
	var expr string
	var usable bool
	if err := q.QueryRow(ctx, hookFilterSQL, rec.WebhookID).Scan(&usable, &expr); err != nil {
		return 0, nil, fmt.Errorf("read the webhook's filter: %w", err)
	}
	if expr == "" {
		var n int
		var last *uuid.UUID
		if err := q.QueryRow(ctx, countMissedSQL, args).Scan(&n, &last); err != nil {
			return 0, nil, fmt.Errorf("count missed events: %w", err)
		}
		return n, last, nil
	}
	n := 0
	var last, after *uuid.UUID
	args["upto"], args["limit"] = nil, countPage
	for {
		args["after"] = after
		rows, err := q.Query(ctx, missedPageSQL, pageMode, args)
		if err != nil {
			return 0, nil, fmt.Errorf("count missed events: %w", err)
		}
		page, err := scanMissed(rows)
		if err != nil {
			return 0, nil, fmt.Errorf("count missed events: %w", err)
		}
		for _, ev := range page {
			if check.passesMissed(expr, ev, rec.WebhookID) {
				n, last = n+1, &ev.id
			}
		}
		if len(page) < countPage {
			return n, last, nil
		}
		after = &page[len(page)-1].id
	}
}

const recoverHookSQL = `SELECT active FROM webhooks WHERE id = $1 AND tenant_id = $2 AND deleted_at IS NULL`

// checkRecoverable validates r and the webhook it recovers.
func (s *Store) checkRecoverable(ctx context.Context, tenantID, webhookID uuid.UUID, r *RecoverRequest) (Recovery, error) {
	rec, err := r.recovery(webhookID, time.Now())
	if err != nil {
		return Recovery{}, err
	}
	var active bool
	err = s.pool.QueryRow(ctx, recoverHookSQL, webhookID, tenantID).Scan(&active)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return Recovery{}, ErrNotFound
	case err != nil:
		return Recovery{}, fmt.Errorf("load webhook %s: %w", webhookID, err)
	case !active && !r.DryRun:
		return Recovery{}, ErrInactive
	}
	return rec, nil
}

// CountRecovery is a dry run: what a recovery of the webhook as r asks
// would cover if it started now. Nothing is stored.
func (s *Store) CountRecovery(ctx context.Context, tenantID, webhookID uuid.UUID, r RecoverRequest) (Recovery, error) {
	r.DryRun = true
	rec, err := s.checkRecoverable(ctx, tenantID, webhookID, &r)
	if err != nil {
		return Recovery{}, err
	}
	failed, missed, _, _, err := countRecovery(ctx, s.pool, s.filters, tenantID, rec, time.Now())
	if err != nil {
		return Recovery{}, err
	}
	if rec.includes(IncludeFailed) {
		rec.Failed = &failed
	}
	if rec.includes(IncludeMissed) {
		rec.Missed = &missed
	}
	return rec, nil
}

const insertRecoverySQL = `INSERT INTO batch_operations (id, tenant_id, kind, filter, recovery, requests_per_second, priority)
VALUES ($1, $2, '` + KindRecover + `', '{}', $3, $4, $5) RETURNING ` + batchColumns

// Recover records a recovery of the webhook for a dlq process to run. The
// webhook must be active: its recovered deliveries would only wait.
func (s *Store) Recover(ctx context.Context, tenantID, webhookID uuid.UUID, r RecoverRequest) (Batch, error) {
	r.DryRun = false
	rec, err := s.checkRecoverable(ctx, tenantID, webhookID, &r)
	if err != nil {
		return Batch{}, err
	}
	raw, err := json.Marshal(rec)
	if err != nil {
		return Batch{}, fmt.Errorf("encode recovery: %w", err)
	}
	b, err := scanBatch(s.pool.QueryRow(ctx, insertRecoverySQL, uuid.Must(uuid.NewV7()), tenantID, raw,
		r.RateLimit.RequestsPerSecond, r.Priority))
	if err != nil {
		return Batch{}, fmt.Errorf("create recovery: %w", err)
	}
	return b, nil
}
