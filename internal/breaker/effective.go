package breaker

import (
	"context"
	"time"

	"github.com/google/uuid"
	"golang.org/x/sync/errgroup"
)

// The rules that decide which circuit is in force live here, once, for the
// worker that acts on them and the API and console that show them:
//
//   - an operator's override (force_open, force_close) wins while it lasts;
//     an override whose end has passed is gone;
//   - otherwise the live circuit in Redis;
//   - when Redis is unreachable, the state last persisted in Postgres if it
//     was decided less than FallbackMaxAge ago, else closed (fail open:
//     deliveries go on rather than stop on a stale open).

// FallbackMaxAge is how old a persisted state may be and still stand in for
// the live circuit while Redis is unreachable.
const FallbackMaxAge = 5 * time.Minute

// Override returns the operator's override in force at now: its state and
// its end (nil: until reset). ok is false when there is none, or it has
// ended.
func (p Persisted) Override(now time.Time) (state State, until *time.Time, ok bool) {
	if p.ForcedState == nil || p.ForcedUntil != nil && !now.Before(*p.ForcedUntil) {
		return "", nil, false
	}
	return State(*p.ForcedState), p.ForcedUntil, true
}

// Fallback returns the state to act on while Redis is unreachable: the
// persisted one if decided less than FallbackMaxAge before now, else
// closed.
func (p Persisted) Fallback(now time.Time) State {
	if p.State == "" || now.Sub(p.UpdatedAt) >= FallbackMaxAge {
		return Closed
	}
	return p.State
}

// Effective is a webhook's circuit as it is in force.
type Effective struct {
	// State is the circuit in force: the override's, else the live or
	// fallback state.
	State State
	// Source is where the state underneath the override came from: redis,
	// or postgres while Redis is unreachable.
	Source string
	// OpenedAt and SleepWindow describe the open or half-open circuit
	// underneath the override (nil and 0 when closed).
	OpenedAt    *time.Time
	SleepWindow time.Duration
	// ForcedState and ForcedUntil are the override in force, if any.
	ForcedState *State
	ForcedUntil *time.Time
	// Live is the Redis snapshot; nil while Redis is unreachable.
	Live *Snapshot
}

// Resolve reads the circuit of a webhook in force at now: the override and
// the persisted state from Postgres, the live circuit from Redis.
func Resolve(ctx context.Context, b *Breaker, o *Overrides, webhookID uuid.UUID, cfg Config, now time.Time) (Effective, error) {
	persisted, _, err := o.Load(ctx, webhookID)
	if err != nil {
		return Effective{}, err
	}
	snap, err := b.Snapshot(ctx, webhookID.String(), cfg, now)
	return resolve(persisted, snap, err, now), nil
}

// Circuit names a webhook's circuit and its configuration.
type Circuit struct {
	WebhookID uuid.UUID
	Config    Config
}

// resolveAllAtOnce is how many live circuits ResolveAll reads from Redis at
// once.
const resolveAllAtOnce = 8

// ResolveAll is Resolve of each circuit, in their order: the persisted
// states in one statement, the live circuits a few at a time, so that a
// page of webhooks costs about one round trip to each store instead of one
// per webhook.
func ResolveAll(ctx context.Context, b *Breaker, o *Overrides, circuits []Circuit, now time.Time) ([]Effective, error) {
	ids := make([]uuid.UUID, len(circuits))
	for i, c := range circuits {
		ids[i] = c.WebhookID
	}
	persisted, err := o.LoadAll(ctx, ids)
	if err != nil {
		return nil, err
	}
	out := make([]Effective, len(circuits))
	var g errgroup.Group
	g.SetLimit(resolveAllAtOnce)
	for i, c := range circuits {
		g.Go(func() error {
			p, ok := persisted[c.WebhookID]
			if !ok {
				p = Persisted{State: Closed}
			}
			snap, err := b.Snapshot(ctx, c.WebhookID.String(), c.Config, now)
			out[i] = resolve(p, snap, err, now)
			return nil
		})
	}
	_ = g.Wait() // each read's error is its circuit's fallback
	return out, nil
}

// resolve applies the rules above to a persisted circuit and the live one
// (snapErr: Redis did not answer).
func resolve(persisted Persisted, snap Snapshot, snapErr error, now time.Time) Effective {
	var e Effective
	if forced, until, ok := persisted.Override(now); ok {
		e.ForcedState, e.ForcedUntil = &forced, until
	}
	if snapErr != nil {
		e.Source, e.State = "postgres", persisted.Fallback(now)
		if e.State != Closed {
			e.OpenedAt, e.SleepWindow = persisted.OpenedAt, time.Duration(persisted.SleepWindowMS)*time.Millisecond
		}
	} else {
		e.Source, e.State, e.Live = "redis", snap.State, &snap
		if snap.State != Closed {
			opened := snap.OpenedAt
			e.OpenedAt, e.SleepWindow = &opened, snap.SleepWindow
		}
	}
	if e.ForcedState != nil {
		e.State = *e.ForcedState
	}
	return e
}
