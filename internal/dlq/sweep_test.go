package dlq

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/db/dbtest"
)

// dlqFixture is a database with a tenant, two webhooks and one event,
// and a sweeper of it with the default timings.
type dlqFixture struct {
	t    *testing.T
	pool *pgxpool.Pool
	seed dbtest.Seeded
	s    *Sweeper
}

func newDLQFixture(t *testing.T) *dlqFixture {
	pool := dbtest.New(t)
	return &dlqFixture{t: t, pool: pool, seed: dbtest.Seed(t, pool, 2),
		s: NewSweeper(pool, &taskRecorder{}, slog.New(slog.DiscardHandler))}
}

func (f *dlqFixture) exec(sql string, args ...any) {
	f.t.Helper()
	_, err := f.pool.Exec(context.Background(), sql, args...)
	require.NoError(f.t, err)
}

func (f *dlqFixture) time(sql string, args ...any) time.Time {
	f.t.Helper()
	var at time.Time
	require.NoError(f.t, f.pool.QueryRow(context.Background(), sql, args...).Scan(&at))
	return at
}

// exhausted stores an exhausted delivery of the first webhook, completed
// ago before now, whose dead letter is not recorded.
func (f *dlqFixture) exhausted(ago time.Duration) uuid.UUID {
	f.t.Helper()
	var id uuid.UUID
	require.NoError(f.t, f.pool.QueryRow(context.Background(), `INSERT INTO deliveries
    (id, tenant_id, event_id, webhook_id, priority, status, attempt_count, completed_at)
VALUES (uuidv7(), $1, $2, $3, 'normal', 'exhausted', 5, now() - $4::interval)
RETURNING id`, f.seed.Tenant, f.seed.Event, f.seed.Webhooks[0], ago).Scan(&id))
	return id
}

func (f *dlqFixture) recorded(id uuid.UUID) bool {
	f.t.Helper()
	var ok bool
	require.NoError(f.t, f.pool.QueryRow(context.Background(),
		`SELECT dead_lettered_at IS NOT NULL FROM deliveries WHERE id = $1`, id).Scan(&ok))
	return ok
}

// The sweep of lost dead letters records those over its age late and no
// others, moves its floor to the oldest it left (one another transaction
// holds, or one not yet due), never past five minutes before now, and
// reads deliveries_unrecorded_idx from there: after 20,000 deliveries were
// exhausted and recorded two days ago, it reads a few pages, where the
// same read from the first entry reads every entry they left. Its pass
// from the start finds what a longer transaction left behind the floor.
func TestExhaustedSweepReadsFromItsFloor(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newDLQFixture(t)
	f.exec(`INSERT INTO deliveries (id, tenant_id, event_id, webhook_id, priority, status, attempt_count, completed_at)
SELECT uuidv7(), $1, $2, $3, 'normal', 'exhausted', 5, now() - interval '2 days' + g * interval '1 ms'
FROM generate_series(1, 20000) g`, f.seed.Tenant, f.seed.Event, f.seed.Webhooks[0])
	f.exec(`UPDATE deliveries SET dead_lettered_at = now() WHERE status = 'exhausted'`)

	late, held, fresh := f.exhausted(3*time.Hour), f.exhausted(10*time.Minute), f.exhausted(10*time.Second)
	holder, err := f.pool.Begin(ctx)
	require.NoError(t, err)
	defer holder.Rollback(ctx) //nolint:errcheck // released below
	_, err = holder.Exec(ctx, `SELECT 1 FROM deliveries WHERE id = $1 FOR UPDATE`, held)
	require.NoError(t, err)

	require.NoError(t, f.s.sweepExhausted(ctx, false))
	require.True(t, f.recorded(late))
	require.False(t, f.recorded(held), "another transaction holds it")
	require.False(t, f.recorded(fresh), "not a minute late")
	floor := f.time(`SELECT floor FROM dead_letter_sweep_floor`)
	heldAt := f.time(`SELECT completed_at FROM deliveries WHERE id = $1`, held)
	require.True(t, floor.Equal(heldAt), "the floor is the held delivery's %v, not %v", heldAt, floor)

	require.NoError(t, holder.Rollback(ctx))
	require.NoError(t, f.s.sweepExhausted(ctx, false))
	require.True(t, f.recorded(held))
	require.False(t, f.recorded(fresh))
	floor = f.time(`SELECT floor FROM dead_letter_sweep_floor`)
	require.True(t, floor.Before(time.Now().Add(-sweepFloorLag+time.Minute)), "never past the lag: %v", floor)
	require.True(t, floor.After(heldAt), "past the held delivery: %v", floor)

	// From the floor, and from the first entry.
	fromFloor := dbtest.PagesRead(t, f.pool, sweepSQL, f.s.Age, false)
	fromStart := dbtest.PagesRead(t, f.pool, `SELECT id FROM deliveries
WHERE status = 'exhausted' AND dead_lettered_at IS NULL AND completed_at < now() - interval '1 minute'
ORDER BY completed_at LIMIT 1000`)
	t.Logf("pages read: %d from the floor, %d from the first entry", fromFloor, fromStart)
	require.Less(t, fromFloor, 20)
	require.Greater(t, fromStart, fromFloor+30, "the entries of the 20,000 recorded deliveries")
	require.False(t, f.recorded(fresh))

	// A delivery exhausted by a transaction that began before the floor
	// and committed after the sweep: the sweeps from the floor leave it,
	// the pass from the start records it.
	long := f.exhausted(20 * time.Minute)
	require.NoError(t, f.s.sweepExhausted(ctx, false))
	require.False(t, f.recorded(long), "behind the floor")
	require.NoError(t, f.s.sweepExhausted(ctx, true))
	require.True(t, f.recorded(long), "found from the start")
	require.False(t, f.recorded(fresh))
}

// The sweep of lost deliveries hands back to the relay those enqueued, not
// parked and untouched for over an hour, and no others, and reads each
// webhook's unfinished deliveries from its unfinished floor, which it
// moves: after 20,000 deliveries of one webhook finished two days ago, it
// reads a few pages, where the same read through the partial index from
// its first entry reads every entry they left.
func TestLostSweepReadsFromTheUnfinishedFloors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newDLQFixture(t)
	hook, other := f.seed.Webhooks[0], f.seed.Webhooks[1]
	f.exec(`INSERT INTO deliveries (id, tenant_id, event_id, webhook_id, priority, status, enqueued_at)
SELECT uuidv7_floor(now() - interval '2 days' + g * interval '1 ms'), $1, $2, $3, 'normal', 'pending', now()
FROM generate_series(1, 20000) g`, f.seed.Tenant, f.seed.Event, hook)
	f.exec(`UPDATE deliveries SET status = 'succeeded', completed_at = now() WHERE webhook_id = $1`, hook)

	// copy stores a pending delivery of webhook w created two hours ago
	// (its id the older, the earlier it was enqueued), enqueued (and last
	// touched) ago before now, parked or not.
	copyOf := func(w uuid.UUID, ago time.Duration, parked bool) uuid.UUID {
		t.Helper()
		var id uuid.UUID
		require.NoError(t, f.pool.QueryRow(ctx, `INSERT INTO deliveries
    (id, tenant_id, event_id, webhook_id, priority, status, enqueued_at, created_at, updated_at, parked_at, park_reason)
VALUES (uuidv7_floor(now() - interval '2 hours' - $4::interval / 1000), $1, $2, $3, 'normal', 'pending',
        now() - $4::interval, now() - interval '2 hours', now() - $4::interval,
        CASE WHEN $5 THEN now() END, CASE WHEN $5 THEN 'order' END)
RETURNING id`, f.seed.Tenant, f.seed.Event, w, ago, parked).Scan(&id))
		return id
	}
	lost := []uuid.UUID{copyOf(hook, 2*time.Hour, false), copyOf(other, 90*time.Minute, false)}
	kept := []uuid.UUID{copyOf(hook, 100*time.Minute, true), copyOf(hook, 10*time.Minute, false)}
	f.exec(`ANALYZE deliveries`)

	enqueued := func(ids []uuid.UUID) []bool {
		t.Helper()
		out := make([]bool, len(ids))
		for i, id := range ids {
			require.NoError(t, f.pool.QueryRow(ctx, `SELECT enqueued_at IS NOT NULL FROM deliveries WHERE id = $1`, id).Scan(&out[i]))
		}
		return out
	}
	require.NoError(t, f.s.sweepLost(ctx))
	require.Equal(t, []bool{false, false}, enqueued(lost), "handed back to the relay")
	require.Equal(t, []bool{true, true}, enqueued(kept), "left alone")
	var floor uuid.UUID
	require.NoError(t, f.pool.QueryRow(ctx, `SELECT floor FROM webhook_unfinished_floors WHERE webhook_id = $1`, hook).Scan(&floor))
	require.Equal(t, lost[0], floor, "the webhook's oldest unfinished delivery")

	// The other webhook's delivery ends: the next sweep moves its floor to
	// five minutes ago, and the one after leaves it out (nothing of it
	// can be lost before its floor is an hour old).
	f.exec(`UPDATE deliveries SET status = 'succeeded', completed_at = now() WHERE id = $1`, lost[1])
	otherFloor := func() uuid.UUID {
		t.Helper()
		var id uuid.UUID
		require.NoError(t, f.pool.QueryRow(ctx, `SELECT floor FROM webhook_unfinished_floors WHERE webhook_id = $1`, other).Scan(&id))
		return id
	}
	require.NoError(t, f.s.sweepLost(ctx))
	moved := otherFloor()
	require.Greater(t, moved.String(), lost[1].String(), "moved past the delivery that ended")
	require.NoError(t, f.s.sweepLost(ctx))
	require.Equal(t, moved, otherFloor(), "left out")

	fromFloor := dbtest.PagesRead(t, f.pool, lostWebhooksSQL, f.s.LostAge) +
		dbtest.PagesRead(t, f.pool, lostSQL, f.s.LostAge, hook, f.seed.Tenant, lostPerSweep)
	fromStart := dbtest.PagesRead(t, f.pool, `SELECT id FROM deliveries
WHERE webhook_id = $1 AND status IN ('pending', 'retrying') AND parked_at IS NULL AND enqueued_at < now() - interval '1 hour'
ORDER BY id LIMIT 1000`, hook)
	t.Logf("pages read: %d from the floors, %d from the first entry", fromFloor, fromStart)
	require.Less(t, fromFloor, 60)
	require.Greater(t, fromStart, fromFloor+60, "the entries of the 20,000 finished deliveries")
}

// A webhook with a delivery parked for two days (its webhook paused) is
// looked at by every sweep, its floor held there; each sweep after the
// first reads its deliveries through its span, not the entries of the
// 20,000 deliveries that finished since, and still finds one lost among
// them.
func TestLostSweepReadsPastAnOldUnfinishedDelivery(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newDLQFixture(t)
	hook := f.seed.Webhooks[0]
	var parked uuid.UUID
	require.NoError(t, f.pool.QueryRow(ctx, `INSERT INTO deliveries
    (id, tenant_id, event_id, webhook_id, priority, status, enqueued_at, parked_at, park_reason, next_attempt_at,
     created_at, updated_at)
VALUES (uuidv7_floor(now() - interval '2 days'), $1, $2, $3, 'normal', 'pending', now() - interval '2 days',
        now() - interval '2 days', 'inactive', now() - interval '2 days', now() - interval '2 days', now() - interval '2 days')
RETURNING id`, f.seed.Tenant, f.seed.Event, hook).Scan(&parked))
	f.exec(`INSERT INTO deliveries (id, tenant_id, event_id, webhook_id, priority, status, enqueued_at)
SELECT uuidv7_floor(now() - interval '1 day' + g * interval '1 ms'), $1, $2, $3, 'normal', 'pending', now()
FROM generate_series(1, 20000) g`, f.seed.Tenant, f.seed.Event, hook)
	f.exec(`UPDATE deliveries SET status = 'succeeded', completed_at = now() WHERE webhook_id = $1 AND id <> $2`, hook, parked)
	// A delivery enqueued 90 minutes ago whose message was lost.
	var lost uuid.UUID
	require.NoError(t, f.pool.QueryRow(ctx, `INSERT INTO deliveries
    (id, tenant_id, event_id, webhook_id, priority, status, enqueued_at, created_at, updated_at)
VALUES (uuidv7_floor(now() - interval '90 minutes'), $1, $2, $3, 'normal', 'pending',
        now() - interval '90 minutes', now() - interval '90 minutes', now() - interval '90 minutes')
RETURNING id`, f.seed.Tenant, f.seed.Event, hook).Scan(&lost))
	f.exec(`ANALYZE deliveries`)
	enqueued := func(id uuid.UUID) bool {
		t.Helper()
		var ok bool
		require.NoError(t, f.pool.QueryRow(ctx, `SELECT enqueued_at IS NOT NULL FROM deliveries WHERE id = $1`, id).Scan(&ok))
		return ok
	}
	require.NoError(t, f.s.sweepLost(ctx))
	require.False(t, enqueued(lost), "handed back to the relay")
	var floor uuid.UUID
	require.NoError(t, f.pool.QueryRow(ctx, `SELECT floor FROM webhook_unfinished_floors WHERE webhook_id = $1`, hook).Scan(&floor))
	require.Equal(t, parked, floor, "held by the parked delivery")

	// Its message is lost again, and the next sweep finds it by its span.
	f.exec(`UPDATE deliveries SET enqueued_at = now() - interval '90 minutes', updated_at = now() - interval '90 minutes',
    next_attempt_at = now() - interval '90 minutes' WHERE id = $1`, lost)
	webhooks := dbtest.PagesRead(t, f.pool, lostWebhooksSQL, f.s.LostAge)
	sweep := dbtest.PagesRead(t, f.pool, lostSQL, f.s.LostAge, hook, f.seed.Tenant, lostPerSweep)
	fromFloor := dbtest.PagesRead(t, f.pool, `SELECT id FROM deliveries
WHERE webhook_id = $1 AND status IN ('pending', 'retrying') AND id >= $2 AND parked_at IS NULL
  AND enqueued_at < now() - interval '1 hour'
ORDER BY id LIMIT 1000`, hook, floor)
	t.Logf("pages read: %d finding the webhooks, %d sweeping the webhook, %d from its floor", webhooks, sweep, fromFloor)
	require.Less(t, webhooks+sweep, 60)
	require.Greater(t, fromFloor, webhooks+sweep+60, "the entries of the 20,000 finished deliveries")
	require.False(t, enqueued(lost), "handed back to the relay again")
	require.True(t, enqueued(parked), "a parked delivery is left alone")
}
