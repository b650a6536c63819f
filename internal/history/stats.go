package history

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/hookline/hookline/internal/wire"
)

// Stats are the totals of one tenant, or of every tenant: deliveries by
// state, attempts, success rate and latency over the last hour and day,
// and the DLQ as GET /v1/dlq lists it now.
type Stats struct {
	TenantID    *uuid.UUID  `json:"tenant_id"`
	GeneratedAt time.Time   `json:"generated_at"`
	LastHour    StatsWindow `json:"last_hour"`
	LastDay     StatsWindow `json:"last_day"`
	DLQSize     int64       `json:"dlq_size"`
}

// StatsWindow covers the deliveries created and the attempts made in a
// window ending now.
type StatsWindow struct {
	WindowSeconds int `json:"window_seconds"`
	// Deliveries counts the deliveries created in the window by their
	// state now; every state is present.
	Deliveries  map[wire.Status]int64 `json:"deliveries"`
	Attempts    int64                 `json:"attempts"`
	Successes   int64                 `json:"successes"`
	SuccessRate *float64              `json:"success_rate"`
	LatencyMS   LatencyMS             `json:"latency_ms"`
}

// The windows of Stats.
const (
	statsHour = time.Hour
	statsDay  = 24 * time.Hour
)

// The tenant's rows are found through its webhooks, whose indexes lead
// with webhook_id; @tenant_id NULL means every tenant. Deliveries are
// bounded by id as well as created_at so that the primary key limits the
// rows read (ids are UUIDv7, see IDAt).
const (
	statsWebhooks = `(@tenant_id::uuid IS NULL OR %s.webhook_id IN (SELECT w.id FROM webhooks w WHERE w.tenant_id = @tenant_id::uuid))`

	statsDeliveriesSQL = `SELECT d.status, count(*), count(*) FILTER (WHERE d.created_at >= @hour)
FROM deliveries d
WHERE ` + "%s" + ` AND d.created_at >= @day AND d.id >= @day_id
GROUP BY d.status`

	statsAttemptsSQL = `SELECT count(*), count(*) FILTER (WHERE a.status_code BETWEEN 200 AND 299),
    round(percentile_cont(0.5) WITHIN GROUP (ORDER BY a.duration_ms)::numeric, 1)::float8,
    round(percentile_cont(0.95) WITHIN GROUP (ORDER BY a.duration_ms)::numeric, 1)::float8,
    round(percentile_cont(0.99) WITHIN GROUP (ORDER BY a.duration_ms)::numeric, 1)::float8,
    count(*) FILTER (WHERE a.executed_at >= @hour),
    count(*) FILTER (WHERE a.executed_at >= @hour AND a.status_code BETWEEN 200 AND 299),
    round((percentile_cont(0.5) WITHIN GROUP (ORDER BY a.duration_ms) FILTER (WHERE a.executed_at >= @hour))::numeric, 1)::float8,
    round((percentile_cont(0.95) WITHIN GROUP (ORDER BY a.duration_ms) FILTER (WHERE a.executed_at >= @hour))::numeric, 1)::float8,
    round((percentile_cont(0.99) WITHIN GROUP (ORDER BY a.duration_ms) FILTER (WHERE a.executed_at >= @hour))::numeric, 1)::float8
FROM delivery_attempts a
WHERE ` + "%s" + ` AND a.executed_at >= @day`

	statsDLQSQL = `SELECT count(*) FROM deliveries d
WHERE d.status = 'exhausted' AND (@tenant_id::uuid IS NULL OR d.tenant_id = @tenant_id::uuid)
  AND ` + NotRetried
)

var (
	statsDeliveries = fmt.Sprintf(statsDeliveriesSQL, fmt.Sprintf(statsWebhooks, "d"))
	statsAttempts   = fmt.Sprintf(statsAttemptsSQL, fmt.Sprintf(statsWebhooks, "a"))
)

// Stats returns the totals of tenantID, or of every tenant when it is nil.
func (r *Reader) Stats(ctx context.Context, tenantID *uuid.UUID, now time.Time) (Stats, error) {
	s := Stats{TenantID: tenantID, GeneratedAt: now.UTC(),
		LastHour: newStatsWindow(statsHour), LastDay: newStatsWindow(statsDay)}
	args := pgx.NamedArgs{"tenant_id": tenantID, "hour": now.Add(-statsHour), "day": now.Add(-statsDay),
		"day_id": IDAt(now.Add(-statsDay - IDSlack))}

	rows, err := r.pool.Query(ctx, statsDeliveries, args)
	if err != nil {
		return Stats{}, fmt.Errorf("stats: deliveries: %w", err)
	}
	_, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (struct{}, error) {
		var status wire.Status
		var day, hour int64
		if err := row.Scan(&status, &day, &hour); err != nil {
			return struct{}{}, err
		}
		s.LastDay.Deliveries[status], s.LastHour.Deliveries[status] = day, hour
		return struct{}{}, nil
	})
	if err != nil {
		return Stats{}, fmt.Errorf("stats: deliveries: %w", err)
	}

	d, h := &s.LastDay, &s.LastHour
	if err := r.pool.QueryRow(ctx, statsAttempts, args).Scan(
		&d.Attempts, &d.Successes, &d.LatencyMS.P50, &d.LatencyMS.P95, &d.LatencyMS.P99,
		&h.Attempts, &h.Successes, &h.LatencyMS.P50, &h.LatencyMS.P95, &h.LatencyMS.P99); err != nil {
		return Stats{}, fmt.Errorf("stats: attempts: %w", err)
	}
	d.SuccessRate, h.SuccessRate = rate(d.Successes, d.Attempts), rate(h.Successes, h.Attempts)

	if err := r.pool.QueryRow(ctx, statsDLQSQL, args).Scan(&s.DLQSize); err != nil {
		return Stats{}, fmt.Errorf("stats: dlq: %w", err)
	}
	return s, nil
}

func newStatsWindow(d time.Duration) StatsWindow {
	w := StatsWindow{WindowSeconds: int(d.Seconds()), Deliveries: map[wire.Status]int64{}}
	for _, st := range wire.Statuses {
		w.Deliveries[st] = 0
	}
	return w
}

// rate is successes/attempts, or nil without attempts.
func rate(successes, attempts int64) *float64 {
	if attempts == 0 {
		return nil
	}
	r := float64(successes) / float64(attempts)
	return &r
}
