package schedule

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/db/dbtest"
)

// parkedFixture makes a tenant with webhooks a and b and an event; park
// adds a delivery of hook parked for reason until in from now.
func parkedFixture(t *testing.T, pool *pgxpool.Pool) (a, b uuid.UUID, park func(hook uuid.UUID, reason Reason, in time.Duration) uuid.UUID) {
	t.Helper()
	seed := dbtest.Seed(t, pool, 2)
	return seed.Webhooks[0], seed.Webhooks[1], func(hook uuid.UUID, reason Reason, in time.Duration) uuid.UUID {
		id := uuid.New()
		_, err := pool.Exec(context.Background(), `INSERT INTO deliveries (id, tenant_id, event_id, webhook_id, priority, parked_at, park_reason, next_attempt_at)
			VALUES ($1, $2, $3, $4, 'normal', now(), $5, now() + make_interval(secs => $6::float8))`,
			id, seed.Tenant, seed.Event, hook, string(reason), in.Seconds())
		require.NoError(t, err)
		return id
	}
}

// Hasten gives the deliveries of the named webhooks parked for a busy host
// new times one step apart from now, in the order of their reservations,
// and leaves alone every delivery whose reservation is sooner, of another
// webhook, or parked for another reason.
func TestHastenBringsForwardAHostsParkedDeliveries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	a, b, park := parkedFixture(t, pool)
	late := []uuid.UUID{
		park(a, HostBusy, 60*time.Second),
		park(a, HostBusy, 30*time.Second),
		park(a, HostBusy, 45*time.Second),
	}
	soon := park(a, HostBusy, 3*time.Second)
	circuit := park(a, CircuitOpen, 30*time.Second)
	other := park(b, HostBusy, 30*time.Second)
	untilOf := func(id uuid.UUID) (until, updated time.Time) {
		require.NoError(t, pool.QueryRow(ctx, `SELECT next_attempt_at, updated_at FROM deliveries WHERE id = $1`, id).Scan(&until, &updated))
		return until, updated
	}
	before := map[uuid.UUID]time.Time{}
	for _, id := range []uuid.UUID{soon, circuit, other} {
		before[id], _ = untilOf(id)
	}

	n, err := Hasten(ctx, pool, []uuid.UUID{a}, 5*time.Second)
	require.NoError(t, err)
	require.EqualValues(t, 3, n)
	// In their order (30, 45, 60 s), after soon's turn (5 s, later than
	// its 3): 10, 15 and 20 s from the statement's now.
	for i, id := range []uuid.UUID{late[1], late[2], late[0]} {
		until, updated := untilOf(id)
		require.Equal(t, time.Duration(i+2)*5*time.Second, until.Sub(updated), "delivery %d", i)
	}
	for id, was := range before {
		until, _ := untilOf(id)
		require.True(t, was.Equal(until), "delivery %s must keep its time", id)
	}
	var parked int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM deliveries WHERE park_reason = 'host_busy' AND id = ANY($1)`, late).Scan(&parked))
	require.Equal(t, 3, parked, "still parked for their host, the wakers publish them at their new times")

	n, err = Hasten(ctx, pool, []uuid.UUID{a}, 5*time.Second)
	require.NoError(t, err)
	require.Zero(t, n, "each already at its turn")
}
