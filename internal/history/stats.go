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

// AllTenants is the scope of the rollups that count every tenant together.
var AllTenants = uuid.Nil

// Stats read the rollups (delivery_rollups, attempt_rollups and
// dead_letter_rollups, kept by triggers as deliveries and attempts are
// written): a window is its whole minutes, the current one included, so a
// day is 1,440 rows of each of a scope's shards whatever the traffic.
const (
	statsDeliveriesSQL = `SELECT minute >= @hour, coalesce(sum(created), 0), coalesce(sum(retrying), 0),
    coalesce(sum(succeeded), 0), coalesce(sum(exhausted), 0), coalesce(sum(cancelled), 0)
FROM delivery_rollups WHERE scope_id = @scope AND minute >= @day
GROUP BY 1`

	statsAttemptsSQL = `SELECT minute >= @hour, sum(attempts), sum(successes)
FROM attempt_rollups WHERE scope_id = @scope AND minute >= @day
GROUP BY 1`

	statsLatencySQL = `SELECT minute >= @hour, l.key::int, sum(l.value::bigint)
FROM attempt_rollups, jsonb_each_text(latency) AS l
WHERE scope_id = @scope AND minute >= @day
GROUP BY 1, 2`

	statsDLQSQL = `SELECT coalesce(sum(exhausted - retried), 0) FROM dead_letter_rollups
WHERE @tenant_id::uuid IS NULL OR tenant_id = @tenant_id::uuid`
)

// windowStart is the first minute of the window d ending with now's minute.
func windowStart(now time.Time, d time.Duration) time.Time {
	return now.UTC().Truncate(time.Minute).Add(-d + time.Minute)
}

// Stats returns the totals of tenantID, or of every tenant when it is nil.
func (r *Reader) Stats(ctx context.Context, tenantID *uuid.UUID, now time.Time) (Stats, error) {
	s := Stats{TenantID: tenantID, GeneratedAt: now.UTC(),
		LastHour: newStatsWindow(statsHour), LastDay: newStatsWindow(statsDay)}
	scope := AllTenants
	if tenantID != nil {
		scope = *tenantID
	}
	args := pgx.NamedArgs{"scope": scope, "tenant_id": tenantID,
		"hour": windowStart(now, statsHour), "day": windowStart(now, statsDay)}
	if err := r.statsDeliveries(ctx, args, &s); err != nil {
		return Stats{}, err
	}
	if err := r.statsAttempts(ctx, args, &s); err != nil {
		return Stats{}, err
	}
	if err := r.pool.QueryRow(ctx, statsDLQSQL, args).Scan(&s.DLQSize); err != nil {
		return Stats{}, fmt.Errorf("stats: dlq: %w", err)
	}
	return s, nil
}

// statsDeliveries fills the deliveries by state of both windows: the day's
// rows are the hour's and the older ones.
func (r *Reader) statsDeliveries(ctx context.Context, args pgx.NamedArgs, s *Stats) error {
	rows, err := r.pool.Query(ctx, statsDeliveriesSQL, args)
	if err != nil {
		return fmt.Errorf("stats: deliveries: %w", err)
	}
	var recent bool
	var created, retrying, succeeded, exhausted, cancelled int64
	_, err = pgx.ForEachRow(rows, []any{&recent, &created, &retrying, &succeeded, &exhausted, &cancelled}, func() error {
		for _, w := range windowsOf(s, recent) {
			w.Deliveries[wire.Pending] += created - retrying - succeeded - exhausted - cancelled
			w.Deliveries[wire.Retrying] += retrying
			w.Deliveries[wire.Succeeded] += succeeded
			w.Deliveries[wire.Exhausted] += exhausted
			w.Deliveries[wire.Cancelled] += cancelled
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("stats: deliveries: %w", err)
	}
	return nil
}

// statsAttempts fills the attempts, successes and latency of both windows.
func (r *Reader) statsAttempts(ctx context.Context, args pgx.NamedArgs, s *Stats) error {
	rows, err := r.pool.Query(ctx, statsAttemptsSQL, args)
	if err != nil {
		return fmt.Errorf("stats: attempts: %w", err)
	}
	var recent bool
	var attempts, successes int64
	_, err = pgx.ForEachRow(rows, []any{&recent, &attempts, &successes}, func() error {
		for _, w := range windowsOf(s, recent) {
			w.Attempts += attempts
			w.Successes += successes
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("stats: attempts: %w", err)
	}
	hour, day := histogram{}, histogram{}
	rows, err = r.pool.Query(ctx, statsLatencySQL, args)
	if err != nil {
		return fmt.Errorf("stats: latency: %w", err)
	}
	var bucket int
	var n int64
	_, err = pgx.ForEachRow(rows, []any{&recent, &bucket, &n}, func() error {
		day[bucket] += n
		if recent {
			hour[bucket] += n
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("stats: latency: %w", err)
	}
	for _, x := range []struct {
		w *StatsWindow
		h histogram
	}{{&s.LastHour, hour}, {&s.LastDay, day}} {
		x.w.SuccessRate = rate(x.w.Successes, x.w.Attempts)
		x.w.LatencyMS = latencyOf(x.h)
	}
	return nil
}

// windowsOf is the windows a row counts in: both when it is in the last
// hour, else only the day.
func windowsOf(s *Stats, recent bool) []*StatsWindow {
	if recent {
		return []*StatsWindow{&s.LastHour, &s.LastDay}
	}
	return []*StatsWindow{&s.LastDay}
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
