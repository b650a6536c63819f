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
// window of whole minutes ending with the current one.
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

// allTenants is the scope of the rollups that count every tenant together.
var allTenants = uuid.Nil

// Stats read the rollups (delivery_rollups, attempt_rollups and
// dead_letter_rollups, kept as deliveries and attempts are written, by
// triggers or by the writing process's Tally): a window is its whole minutes, the current one included, read
// as hourly rows for its whole hours and minute rows at its edges, so a
// day is at most 24 + 2 x 59 rows of each of a scope's shards whatever
// the traffic.
const (
	statsDeliveriesSQL = `SELECT coalesce(sum(created), 0), coalesce(sum(retrying), 0),
    coalesce(sum(succeeded), 0), coalesce(sum(exhausted), 0), coalesce(sum(cancelled), 0)
FROM delivery_rollups WHERE ` + periodRows

	statsAttemptsSQL = `SELECT coalesce(sum(attempts), 0), coalesce(sum(successes), 0)
FROM attempt_rollups WHERE ` + periodRows

	statsLatencySQL = `SELECT l.key::int, sum(l.value::bigint)
FROM attempt_rollups, jsonb_each_text(latency) AS l
WHERE ` + periodRows + `
GROUP BY 1`

	statsDLQSQL = `SELECT coalesce(sum(exhausted - retried), 0) FROM dead_letter_rollups
WHERE hourly = false AND at = '-infinity' AND (@tenant_id::uuid IS NULL OR tenant_id = @tenant_id::uuid)`
)

// Stats returns the totals of tenantID, or of every tenant when it is nil.
func (r *Reader) Stats(ctx context.Context, tenantID *uuid.UUID, now time.Time) (Stats, error) {
	s := Stats{TenantID: tenantID, GeneratedAt: now.UTC(),
		LastHour: newStatsWindow(statsHour), LastDay: newStatsWindow(statsDay)}
	scope := allTenants
	if tenantID != nil {
		scope = *tenantID
	}
	for _, w := range []*StatsWindow{&s.LastHour, &s.LastDay} {
		args := windowOf(now, time.Duration(w.WindowSeconds)*time.Second).args(pgx.NamedArgs{"scope": scope})
		if err := r.windowTotals(ctx, args, w); err != nil {
			return Stats{}, err
		}
	}
	if err := r.pool.QueryRow(ctx, statsDLQSQL, pgx.NamedArgs{"tenant_id": tenantID}).Scan(&s.DLQSize); err != nil {
		return Stats{}, fmt.Errorf("stats: dlq: %w", err)
	}
	return s, nil
}

// windowTotals fills w from the rollups args select.
func (r *Reader) windowTotals(ctx context.Context, args pgx.NamedArgs, w *StatsWindow) error {
	var created, retrying, succeeded, exhausted, cancelled int64
	if err := r.pool.QueryRow(ctx, statsDeliveriesSQL, args).Scan(&created, &retrying, &succeeded, &exhausted,
		&cancelled); err != nil {
		return fmt.Errorf("stats: deliveries: %w", err)
	}
	for st, n := range deliveryStates(created, retrying, succeeded, exhausted, cancelled) {
		w.Deliveries[st] = n
	}
	if err := r.pool.QueryRow(ctx, statsAttemptsSQL, args).Scan(&w.Attempts, &w.Successes); err != nil {
		return fmt.Errorf("stats: attempts: %w", err)
	}
	h, err := r.histogram(ctx, statsLatencySQL, args)
	if err != nil {
		return fmt.Errorf("stats: latency: %w", err)
	}
	w.SuccessRate, w.LatencyMS = rate(w.Successes, w.Attempts), latencyOf(h)
	return nil
}

// deliveryStates is the deliveries created in a period by their state now,
// from the rollups' counts. Counts the processes tally reach the rollups
// up to a second apart (history.Tally): an attempt may be counted before
// its delivery's creation, or a success before the failure before it, so
// a state never shows fewer than none.
func deliveryStates(created, retrying, succeeded, exhausted, cancelled int64) map[wire.Status]int64 {
	return map[wire.Status]int64{
		wire.Pending:   max(created-max(retrying, 0)-max(succeeded, 0)-max(exhausted, 0)-max(cancelled, 0), 0),
		wire.Retrying:  max(retrying, 0),
		wire.Succeeded: max(succeeded, 0),
		wire.Exhausted: max(exhausted, 0),
		wire.Cancelled: max(cancelled, 0),
	}
}

// histogram sums the latency histograms of the rows sql selects.
func (r *Reader) histogram(ctx context.Context, sql string, args ...any) (histogram, error) {
	rows, err := r.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	h := histogram{}
	var bucket int
	var n int64
	_, err = pgx.ForEachRow(rows, []any{&bucket, &n}, func() error {
		h[bucket] += n
		return nil
	})
	return h, err
}

// latencyOf is the percentiles of h.
func latencyOf(h histogram) LatencyMS {
	return LatencyMS{P50: h.percentile(0.5), P95: h.percentile(0.95), P99: h.percentile(0.99)}
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

// recentSQL counts the attempts and successes of each of a tenant's
// webhooks over a window from their rollups; a webhook of another tenant
// counts nothing.
var recentSQL = `SELECT scope_id, sum(attempts), sum(successes) FROM attempt_rollups
WHERE ` + periodRowsOfAny + `
GROUP BY scope_id`

// tenantsWebhooksSQL keeps of ids the tenant's webhooks.
const tenantsWebhooksSQL = `SELECT coalesce(array_agg(id), '{}') FROM webhooks WHERE id = ANY(@ids::uuid[]) AND tenant_id = @tenant_id`

// RecentAttempts returns the attempts and successes of each of the
// tenant's webhooks ids over the window ending with now's minute; a
// webhook without attempts is left out. now is the present: the window's
// last hour is read from its hourly rows (period.throughNow).
func (r *Reader) RecentAttempts(ctx context.Context, tenantID uuid.UUID, ids []uuid.UUID, window time.Duration,
	now time.Time) (map[uuid.UUID][2]int64, error) {
	var scopes []uuid.UUID
	if err := r.pool.QueryRow(ctx, tenantsWebhooksSQL, pgx.NamedArgs{"ids": ids, "tenant_id": tenantID}).Scan(&scopes); err != nil {
		return nil, fmt.Errorf("recent attempts: %w", err)
	}
	args := windowOf(now, window).throughNow().args(pgx.NamedArgs{"scopes": scopes})
	rows, err := r.pool.Query(ctx, recentSQL, args)
	if err != nil {
		return nil, fmt.Errorf("recent attempts: %w", err)
	}
	out := map[uuid.UUID][2]int64{}
	var id uuid.UUID
	var n, ok int64
	if _, err := pgx.ForEachRow(rows, []any{&id, &n, &ok}, func() error {
		out[id] = [2]int64{n, ok}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("recent attempts: %w", err)
	}
	return out, nil
}
