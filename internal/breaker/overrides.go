package breaker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookline/hookline/internal/unfinished"
	"github.com/hookline/hookline/internal/wire"
)

// Persisted is a webhook's circuit as kept in Postgres: the last state a
// worker saw (the fallback when Redis is down) and the operator's override,
// which lives only here so that it survives a Redis flush.
type Persisted struct {
	State         State      `json:"state"`
	OpenedAt      *time.Time `json:"opened_at"`
	SleepWindowMS int64      `json:"sleep_window_ms"`
	ForcedState   *string    `json:"forced_state"`
	ForcedUntil   *time.Time `json:"forced_until"`
	UpdatedAt     time.Time  `json:"updated_at"`
}

// Overrides reads and writes persisted circuits.
type Overrides struct {
	pool *pgxpool.Pool
}

// NewOverrides returns an Overrides on pool.
func NewOverrides(pool *pgxpool.Pool) *Overrides { return &Overrides{pool: pool} }

const (
	loadPersistedSQL = `SELECT state, opened_at, sleep_window_ms, forced_state, forced_until, updated_at
FROM circuit_breaker_states WHERE webhook_id = $1`
	loadAllPersistedSQL = `SELECT webhook_id, state, opened_at, sleep_window_ms, forced_state, forced_until, updated_at
FROM circuit_breaker_states WHERE webhook_id = ANY($1)`
	forceSQL = `INSERT INTO circuit_breaker_states (webhook_id, state, forced_state, forced_until, updated_at)
VALUES ($1, 'closed', $2, $3, now())
ON CONFLICT (webhook_id) DO UPDATE SET forced_state = $2, forced_until = $3, updated_at = now()`
	resetSQL = `INSERT INTO circuit_breaker_states (webhook_id, state, updated_at) VALUES ($1, 'closed', now())
ON CONFLICT (webhook_id) DO UPDATE SET state = 'closed', opened_at = NULL, sleep_window_ms = 0,
    forced_state = NULL, forced_until = NULL, updated_at = now()`
)

// Load returns the persisted circuit of a webhook; ok is false when none
// was ever written.
func (o *Overrides) Load(ctx context.Context, webhookID uuid.UUID) (Persisted, bool, error) {
	var p Persisted
	var state string
	err := o.pool.QueryRow(ctx, loadPersistedSQL, webhookID).Scan(&state, &p.OpenedAt, &p.SleepWindowMS, &p.ForcedState, &p.ForcedUntil, &p.UpdatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Persisted{State: Closed}, false, nil
	}
	if err != nil {
		return Persisted{}, false, fmt.Errorf("load circuit: %w", err)
	}
	p.State = State(state)
	return p, true, nil
}

// LoadAll returns the persisted circuits of webhookIDs in one statement;
// a webhook whose circuit was never written is left out.
func (o *Overrides) LoadAll(ctx context.Context, webhookIDs []uuid.UUID) (map[uuid.UUID]Persisted, error) {
	rows, err := o.pool.Query(ctx, loadAllPersistedSQL, webhookIDs)
	if err != nil {
		return nil, fmt.Errorf("load circuits: %w", err)
	}
	out := make(map[uuid.UUID]Persisted, len(webhookIDs))
	var id uuid.UUID
	var p Persisted
	var state string
	if _, err := pgx.ForEachRow(rows, []any{&id, &state, &p.OpenedAt, &p.SleepWindowMS, &p.ForcedState, &p.ForcedUntil,
		&p.UpdatedAt}, func() error {
		p.State = State(state)
		out[id] = p
		return nil
	}); err != nil {
		return nil, fmt.Errorf("load circuits: %w", err)
	}
	return out, nil
}

// Force holds the circuit open or closed ("open", "closed") until until, or
// indefinitely when until is nil. Forced closed, the deliveries parked
// behind the circuit are released at once; forced open, they wait until
// until (or until an operator acts).
func (o *Overrides) Force(ctx context.Context, webhookID uuid.UUID, state string, until *time.Time) error {
	if state != "open" && state != "closed" {
		return fmt.Errorf("force circuit: state must be open or closed, got %q", state)
	}
	return pgx.BeginFunc(ctx, o.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, forceSQL, webhookID, state, until); err != nil {
			return fmt.Errorf("force circuit: %w", err)
		}
		if state == "closed" {
			return ReleaseParked(ctx, tx, webhookID)
		}
		return HoldParked(ctx, tx, webhookID, until)
	})
}

// Reset clears any override, records the circuit as closed and releases
// the deliveries parked behind it.
func (o *Overrides) Reset(ctx context.Context, webhookID uuid.UUID) error {
	return pgx.BeginFunc(ctx, o.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, resetSQL, webhookID); err != nil {
			return fmt.Errorf("reset circuit: %w", err)
		}
		return ReleaseParked(ctx, tx, webhookID)
	})
}

// Deliveries held back by an open circuit wait in Postgres (park_reason
// circuit_open, see package schedule) until next_attempt_at, when the
// workers' wakers let the half-open probes go. The circuit's decisions
// move that time: a close releases them all now (park_reason released,
// which the wakers publish at once, every one), a re-opening holds them
// until the next half-open period.
//
// They are unfinished, so each statement reads deliveries_circuit_parked_idx
// through the webhook's unfinished span, which it moves first (package
// unfinished): the old unfinished deliveries by id, and the range from the
// span's head. The index keeps an entry for every delivery ever parked
// behind the circuit until a vacuum. The update then finds them by primary
// key (= ANY of their array; naming their state so that no partial index
// serves, see wire.UnfinishedByKey).
var (
	releaseParkedSQL = parkedSQL(`park_reason = 'released', next_attempt_at = now(), updated_at = now()`)
	holdParkedSQL    = parkedSQL(`next_attempt_at = $2, updated_at = now()`)
)

// parkedSQL updates with set the deliveries parked behind the circuit of
// webhook $1.
func parkedSQL(set string) string {
	return `WITH hook AS (SELECT tenant_id FROM webhooks WHERE id = $1), ` +
		unfinished.AdvanceFloor("$1", "(SELECT tenant_id FROM hook)") + `
UPDATE deliveries SET ` + set + `
WHERE id = ANY (ARRAY(
        SELECT id FROM deliveries
        WHERE webhook_id = $1 AND id >= (SELECT head FROM span)
          AND park_reason = 'circuit_open' AND status IN ('pending', 'retrying')
        UNION ALL
        SELECT id FROM deliveries
        WHERE id = ANY ((SELECT behind FROM span)::uuid[]) AND webhook_id = $1
          AND park_reason = 'circuit_open' AND ` + wire.UnfinishedByKey("status") + `))
  AND webhook_id = $1 AND park_reason = 'circuit_open' AND ` + wire.UnfinishedByKey("status")
}

// execer is a pool or a transaction.
type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// ReleaseParked makes every delivery parked behind the webhook's circuit
// due now: the circuit closed, or an operator reset or force-closed it.
func ReleaseParked(ctx context.Context, db execer, webhookID uuid.UUID) error {
	if _, err := db.Exec(ctx, releaseParkedSQL, webhookID); err != nil {
		return fmt.Errorf("release deliveries parked behind circuit %s: %w", webhookID, err)
	}
	return nil
}

// HoldParked makes every delivery parked behind the webhook's circuit due
// at until, the circuit's next half-open time (nil: until an operator
// acts).
func HoldParked(ctx context.Context, db execer, webhookID uuid.UUID, until *time.Time) error {
	if _, err := db.Exec(ctx, holdParkedSQL, webhookID, until); err != nil {
		return fmt.Errorf("hold deliveries parked behind circuit %s: %w", webhookID, err)
	}
	return nil
}
