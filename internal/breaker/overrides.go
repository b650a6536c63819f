package breaker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
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

// Force holds the circuit open or closed ("open", "closed") until until, or
// indefinitely when until is nil.
func (o *Overrides) Force(ctx context.Context, webhookID uuid.UUID, state string, until *time.Time) error {
	if state != "open" && state != "closed" {
		return fmt.Errorf("force circuit: state must be open or closed, got %q", state)
	}
	if _, err := o.pool.Exec(ctx, forceSQL, webhookID, state, until); err != nil {
		return fmt.Errorf("force circuit: %w", err)
	}
	return nil
}

// Reset clears any override and records the circuit as closed.
func (o *Overrides) Reset(ctx context.Context, webhookID uuid.UUID) error {
	if _, err := o.pool.Exec(ctx, resetSQL, webhookID); err != nil {
		return fmt.Errorf("reset circuit: %w", err)
	}
	return nil
}
