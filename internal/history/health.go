package history

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
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
// hour, the current one included: at most 60 rows of each shard whatever
// the traffic. The last success is the newest hourly row with one, found
// through the primary key backwards.
const (
	healthAttemptsSQL = `SELECT coalesce(sum(attempts), 0), coalesce(sum(successes), 0)
FROM attempt_rollups WHERE ` + periodRows
	healthLatencySQL = `SELECT l.key::int, sum(l.value::bigint)
FROM attempt_rollups, jsonb_each_text(latency) AS l
WHERE ` + periodRows + ` GROUP BY 1`
	healthCategoriesSQL = `SELECT e.key, sum(e.value::bigint)
FROM attempt_rollups, jsonb_each_text(errors) AS e
WHERE ` + periodRows + ` GROUP BY 1`
	healthDeliveriesSQL = `SELECT coalesce(sum(created), 0), coalesce(sum(retrying), 0), coalesce(sum(succeeded), 0),
    coalesce(sum(exhausted), 0), coalesce(sum(cancelled), 0), coalesce(sum(postponed), 0)
FROM delivery_rollups WHERE ` + periodRows
	// Every shard of the newest hour with a success is among the first
	// rows with one, newest first (ties go to older hours, whose successes
	// came before).
	lastSuccessSQL = `SELECT max(last_success_at) FROM (
    SELECT last_success_at FROM attempt_rollups WHERE scope_id = $1 AND hourly AND successes > 0
    ORDER BY at DESC LIMIT 4) AS newest`
)

// Health summarises a webhook's last hour of deliveries.
func (r *Reader) Health(ctx context.Context, webhookID uuid.UUID, now time.Time) (Health, error) {
	args := windowOf(now, healthWindow).args(pgx.NamedArgs{"scope": webhookID})
	h := Health{WindowSeconds: int(healthWindow.Seconds()), ErrorsByCategory: map[string]int{}, Deliveries: map[string]int64{}}
	if err := r.pool.QueryRow(ctx, healthAttemptsSQL, args).Scan(&h.Attempts, &h.Successes); err != nil {
		return Health{}, fmt.Errorf("webhook health: %w", err)
	}
	if h.Attempts > 0 {
		rate := float64(h.Successes) / float64(h.Attempts)
		h.SuccessRate = &rate
	}
	latency, err := r.histogram(ctx, healthLatencySQL, args)
	if err != nil {
		return Health{}, fmt.Errorf("webhook health: %w", err)
	}
	h.LatencyMS = latencyOf(latency)
	rows, err := r.pool.Query(ctx, healthCategoriesSQL, args)
	if err != nil {
		return Health{}, fmt.Errorf("webhook health: %w", err)
	}
	var cat string
	var n int
	if _, err := pgx.ForEachRow(rows, []any{&cat, &n}, func() error {
		h.ErrorsByCategory[cat] = n
		return nil
	}); err != nil {
		return Health{}, fmt.Errorf("webhook health: %w", err)
	}
	if err := r.healthDeliveries(ctx, args, &h); err != nil {
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
func (r *Reader) healthDeliveries(ctx context.Context, args pgx.NamedArgs, h *Health) error {
	var created, retrying, succeeded, exhausted, cancelled int64
	if err := r.pool.QueryRow(ctx, healthDeliveriesSQL, args).Scan(
		&created, &retrying, &succeeded, &exhausted, &cancelled, &h.Postponements); err != nil {
		return fmt.Errorf("webhook health: %w", err)
	}
	for status, n := range deliveryStates(created, retrying, succeeded, exhausted, cancelled) {
		if n != 0 {
			h.Deliveries[string(status)] = n
		}
	}
	return nil
}
