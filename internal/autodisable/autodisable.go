// Package autodisable disables endpoints that keep failing, so that a
// tenant's dead endpoint stops taking delivery capacity and filling the DLQ,
// and tells the tenant.
//
// A webhook is disabled once it has failed without a single successful
// attempt for its window (its own auto_disable.failing_for_ms, else its
// tenant's, default 5 days; 0 never), or once its circuit has opened again
// a configured number of times in a row. What that takes is kept where it
// is already known, at no extra round trip per delivery: the worker's
// statement that records attempts keeps the webhook's failing_since (the
// first failure after its last success, written only when it changes), and
// the worker that records a circuit transition counts the re-openings. The
// dlq process's Disabler looks for webhooks past their window every
// interval; disabling is the database function disable_failing_webhooks,
// the only change to webhooks the dlq's role may make.
//
// A disabled webhook is inactive with disabled_reason "auto_disabled": its
// queued deliveries wait, parked, until it is enabled again (a PATCH of
// active true), and the events published meanwhile can be recovered (see
// package dlq). Each disable is announced with a webhook.endpoint_disabled
// owner notification, audited and counted
// (hookline_webhooks_disabled_total{reason="auto_disabled"}), in the
// transaction that disables it.
package autodisable

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookline/hookline/internal/audit"
	"github.com/hookline/hookline/internal/metrics"
	"github.com/hookline/hookline/internal/notify"
	"github.com/hookline/hookline/internal/supervisor"
	"github.com/hookline/hookline/internal/webhook"
	"github.com/hookline/hookline/internal/wire"
)

// Causes of an automatic disable, as the notification and the audit row
// name them.
const (
	CauseFailing        = "failing"
	CauseCircuitReopens = "circuit_reopens"
)

// dispatcher takes committed deliveries to the broker (outbox.Dispatcher).
type dispatcher interface {
	Enqueue(tasks ...wire.Task)
}

// Disabler disables failing webhooks; the dlq process runs it.
type Disabler struct {
	pool     *pgxpool.Pool
	dispatch dispatcher
	log      *slog.Logger
	// Interval is how often it looks (dlq.auto_disable.interval).
	Interval time.Duration
	// CircuitReopens disables a webhook whose circuit opened again this
	// many times in a row; 0 never (dlq.auto_disable.circuit_reopens).
	CircuitReopens int
}

// New returns a Disabler that hands the notifications' deliveries to d.
func New(pool *pgxpool.Pool, d dispatcher, log *slog.Logger, interval time.Duration, circuitReopens int) *Disabler {
	return &Disabler{pool: pool, dispatch: d, log: log, Interval: interval, CircuitReopens: circuitReopens}
}

// Run disables failing webhooks every Interval until ctx ends.
func (d *Disabler) Run(ctx context.Context) error {
	return supervisor.Every(ctx, d.Interval, d.Interval, func(ctx context.Context) {
		if _, err := d.Pass(ctx); err != nil && ctx.Err() == nil {
			d.log.Warn("failing webhooks not disabled; trying again at the next pass", "error", err)
		}
	})
}

// perTransaction bounds the webhooks one transaction disables.
const perTransaction = 100

// Pass disables every webhook due now and returns how many it disabled.
func (d *Disabler) Pass(ctx context.Context) (int, error) {
	total := 0
	for {
		n, err := d.disableSome(ctx)
		total += n
		if err != nil || n < perTransaction {
			return total, err
		}
	}
}

// Disabled is a webhook as disable_failing_webhooks returns it, and as its
// notification describes it.
type Disabled struct {
	WebhookID      uuid.UUID  `json:"webhook_id"`
	TenantID       uuid.UUID  `json:"-"`
	URL            string     `json:"url"`
	DisabledReason string     `json:"disabled_reason"`
	DisabledAt     time.Time  `json:"disabled_at"`
	Cause          string     `json:"cause"`
	FailingSince   *time.Time `json:"failing_since"`
	FailingForMS   int64      `json:"failing_for_ms"`
	CircuitReopens int        `json:"circuit_reopens"`
}

const disableSQL = `SELECT webhook_id, tenant_id, url, disabled_at, failing_since, failing_for_ms, circuit_reopens
FROM disable_failing_webhooks($1, $2)`

// disableSome disables up to perTransaction webhooks with their
// notifications and audit rows in one transaction, then enqueues the
// notifications' deliveries.
func (d *Disabler) disableSome(ctx context.Context) (int, error) {
	var tasks []wire.Task
	var done []Disabled
	err := pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, disableSQL, d.CircuitReopens, perTransaction)
		if err != nil {
			return fmt.Errorf("disable failing webhooks: %w", err)
		}
		done, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (Disabled, error) {
			x := Disabled{DisabledReason: webhook.DisabledAuto}
			err := row.Scan(&x.WebhookID, &x.TenantID, &x.URL, &x.DisabledAt, &x.FailingSince, &x.FailingForMS, &x.CircuitReopens)
			return x, err
		})
		if err != nil {
			return fmt.Errorf("disable failing webhooks: %w", err)
		}
		for i := range done {
			t, err := record(ctx, tx, &done[i])
			if err != nil {
				return err
			}
			tasks = append(tasks, t...)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	d.dispatch.Enqueue(tasks...)
	for _, x := range done {
		metrics.WebhooksDisabled.WithLabelValues(webhook.DisabledAuto).Inc()
		d.log.Warn("webhook disabled: its endpoint kept failing", "tenant_id", x.TenantID.String(),
			"webhook_id", x.WebhookID.String(), "cause", x.Cause, "failing_since", x.FailingSince,
			"failing_for_ms", x.FailingForMS, "circuit_reopens", x.CircuitReopens)
	}
	return len(done), nil
}

// record writes the notification and the audit row of x in tx, and
// returns the notification's deliveries.
func record(ctx context.Context, tx pgx.Tx, x *Disabled) ([]wire.Task, error) {
	x.DisabledAt = x.DisabledAt.UTC()
	x.Cause = CauseCircuitReopens
	if x.FailingSince != nil {
		since := x.FailingSince.UTC()
		x.FailingSince = &since
		if !since.After(x.DisabledAt.Add(-time.Duration(x.FailingForMS) * time.Millisecond)) {
			x.Cause = CauseFailing
		}
	}
	tasks, err := notify.Record(ctx, tx, notify.Notification{TenantID: x.TenantID, Type: notify.EndpointDisabled,
		About: x.WebhookID, Key: fmt.Sprintf("disabled:%s:%d", x.WebhookID, x.DisabledAt.UnixMicro()), Data: x, At: x.DisabledAt})
	if err != nil {
		return nil, err
	}
	details := map[string]any{"by": "hookline", "cause": x.Cause, "failing_since": x.FailingSince,
		"failing_for_ms": x.FailingForMS, "circuit_reopens": x.CircuitReopens}
	if err := audit.Record(ctx, tx, x.TenantID, audit.WebhookAutoDisabled, "webhook", x.WebhookID.String(), details); err != nil {
		return nil, err
	}
	return tasks, nil
}
