package history

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/hookline/hookline/internal/wire"
)

// Health is a webhook's recent delivery record.
type Health struct {
	WindowSeconds    int            `json:"window_seconds"`
	Attempts         int            `json:"attempts"`
	Successes        int            `json:"successes"`
	SuccessRate      *float64       `json:"success_rate"`
	LatencyMS        LatencyMS      `json:"latency_ms"`
	ErrorsByCategory map[string]int `json:"errors_by_category"`
	// LastSuccessAt is the last success at any time, not only in the
	// window; the API shows it beside the window, not inside it.
	LastSuccessAt *time.Time       `json:"-"`
	Postponements int64            `json:"postponements"`
	Deliveries    map[string]int64 `json:"deliveries"`
}

// LatencyMS are attempt duration percentiles.
type LatencyMS struct {
	P50 *float64 `json:"p50"`
	P95 *float64 `json:"p95"`
	P99 *float64 `json:"p99"`
}

const healthWindow = time.Hour

// Health reads the webhook's rollups (attempt_rollups and
// delivery_rollups, scope the webhook) over the whole minutes of the last
// hour, the current one included: 60 rows of each shard whatever the
// traffic. The last success is the newest rollup row with one, found
// through the primary key backwards.
const (
	healthAttemptsSQL = `SELECT coalesce(sum(attempts), 0), coalesce(sum(successes), 0)
FROM attempt_rollups WHERE scope_id = $1 AND minute >= $2`
	healthLatencySQL = `SELECT l.key::int, sum(l.value::bigint)
FROM attempt_rollups, jsonb_each_text(latency) AS l
WHERE scope_id = $1 AND minute >= $2 GROUP BY 1`
	healthCategoriesSQL = `SELECT e.key, sum(e.value::bigint)
FROM attempt_rollups, jsonb_each_text(errors) AS e
WHERE scope_id = $1 AND minute >= $2 GROUP BY 1`
	healthDeliveriesSQL = `SELECT coalesce(sum(created), 0), coalesce(sum(retrying), 0), coalesce(sum(succeeded), 0),
    coalesce(sum(exhausted), 0), coalesce(sum(cancelled), 0), coalesce(sum(postponed), 0)
FROM delivery_rollups WHERE scope_id = $1 AND minute >= $2`
	// Every shard of the newest minute with a success is among the first
	// rows with one, newest first (ties go to older minutes, whose
	// successes came before).
	lastSuccessSQL = `SELECT max(last_success_at) FROM (
    SELECT last_success_at FROM attempt_rollups WHERE scope_id = $1 AND successes > 0
    ORDER BY minute DESC LIMIT 4) AS newest`
)

// Health summarises a webhook's last hour of deliveries.
func (r *Reader) Health(ctx context.Context, webhookID uuid.UUID, now time.Time) (Health, error) {
	since := windowStart(now, healthWindow)
	h := Health{WindowSeconds: int(healthWindow.Seconds()), ErrorsByCategory: map[string]int{}, Deliveries: map[string]int64{}}
	if err := r.pool.QueryRow(ctx, healthAttemptsSQL, webhookID, since).Scan(&h.Attempts, &h.Successes); err != nil {
		return Health{}, fmt.Errorf("webhook health: %w", err)
	}
	if h.Attempts > 0 {
		rate := float64(h.Successes) / float64(h.Attempts)
		h.SuccessRate = &rate
	}
	latency := histogram{}
	if err := r.collect(ctx, healthLatencySQL, webhookID, since, func(row pgx.CollectableRow) error {
		var b int
		var n int64
		err := row.Scan(&b, &n)
		latency[b] += n
		return err
	}); err != nil {
		return Health{}, err
	}
	h.LatencyMS = latencyOf(latency)
	if err := r.collect(ctx, healthCategoriesSQL, webhookID, since, func(row pgx.CollectableRow) error {
		var cat string
		var n int
		if err := row.Scan(&cat, &n); err != nil {
			return err
		}
		h.ErrorsByCategory[cat] = n
		return nil
	}); err != nil {
		return Health{}, err
	}
	if err := r.healthDeliveries(ctx, webhookID, since, &h); err != nil {
		return Health{}, err
	}
	if err := r.pool.QueryRow(ctx, lastSuccessSQL, webhookID).Scan(&h.LastSuccessAt); err != nil {
		return Health{}, fmt.Errorf("webhook last success: %w", err)
	}
	if h.LastSuccessAt != nil {
		t := h.LastSuccessAt.UTC()
		h.LastSuccessAt = &t
	}
	return h, nil
}

// healthDeliveries counts the deliveries created in the window by their
// state now (the states with none are left out) and their postponements.
func (r *Reader) healthDeliveries(ctx context.Context, webhookID uuid.UUID, since time.Time, h *Health) error {
	var created, retrying, succeeded, exhausted, cancelled int64
	if err := r.pool.QueryRow(ctx, healthDeliveriesSQL, webhookID, since).Scan(
		&created, &retrying, &succeeded, &exhausted, &cancelled, &h.Postponements); err != nil {
		return fmt.Errorf("webhook health: %w", err)
	}
	for status, n := range map[wire.Status]int64{
		wire.Pending: created - retrying - succeeded - exhausted - cancelled, wire.Retrying: retrying,
		wire.Succeeded: succeeded, wire.Exhausted: exhausted, wire.Cancelled: cancelled} {
		if n != 0 {
			h.Deliveries[string(status)] = n
		}
	}
	return nil
}

func (r *Reader) collect(ctx context.Context, sql string, id uuid.UUID, since time.Time, f func(pgx.CollectableRow) error) error {
	rows, err := r.pool.Query(ctx, sql, id, since)
	if err != nil {
		return fmt.Errorf("webhook health: %w", err)
	}
	_, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (struct{}, error) { return struct{}{}, f(row) })
	if err != nil {
		return fmt.Errorf("webhook health: %w", err)
	}
	return nil
}
