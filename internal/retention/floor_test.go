package retention

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// keptIDs lists a step's rows in retention_kept.
func (f *fixture) keptIDs(step string) []uuid.UUID {
	f.t.Helper()
	rows, err := f.pool.Query(f.ctx, `SELECT id FROM retention_kept WHERE step = $1 ORDER BY id`, step)
	require.NoError(f.t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	require.NoError(f.t, err)
	return ids
}

// A run reads the old deliveries and payloads from where the last one
// ended: it lists the rows it keeps, looks at them again by id once a
// day, and moves each step's floor to its cutoff. A kept delivery goes
// once it is done with (resolved, finished), and its event's payload with
// it; one gone otherwise leaves the list.
func TestOnceReadsEachOldRowOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	now := time.Now().UTC()
	old := now.Add(-100 * 24 * time.Hour)

	done := f.event(old.Add(-time.Hour))
	ids := make([]uuid.UUID, 20000)
	for i := range ids {
		ids[i] = v7At(old.Add(-time.Hour + time.Duration(i)*time.Millisecond))
	}
	f.exec(`INSERT INTO deliveries (id, tenant_id, event_id, webhook_id, priority, status, attempt_count, created_at)
SELECT id, $2, $3, $4, 'normal', 'succeeded', 1, $5 FROM unnest($1::uuid[]) id`, ids, f.tenant, done, f.webhook, old.Add(-time.Hour))
	waiting := f.event(old)
	exhausted := f.delivery(waiting, old, "exhausted", nil, 0)
	pending := f.delivery(waiting, old.Add(time.Second), "pending", nil, 0)
	vanishing := f.delivery(waiting, old.Add(2*time.Second), "pending", nil, 0)

	rep, err := f.job().Once(f.ctx, now)
	require.NoError(t, err)
	require.EqualValues(t, 20000, rep.Deliveries)
	require.EqualValues(t, 1, rep.Events, "the event of the deleted deliveries")
	require.False(t, f.eventExists(done))
	require.Equal(t, []uuid.UUID{exhausted, pending, vanishing}, f.keptIDs("deliveries"))
	require.Equal(t, []uuid.UUID{waiting}, f.keptIDs("payloads"))
	cut := cutoffsAt(now, f.job().cfg)
	var floor uuid.UUID
	var revisited *time.Time
	require.NoError(t, f.pool.QueryRow(f.ctx, floorSQL, "deliveries").Scan(&floor, &revisited))
	require.Equal(t, idBound(cut.attempts), floor)
	require.NotNil(t, revisited)
	require.WithinDuration(t, now, *revisited, time.Microsecond, "the first run looked at the (empty) list")
	require.NoError(t, f.pool.QueryRow(f.ctx, floorSQL, "payloads").Scan(&floor, &revisited))
	require.Equal(t, idBound(cut.payloads), floor)

	// A delivery below the floor that no run listed (written with an id
	// that old after the run) shows that the next run reads from the
	// floor: it is not read again.
	unseen := f.delivery(waiting, old.Add(3*time.Second), "succeeded", nil, 0)
	rep, err = f.job().Once(f.ctx, now.Add(time.Hour))
	require.NoError(t, err)
	require.Zero(t, rep.Deliveries+rep.Payloads, "the kept ones are still needed")
	require.Len(t, f.keptIDs("deliveries"), 3)
	require.True(t, f.deliveryExists(unseen))
	f.exec(`DELETE FROM deliveries WHERE id = $1`, unseen)

	retry := f.delivery(waiting, now.Add(-time.Minute), "succeeded", &exhausted, 1)
	f.exec(`UPDATE deliveries SET status = 'cancelled' WHERE id = $1`, pending)
	f.exec(`DELETE FROM deliveries WHERE id = $1`, vanishing)
	rep, err = f.job().Once(f.ctx, now.Add(2*time.Hour))
	require.NoError(t, err)
	require.Zero(t, rep.Deliveries+rep.Payloads, "the list is looked at once a day")
	require.True(t, f.deliveryExists(exhausted))

	rep, err = f.job().Once(f.ctx, now.Add(revisitEvery))
	require.NoError(t, err)
	require.EqualValues(t, 2, rep.Deliveries, "the resolved and the cancelled")
	require.EqualValues(t, 1, rep.Payloads)
	require.False(t, f.deliveryExists(exhausted))
	require.False(t, f.deliveryExists(pending))
	require.True(t, f.deliveryExists(retry))
	require.False(t, f.hasPayload(waiting))
	require.Empty(t, f.keptIDs("deliveries"))
	require.Empty(t, f.keptIDs("payloads"))
}

// A retry goes with or after the delivery it retried: the link is what
// resolves that one. An exhausted delivery listed while unresolved, whose
// exhausted retry passes the cutoff after a retry of the retry succeeded,
// stays listed with the retry until the next look at the list, where both
// go; neither is kept for good.
func TestOnceDeletesARetryWithOrAfterTheDeliveryItRetried(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	now := time.Now().UTC()
	cutoff := cutoffsAt(now, f.job().cfg).attempts
	ev := f.event(cutoff.Add(-time.Hour))
	first := f.delivery(ev, cutoff.Add(-10*time.Minute), "exhausted", nil, 0)
	retry := f.delivery(ev, cutoff.Add(10*time.Minute), "exhausted", &first, 0)

	_, err := f.job().Once(f.ctx, now)
	require.NoError(t, err)
	require.Equal(t, []uuid.UUID{first}, f.keptIDs("deliveries"))

	last := f.delivery(ev, now, "succeeded", &retry, 1)
	_, err = f.job().Once(f.ctx, now.Add(time.Hour))
	require.NoError(t, err)
	require.True(t, f.deliveryExists(retry), "resolved, but the delivery it retried is still there")
	require.Equal(t, []uuid.UUID{first, retry}, f.keptIDs("deliveries"))

	rep, err := f.job().Once(f.ctx, now.Add(time.Hour+revisitEvery))
	require.NoError(t, err)
	require.EqualValues(t, 2, rep.Deliveries)
	require.False(t, f.deliveryExists(first), "resolved through its retry's retry")
	require.False(t, f.deliveryExists(retry))
	require.True(t, f.deliveryExists(last))
	require.Empty(t, f.keptIDs("deliveries"))
}

// A listed delivery that finished stays until the next look at the list,
// and its attempts with it: the run between keeps its attempts in the
// default partition, and the one that deletes it removes them.
func TestOnceKeepsTheAttemptsOfAListedDeliveryUntilItGoes(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	now := time.Now().UTC()
	old := now.Add(-100 * 24 * time.Hour)
	ev := f.event(old)
	pending := f.delivery(ev, old, "pending", nil, 2)

	_, err := f.job().Once(f.ctx, now)
	require.NoError(t, err)
	require.Equal(t, []uuid.UUID{pending}, f.keptIDs("deliveries"))
	require.Equal(t, []int{1, 2}, f.attemptNumbers(pending))

	f.attempt(pending, old, 3)
	f.exec(`UPDATE deliveries SET status = 'succeeded', attempt_count = 3 WHERE id = $1`, pending)
	_, err = f.job().Once(f.ctx, now.Add(time.Hour))
	require.NoError(t, err)
	require.True(t, f.deliveryExists(pending))
	require.Equal(t, []int{1, 2, 3}, f.attemptNumbers(pending))

	rep, err := f.job().Once(f.ctx, now.Add(revisitEvery))
	require.NoError(t, err)
	require.EqualValues(t, 1, rep.Deliveries)
	require.EqualValues(t, 3, rep.Attempts)
	require.False(t, f.deliveryExists(pending))
	require.Zero(t, f.count(`SELECT count(*) FROM delivery_attempts WHERE delivery_id = $1`, pending))
}
