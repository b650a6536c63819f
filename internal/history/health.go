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

const (
	healthAttemptsSQL = `SELECT count(*),
    count(*) FILTER (WHERE status_code BETWEEN 200 AND 299),
    round(percentile_cont(0.5) WITHIN GROUP (ORDER BY duration_ms)::numeric, 1)::float8,
    round(percentile_cont(0.95) WITHIN GROUP (ORDER BY duration_ms)::numeric, 1)::float8,
    round(percentile_cont(0.99) WITHIN GROUP (ORDER BY duration_ms)::numeric, 1)::float8,
    max(executed_at) FILTER (WHERE status_code BETWEEN 200 AND 299)
FROM delivery_attempts WHERE webhook_id = $1 AND executed_at >= $2`
	healthCategoriesSQL = `SELECT failure_category, count(*) FROM delivery_attempts
WHERE webhook_id = $1 AND executed_at >= $2 AND failure_category IS NOT NULL
GROUP BY failure_category`
	healthDeliveriesSQL = `SELECT status, count(*), coalesce(sum(postponed_count), 0) FROM deliveries
WHERE webhook_id = $1 AND created_at >= $2 GROUP BY status`
	lastSuccessSQL = `SELECT max(completed_at) FROM deliveries WHERE webhook_id = $1 AND status = 'succeeded'`
)

// Health summarises a webhook's last hour of deliveries.
func (r *Reader) Health(ctx context.Context, webhookID uuid.UUID, now time.Time) (Health, error) {
	since := now.Add(-healthWindow)
	h := Health{WindowSeconds: int(healthWindow.Seconds()), ErrorsByCategory: map[string]int{}, Deliveries: map[string]int64{}}
	err := r.pool.QueryRow(ctx, healthAttemptsSQL, webhookID, since).Scan(&h.Attempts, &h.Successes,
		&h.LatencyMS.P50, &h.LatencyMS.P95, &h.LatencyMS.P99, &h.LastSuccessAt)
	if err != nil {
		return Health{}, fmt.Errorf("webhook health: %w", err)
	}
	if h.Attempts > 0 {
		rate := float64(h.Successes) / float64(h.Attempts)
		h.SuccessRate = &rate
	}
	if h.LastSuccessAt == nil {
		if err := r.pool.QueryRow(ctx, lastSuccessSQL, webhookID).Scan(&h.LastSuccessAt); err != nil {
			return Health{}, fmt.Errorf("webhook last success: %w", err)
		}
	}
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
	if err := r.collect(ctx, healthDeliveriesSQL, webhookID, since, func(row pgx.CollectableRow) error {
		var status string
		var n, postponed int64
		if err := row.Scan(&status, &n, &postponed); err != nil {
			return err
		}
		h.Deliveries[status] = n
		h.Postponements += postponed
		return nil
	}); err != nil {
		return Health{}, err
	}
	if h.LastSuccessAt != nil {
		t := h.LastSuccessAt.UTC()
		h.LastSuccessAt = &t
	}
	return h, nil
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
