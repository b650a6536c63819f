package breaker

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/db/dbtest"
)

// A circuit's hold and release move the deliveries parked behind that
// circuit and no others, and read deliveries_circuit_parked_idx through
// the webhook's unfinished span, which they move. After 20,000 deliveries
// were parked behind the circuit two days ago, released and delivered, one
// was parked three hours ago, and 20,000 more of two hours ago were
// delivered, a hold reads a few pages, where the same update from the
// floor (the one of three hours ago) reads every entry the later 20,000
// left in the index, and from the webhook's first entry all 40,000.
func TestCircuitHoldAndReleaseReadFromTheUnfinishedFloor(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	s := dbtest.Seed(t, pool, 2)
	hook, other := s.Webhooks[0], s.Webhooks[1]
	exec := func(sql string, args ...any) {
		t.Helper()
		_, err := pool.Exec(ctx, sql, args...)
		require.NoError(t, err)
	}
	// park stores a delivery of webhook w, with the id of ago before now,
	// parked for reason until a minute from now.
	park := func(w uuid.UUID, ago time.Duration, reason string) uuid.UUID {
		t.Helper()
		var id uuid.UUID
		require.NoError(t, pool.QueryRow(ctx, `INSERT INTO deliveries
    (id, tenant_id, event_id, webhook_id, priority, status, parked_at, park_reason, next_attempt_at)
VALUES (uuidv7_floor(now() - $4::interval), $1, $2, $3, 'normal', 'retrying', now(), $5, now() + interval '1 minute')
RETURNING id`, s.Tenant, s.Event, w, ago, reason).Scan(&id))
		return id
	}

	exec(`INSERT INTO deliveries (id, tenant_id, event_id, webhook_id, priority, status, parked_at, park_reason, next_attempt_at)
SELECT uuidv7_floor(now() - interval '2 days' + g * interval '1 ms'), $1, $3, $2, 'normal', 'pending',
       now(), 'circuit_open', now() + interval '1 minute'
FROM generate_series(1, 20000) g`, s.Tenant, hook, s.Event)
	require.NoError(t, ReleaseParked(ctx, pool, hook))
	var released int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM deliveries WHERE webhook_id = $1 AND park_reason = 'released'`, hook).Scan(&released))
	require.Equal(t, 20000, released)
	exec(`UPDATE deliveries SET status = 'succeeded', parked_at = NULL, park_reason = NULL, completed_at = now() WHERE webhook_id = $1`, hook)

	// Behind the circuit now: one parked since three hours ago, three of
	// the last seconds. Not behind it: another webhook's, and one of this
	// webhook's waiting for its host.
	behind := []uuid.UUID{park(hook, 3*time.Hour, "circuit_open")}
	// After it, 20,000 more parked behind the circuit two hours ago, and
	// delivered: their entries lie between it and now.
	exec(`INSERT INTO deliveries (id, tenant_id, event_id, webhook_id, priority, status, parked_at, park_reason, next_attempt_at)
SELECT uuidv7_floor(now() - interval '2 hours' + g * interval '1 ms'), $1, $3, $2, 'normal', 'pending',
       now(), 'circuit_open', now() + interval '1 minute'
FROM generate_series(1, 20000) g`, s.Tenant, hook, s.Event)
	exec(`UPDATE deliveries SET status = 'succeeded', parked_at = NULL, park_reason = NULL, completed_at = now()
WHERE webhook_id = $1 AND id > $2 AND id < uuidv7_floor(now() - interval '1 hour')`, hook, behind[0])
	for i := range 3 {
		behind = append(behind, park(hook, time.Duration(3-i)*time.Second, "circuit_open"))
	}
	notBehind := []uuid.UUID{park(other, 1500*time.Millisecond, "circuit_open"), park(hook, 500*time.Millisecond, "host_busy")}
	exec(`ANALYZE deliveries`)

	due := func(ids []uuid.UUID) []*time.Time {
		t.Helper()
		out := make([]*time.Time, len(ids))
		for i, id := range ids {
			require.NoError(t, pool.QueryRow(ctx, `SELECT next_attempt_at FROM deliveries WHERE id = $1`, id).Scan(&out[i]))
		}
		return out
	}
	untouched := due(notBehind)
	until := time.Now().Add(time.Hour).UTC().Truncate(time.Microsecond)
	require.NoError(t, HoldParked(ctx, pool, hook, &until))
	for i, at := range due(behind) {
		require.NotNil(t, at, "delivery %d", i)
		require.True(t, until.Equal(*at), "delivery %d held until %v, not %v", i, *at, until)
	}
	require.Equal(t, untouched, due(notBehind))
	var floor uuid.UUID
	require.NoError(t, pool.QueryRow(ctx, `SELECT floor FROM webhook_unfinished_floors WHERE webhook_id = $1`, hook).Scan(&floor))
	require.Equal(t, behind[0], floor, "the oldest unfinished delivery")

	// The hold again, through the span (the one of three hours ago by id,
	// the range from the head), the same update from the floor, and from
	// the webhook's first entry.
	throughSpan := dbtest.PagesRead(t, pool, holdParkedSQL, hook, until)
	fromFloor := dbtest.PagesRead(t, pool, `UPDATE deliveries SET next_attempt_at = $2, updated_at = now()
WHERE webhook_id = $1 AND id >= $3 AND park_reason = 'circuit_open' AND status IN ('pending', 'retrying')`, hook, until, floor)
	fromStart := dbtest.PagesRead(t, pool, `UPDATE deliveries SET next_attempt_at = $2, updated_at = now()
WHERE webhook_id = $1 AND park_reason = 'circuit_open' AND status IN ('pending', 'retrying')`, hook, until)
	t.Logf("pages read: %d through the span, %d from the floor, %d from the first entry", throughSpan, fromFloor, fromStart)
	require.Less(t, throughSpan, 150)
	require.Greater(t, fromFloor, throughSpan+100, "the entries of the 20,000 delivered after the oldest")
	require.Greater(t, fromStart, fromFloor+100, "and of the 20,000 released before it")

	require.NoError(t, ReleaseParked(ctx, pool, hook))
	var reasons []string
	require.NoError(t, pool.QueryRow(ctx, `SELECT array_agg(park_reason ORDER BY id) FROM deliveries WHERE id = ANY($1)`, behind).Scan(&reasons))
	require.Equal(t, []string{"released", "released", "released", "released"}, reasons)
	require.Equal(t, untouched, due(notBehind))
}
