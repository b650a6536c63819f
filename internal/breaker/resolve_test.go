package breaker

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/db/dbtest"
	"github.com/hookline/hookline/internal/redistest"
)

// ResolveAll gives each circuit what Resolve gives it, with Redis up and
// with Redis unreachable: an override on top, the live circuit under it,
// the persisted state while Redis does not answer.
func TestResolveAllIsResolveOfEachCircuit(t *testing.T) {
	f := newFixture(t, redistest.Single)
	pool := dbtest.New(t)
	ctx := context.Background()
	var circuits []Circuit
	for _, id := range dbtest.Seed(t, pool, 4).Webhooks {
		circuits = append(circuits, Circuit{WebhookID: id, Config: f.cfg})
	}
	forced, live, persisted := circuits[0].WebhookID, circuits[1].WebhookID, circuits[2].WebhookID
	o := NewOverrides(pool)
	require.NoError(t, o.Force(ctx, forced, "open", nil))
	now := time.Now()
	f.recordN(live.String(), now, f.cfg.MinimumThroughput, false, false)
	_, err := pool.Exec(ctx, `INSERT INTO circuit_breaker_states (webhook_id, state, opened_at, sleep_window_ms, updated_at)
VALUES ($1, 'open', $2, 30000, $2)`, persisted, now.Add(-time.Minute))
	require.NoError(t, err)

	down := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	t.Cleanup(func() { _ = down.Close() })
	for _, tc := range []struct {
		name   string
		b      *Breaker
		states []State
		source string
	}{
		{"redis up", f.b, []State{Open, Open, Closed, Closed}, "redis"},
		{"redis down", New(down, f.prefix), []State{Open, Closed, Open, Closed}, "postgres"},
	} {
		all, err := ResolveAll(ctx, tc.b, o, circuits, now)
		require.NoError(t, err, tc.name)
		require.Len(t, all, len(circuits), tc.name)
		for i, c := range circuits {
			one, err := Resolve(ctx, tc.b, o, c.WebhookID, c.Config, now)
			require.NoError(t, err, tc.name)
			require.Equal(t, one, all[i], "%s: circuit %d", tc.name, i)
			require.Equal(t, tc.states[i], all[i].State, "%s: circuit %d", tc.name, i)
			require.Equal(t, tc.source, all[i].Source, "%s: circuit %d", tc.name, i)
		}
	}
	none, err := ResolveAll(ctx, f.b, o, nil, now)
	require.NoError(t, err)
	require.Empty(t, none)
}
