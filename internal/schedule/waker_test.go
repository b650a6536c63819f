package schedule

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/db/dbtest"
	"github.com/hookline/hookline/internal/queue"
	"github.com/hookline/hookline/internal/wire"
)

func parkedRow(hook uuid.UUID, reason Reason, probes int, sleepMS int64) parked {
	return parked{task: wire.Task{DeliveryID: uuid.New(), WebhookID: hook}, reason: reason, probes: probes,
		sleepMS: sleepMS, webhookID: hook}
}

// Behind a circuit only its probes are woken; the rest wait another sleep
// window. Other reasons are all woken.
func TestProbesOnly(t *testing.T) {
	t.Parallel()
	a, b := uuid.New(), uuid.New()
	due := []parked{
		parkedRow(a, CircuitOpen, 2, 30000),
		parkedRow(a, RateLimited, 5, 30000),
		parkedRow(a, CircuitOpen, 2, 30000),
		parkedRow(b, CircuitOpen, 1, 60000),
		parkedRow(a, CircuitOpen, 2, 30000),
		parkedRow(b, CircuitOpen, 1, 60000),
		parkedRow(b, TenantShare, 1, 60000),
		parkedRow(a, CircuitOpen, 0, 30000), // a broken config still lets one go
	}
	wake, hold := probesOnly(due)
	var woken []uuid.UUID
	for _, p := range wake {
		woken = append(woken, p.task.DeliveryID)
	}
	require.Equal(t, []uuid.UUID{due[0].task.DeliveryID, due[1].task.DeliveryID, due[2].task.DeliveryID,
		due[3].task.DeliveryID, due[6].task.DeliveryID}, woken)
	require.Equal(t, map[int64][]uuid.UUID{
		30000: {due[4].task.DeliveryID, due[7].task.DeliveryID},
		60000: {due[5].task.DeliveryID},
	}, hold)
}

// publishedIDs is a publisher that confirms every message and remembers
// their ids.
type publishedIDs struct{ ids []string }

func (p *publishedIDs) Publish(_ context.Context, msgs ...queue.Message) error {
	for _, m := range msgs {
		p.ids = append(p.ids, m.ID)
	}
	return nil
}

// A waker's pass reads from shortly before the previous pass's due time,
// not from the oldest entry of deliveries_wake_idx, which keeps an entry
// for every delivery parked since the last vacuum. A delivery parked until
// long before (a clock behind the database's) waits for the pass from the
// floor, once every FloorEvery, when it is at most FloorLag late, and for
// the pass from the oldest entry, once every FullEvery, otherwise. One
// that another transaction held through a pass keeps the floor at it.
func TestWakerPassesReadFromTheLastPassTheFloorAndTheOldest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	a, _, park := parkedFixture(t, pool)
	pub := &publishedIDs{}
	w := NewWaker(pool, pub, slog.New(slog.DiscardHandler))
	pass := func() int {
		t.Helper()
		n, err := w.Pass(ctx)
		require.NoError(t, err)
		return n
	}

	first := park(a, Backoff, -time.Hour)
	held := park(a, Backoff, -3*time.Hour)
	holder, err := pool.Begin(ctx)
	require.NoError(t, err)
	_, err = holder.Exec(ctx, `SELECT 1 FROM deliveries WHERE id = $1 FOR UPDATE`, held)
	require.NoError(t, err)
	require.Equal(t, 1, pass(), "the first pass reads from the oldest entry, past the held delivery")
	require.NoError(t, holder.Rollback(ctx))

	withinLag := park(a, Backoff, -2*time.Minute)
	require.Zero(t, pass(), "due long before the last pass")
	recent := park(a, RateLimited, -time.Second)
	require.Equal(t, 1, pass(), "due since the last pass")

	w.Scan.FloorEvery = 0
	require.Equal(t, 2, pass(), "the pass from the floor, which stayed at the held delivery")

	withinLagAgain := park(a, Backoff, -2*time.Minute)
	beyondLag := park(a, Backoff, -10*time.Minute)
	require.Equal(t, 1, pass(), "the floor moved on to FloorLag before the due bound")
	w.Scan.FullEvery = 0
	require.Equal(t, 1, pass(), "the pass from the oldest entry")
	require.Equal(t, []string{first.String(), recent.String(), held.String(), withinLag.String(), withinLagAgain.String(),
		beyondLag.String()}, pub.ids)
}

// Between vacuums deliveries_unfinished_idx keeps an entry for every
// delivery that was ever unfinished, while the statistics show almost none
// unfinished. The waker's statements read deliveries_wake_idx, not that
// index, whether Postgres runs them from a generic plan or a custom one.
func TestWakerStatementsReadTheWakeIndexBetweenVacuums(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	seed := dbtest.Seed(t, pool, 1)
	dbtest.FinishedBehind(t, pool, seed, seed.Webhooks[0], 20000)
	_, err := pool.Exec(ctx, `INSERT INTO deliveries (id, tenant_id, event_id, webhook_id, priority, parked_at, park_reason, next_attempt_at)
VALUES (uuidv7(), $1, $2, $3, 'normal', now(), 'backoff', now() - interval '1 second')`, seed.Tenant, seed.Event, seed.Webhooks[0])
	require.NoError(t, err)

	for _, tc := range []struct {
		name, sql string
		args      []string
	}{
		{"due", dueSQL, []string{"now()", "500"}},
		{"due since", dueSinceSQL, []string{"now()", "500", "now() - interval '1 minute'"}},
		{"oldest", oldestSQL, nil},
		{"oldest since", oldestSinceSQL, []string{"now() - interval '1 minute'"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dbtest.ReadsIndex(t, pool, "deliveries_wake_idx", 20, tc.sql, tc.args...)
		})
	}
}
