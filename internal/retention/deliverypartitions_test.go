package retention

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/testwait"
)

// An old week of deliveries goes whole. What is still needed moves to the
// default partition first: the delivery in flight, the DLQ's entries and
// the retries, with their attempts and events; the DLQ's counts stay as
// they were. The daily look at the kept rows then deletes those a retry
// resolved, through their delete trigger.
func TestOnceDropsAnOldWeekOfDeliveries(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	now := time.Now().UTC()
	old := now.Truncate(24 * time.Hour).Add(-100*24*time.Hour + 12*time.Hour)
	week, _, _ := f.weekPartitions(old)

	succeeded := f.delivery(f.event(old), old, "succeeded", nil, 2)
	cancelled := f.delivery(f.event(old), old, "cancelled", nil, 0)
	inFlight := f.delivery(f.event(old), old, "retrying", nil, 1)
	dlq := f.event(old)
	exhausted := f.delivery(dlq, old, "exhausted", nil, 1)
	resolvedEvent := f.event(old)
	resolved := f.delivery(resolvedEvent, old, "exhausted", nil, 1)
	retry := f.delivery(resolvedEvent, old.Add(time.Hour), "succeeded", &resolved, 1)
	// An attempt kept when an earlier partition went, of a delivery that
	// went on to succeed.
	f.retainedAttempt(succeeded, old)
	require.Equal(t, [2]int{2, 1}, f.deadLetters())

	rep, err := f.job().Once(f.ctx, now)
	require.NoError(t, err)
	require.Equal(t, int64(1), rep.DeliveryPartitions)
	require.Equal(t, int64(4), rep.DeliveriesKept)
	require.Zero(t, rep.Deliveries, "nothing deleted one by one")
	require.Equal(t, int64(1), rep.AttemptPartitions, "the week's attempts go once its deliveries went")
	require.Equal(t, int64(4), rep.AttemptsRetained)
	require.Equal(t, int64(1), rep.EventPartitions)
	require.Equal(t, int64(3), rep.EventsKept)
	require.False(t, f.exists(week))

	require.False(t, f.deliveryExists(succeeded) || f.deliveryExists(cancelled))
	require.Zero(t, f.count(`SELECT count(*) FROM delivery_attempts_retained WHERE delivery_id = $1`, succeeded))
	kept := []uuid.UUID{inFlight, exhausted, resolved, retry}
	rows, err := f.pool.Query(f.ctx, `SELECT id FROM deliveries_default`)
	require.NoError(t, err)
	moved, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	require.NoError(t, err)
	require.ElementsMatch(t, kept, moved)
	rows, err = f.pool.Query(f.ctx, `SELECT id FROM retention_kept WHERE step = 'deliveries'`)
	require.NoError(t, err)
	listed, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	require.NoError(t, err)
	require.ElementsMatch(t, kept, listed)
	require.Equal(t, []int{1}, f.attemptNumbers(exhausted), "the DLQ entry keeps its attempt")
	require.True(t, f.hasPayload(dlq))
	require.Equal(t, [2]int{2, 1}, f.deadLetters(), "moving the kept rows counts nothing again")

	// A worker still finds the delivery in flight.
	tag, err := f.pool.Exec(f.ctx, `UPDATE deliveries SET status = 'succeeded', completed_at = now()
		WHERE id = $1 AND status = 'retrying'`, inFlight)
	require.NoError(t, err)
	require.Equal(t, int64(1), tag.RowsAffected())

	// A day later, the kept rows are looked at again: the resolved entry
	// and its retry, and the delivery that finished, go.
	rep, err = f.job().Once(f.ctx, now.Add(25*time.Hour))
	require.NoError(t, err)
	require.Equal(t, int64(3), rep.Deliveries)
	require.True(t, f.deliveryExists(exhausted))
	require.False(t, f.deliveryExists(resolved) || f.deliveryExists(retry) || f.deliveryExists(inFlight))
	require.Equal(t, [2]int{1, 0}, f.deadLetters())
}

// A week with more deliveries to keep than the job moves under the lock
// is swapped for a partition of them, copied before the lock: what went
// and what stayed is as when they move, and a change committed between
// the copy and the lock is in the partition as it was committed. That
// partition is left as it is while it keeps more, and moves to the
// default partition once it keeps few.
func TestOnceSwapsAWeekOfManyKeptDeliveriesForAPartitionOfThem(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	now := time.Now().UTC()
	old := now.Truncate(24 * time.Hour).Add(-100*24*time.Hour + 12*time.Hour)
	week, _, _ := f.weekPartitions(old)

	succeeded := f.delivery(f.event(old), old, "succeeded", nil, 2)
	inFlight := f.delivery(f.event(old), old, "retrying", nil, 1)
	changing := f.delivery(f.event(old), old, "pending", nil, 0)
	finishing := f.delivery(f.event(old), old, "retrying", nil, 1)
	dlq := f.event(old)
	exhausted := f.delivery(dlq, old, "exhausted", nil, 1)
	resolvedEvent := f.event(old)
	resolved := f.delivery(resolvedEvent, old, "exhausted", nil, 1)
	retry := f.delivery(resolvedEvent, old.Add(time.Hour), "succeeded", &resolved, 1)
	f.retainedAttempt(succeeded, old)
	require.Equal(t, [2]int{2, 1}, f.deadLetters())

	// A worker's transaction, open while the job copies and committed
	// while it waits for the lock.
	worker, err := f.pool.Begin(f.ctx)
	require.NoError(t, err)
	defer worker.Rollback(f.ctx) //nolint:errcheck // committed below
	_, err = worker.Exec(f.ctx, `UPDATE deliveries SET status = 'retrying', attempt_count = 5 WHERE id = $1`, changing)
	require.NoError(t, err)
	_, err = worker.Exec(f.ctx, `UPDATE deliveries SET status = 'succeeded', completed_at = now() WHERE id = $1`, finishing)
	require.NoError(t, err)
	job := f.job()
	job.moveAtMost = 1
	job.lockTimeout = time.Minute
	type result struct {
		rep Report
		err error
	}
	done := make(chan result, 1)
	go func() {
		rep, err := job.Once(f.ctx, now)
		done <- result{rep, err}
	}()
	testwait.Eventually(t, 30*time.Second, func() bool {
		return f.count(`SELECT count(*) FROM pg_locks WHERE NOT granted AND mode = 'AccessExclusiveLock'
			AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
			AND relation = 'deliveries'::regclass`) == 1
	}, "the job waits for the lock of deliveries")
	// Meanwhile the tables its partition's foreign keys refer to take
	// writes: the worker's attempt records write webhooks.
	for _, table := range []string{"tenants", "webhooks", "batch_operations"} {
		require.NoError(t, pgx.BeginFunc(f.ctx, f.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(f.ctx, `SET LOCAL lock_timeout = '2s'`); err != nil {
				return err
			}
			_, err := tx.Exec(f.ctx, `UPDATE `+table+` SET id = id WHERE false`)
			return err
		}), "%s written while the job waits for the lock", table)
	}
	require.NoError(t, worker.Commit(f.ctx))
	res := <-done
	require.NoError(t, res.err)
	require.Equal(t, int64(1), res.rep.DeliveryPartitions)
	require.Equal(t, int64(5), res.rep.DeliveriesKept)
	require.Zero(t, res.rep.Deliveries, "nothing deleted one by one")

	kept := week + "_kept"
	require.False(t, f.exists(week))
	require.Equal(t, 1, f.count(`SELECT count(*) FROM pg_inherits WHERE inhrelid = $1::regclass AND inhparent = 'deliveries'::regclass`, kept))
	rows, err := f.pool.Query(f.ctx, `SELECT id FROM `+kept)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	require.NoError(t, err)
	require.ElementsMatch(t, []uuid.UUID{inFlight, changing, exhausted, resolved, retry}, ids)
	require.Zero(t, f.count(`SELECT count(*) FROM deliveries_default`))
	require.Equal(t, 5, f.count(`SELECT attempt_count FROM `+kept+` WHERE id = $1 AND status = 'retrying'`, changing),
		"the change committed after the copy")
	require.False(t, f.deliveryExists(succeeded) || f.deliveryExists(finishing))
	require.Zero(t, f.count(`SELECT count(*) FROM delivery_attempts_retained WHERE delivery_id = $1`, succeeded))
	require.Equal(t, []int{1}, f.attemptNumbers(exhausted), "the DLQ entry keeps its attempt")
	require.True(t, f.hasPayload(dlq))
	require.Equal(t, [2]int{2, 1}, f.deadLetters(), "the swap counts nothing again")
	require.True(t, f.exists(kept+"_pkey") && f.exists(kept+"_outbox_idx"), "its indexes named as a week's")
	require.Equal(t, 1, f.count(`SELECT count(*) WHERE has_table_privilege('hookline_dlq', $1, 'SELECT')`, kept),
		"the dlq's retention reads it, as the default partition")

	// Its rows are deliveries as any others: a worker finds the one in
	// flight, and the next look deletes it once it is done.
	tag, err := f.pool.Exec(f.ctx, `UPDATE deliveries SET status = 'succeeded', completed_at = now()
		WHERE id = $1 AND status = 'retrying'`, inFlight)
	require.NoError(t, err)
	require.Equal(t, int64(1), tag.RowsAffected())
	var oid uint32
	require.NoError(t, f.pool.QueryRow(f.ctx, `SELECT $1::regclass::oid`, kept).Scan(&oid))

	rep, err := job.Once(f.ctx, now.Add(25*time.Hour))
	require.NoError(t, err)
	require.Zero(t, rep.DeliveryPartitions, "two left, more than it moves: left as it is")
	require.Equal(t, int64(3), rep.Deliveries, "the resolved entry, its retry and the finished one, one by one")
	require.Equal(t, 2, f.count(`SELECT count(*) FROM `+kept))
	require.Equal(t, 1, f.count(`SELECT count(*) FROM pg_class WHERE oid = $1 AND relname = $2`, oid, kept), "not copied again")
	require.Equal(t, [2]int{1, 0}, f.deadLetters())

	job.moveAtMost = 2
	rep, err = job.Once(f.ctx, now.Add(25*time.Hour))
	require.NoError(t, err)
	require.Equal(t, int64(1), rep.DeliveryPartitions)
	require.Equal(t, int64(2), rep.DeliveriesKept)
	require.False(t, f.exists(kept))
	rows, err = f.pool.Query(f.ctx, `SELECT id FROM deliveries_default`)
	require.NoError(t, err)
	ids, err = pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	require.NoError(t, err)
	require.ElementsMatch(t, []uuid.UUID{changing, exhausted}, ids)
	require.Equal(t, [2]int{1, 0}, f.deadLetters())
}

// A run that stopped between preparing a week's partition of kept
// deliveries and swapping it in left that partition and its versions
// behind: the next run swaps the week all the same, with the rows as they
// are then, and leaves no versions behind.
func TestOnceSwapsAWeekAStoppedRunPrepared(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	now := time.Now().UTC()
	old := now.Truncate(24 * time.Hour).Add(-100*24*time.Hour + 12*time.Hour)
	week, _, _ := f.weekPartitions(old)
	exhausted := f.delivery(f.event(old), old, "exhausted", nil, 1)
	changing := f.delivery(f.event(old), old, "retrying", nil, 1)
	done := f.delivery(f.event(old), old, "succeeded", nil, 1)
	var prepared int64
	require.NoError(t, f.pool.QueryRow(f.ctx, `SELECT prepare_delivery_swap($1::regclass, 1)`, week).Scan(&prepared))
	require.Equal(t, int64(2), prepared)
	kept := week + "_kept"
	require.True(t, f.exists(kept) && f.exists(kept+"_versions"))
	_, err := f.pool.Exec(f.ctx, `UPDATE deliveries SET attempt_count = 4 WHERE id = $1`, changing)
	require.NoError(t, err)

	job := f.job()
	job.moveAtMost = 1
	rep, err := job.Once(f.ctx, now)
	require.NoError(t, err)
	require.Equal(t, int64(1), rep.DeliveryPartitions)
	require.Equal(t, int64(2), rep.DeliveriesKept)
	require.False(t, f.exists(week) || f.exists(kept+"_versions"))
	require.Equal(t, 1, f.count(`SELECT count(*) FROM pg_inherits WHERE inhrelid = $1::regclass AND inhparent = 'deliveries'::regclass`, kept))
	require.Equal(t, 4, f.count(`SELECT attempt_count FROM `+kept+` WHERE id = $1`, changing), "the change made after the preparation")
	require.True(t, f.deliveryExists(exhausted))
	require.False(t, f.deliveryExists(done))
}

// A week of deliveries whose lock is not obtained in time stays, whole,
// for the next run, and so do the attempts and the events of its days.
func TestOnceLeavesABusyWeekOfDeliveriesForTheNextRun(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	now := time.Now().UTC()
	old := now.Truncate(24 * time.Hour).Add(-100*24*time.Hour + 12*time.Hour)
	week, events, attempts := f.weekPartitions(old)
	done := f.delivery(f.event(old), old, "succeeded", nil, 1)

	reader := f.longReader("deliveries")
	job := f.job()
	job.lockTimeout = 100 * time.Millisecond
	rep, err := job.Once(f.ctx, now)
	require.NoError(t, err)
	require.Equal(t, int64(1), rep.PartitionsSkipped)
	require.Zero(t, rep.DeliveryPartitions+rep.AttemptPartitions+rep.EventPartitions)
	require.True(t, f.exists(week) && f.exists(events) && f.exists(attempts))
	require.True(t, f.deliveryExists(done))
	require.Contains(t, f.logs.String(), "delivery partition left for the next run")

	require.NoError(t, reader.Rollback(f.ctx))
	rep, err = job.Once(f.ctx, now)
	require.NoError(t, err)
	require.Equal(t, Report{DeliveryPartitions: 1, AttemptPartitions: 1, Attempts: 1, EventPartitions: 1}, withoutRollups(rep))
	require.False(t, f.exists(week) || f.exists(events) || f.exists(attempts))
	require.False(t, f.deliveryExists(done))
}

// In a database migrated from a release before the weeks, the old
// deliveries of deliveries_before go one by one, as they did, until the
// partition is old enough to go whole.
func TestOnceDropsTheDeliveriesFromBeforeTheWeeksWhenOld(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	now := time.Now().UTC()
	old := now.Truncate(24 * time.Hour).Add(-100*24*time.Hour + 12*time.Hour)
	day := old.Truncate(24 * time.Hour)
	end := day.AddDate(0, 0, 7-(int(day.Weekday())+6)%7)
	f.exec(`CREATE TABLE deliveries_before PARTITION OF deliveries FOR VALUES FROM (MINVALUE) TO ('` + idBound(end).String() + `')`)
	done := f.delivery(f.event(old), old, "succeeded", nil, 0)
	exhausted := f.delivery(f.event(old), old, "exhausted", nil, 0)

	// While it holds deliveries younger than the cutoff, it stays.
	rep, err := f.job().Once(f.ctx, old.Add(90*24*time.Hour+time.Minute))
	require.NoError(t, err)
	require.Equal(t, int64(1), rep.Deliveries)
	require.Zero(t, rep.DeliveryPartitions)
	require.True(t, f.exists("deliveries_before"))
	require.False(t, f.deliveryExists(done))

	rep, err = f.job().Once(f.ctx, now)
	require.NoError(t, err)
	require.Zero(t, rep.Deliveries)
	require.Equal(t, int64(1), rep.DeliveryPartitions)
	require.Equal(t, int64(1), rep.DeliveriesKept)
	require.False(t, f.exists("deliveries_before"))
	require.Equal(t, 1, f.count(`SELECT count(*) FROM deliveries_default WHERE id = $1`, exhausted))
}

// A week detached by a run that could not drop it after (its process
// stopped between the two) goes at the next run; a partition, or another
// table, does not.
func TestOnceDropsAWeekLeftDetached(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	now := time.Now().UTC()
	old := now.Truncate(24 * time.Hour).Add(-100*24*time.Hour + 12*time.Hour)
	week := f.deliveryWeek(old)
	f.delivery(f.event(old), old, "succeeded", nil, 0)
	var kept int64
	require.NoError(t, f.pool.QueryRow(f.ctx, `SELECT drop_delivery_partition($1::regclass)`, week).Scan(&kept))
	require.Zero(t, kept)
	require.True(t, f.exists(week), "detached, not dropped")
	f.exec(`CREATE TABLE deliveries_notes (id int)`)

	_, err := f.job().Once(f.ctx, now)
	require.NoError(t, err)
	require.False(t, f.exists(week))
	require.True(t, f.exists("deliveries_default") && f.exists("deliveries_notes"))
}

// retainedAttempt stores an attempt kept when an earlier partition went,
// of the delivery created at at.
func (f *fixture) retainedAttempt(delivery uuid.UUID, at time.Time) {
	f.t.Helper()
	f.exec(`INSERT INTO delivery_attempts_retained (delivery_id, delivery_created_at, attempt_number, tenant_id, webhook_id,
		duration_ms, scheduled_at, executed_at) VALUES ($1, $2, 9, $3, $4, 1, $2, $2)`, delivery, at, f.tenant, f.webhook)
}

// deadLetters returns the DLQ rollups' exhausted and retried counts, all
// days together.
func (f *fixture) deadLetters() [2]int {
	f.t.Helper()
	var e, r int
	require.NoError(f.t, f.pool.QueryRow(f.ctx, `SELECT sum(exhausted), sum(retried) FROM dead_letter_rollups
		WHERE at = '-infinity'`).Scan(&e, &r))
	return [2]int{e, r}
}

// withoutRollups is rep without its rollup count, which
// TestOncePrunesOldRollups checks.
func withoutRollups(rep Report) Report {
	rep.Rollups = 0
	return rep
}

// idTime reads back the millisecond idBound wrote, from 1970 on.
func TestIDTimeIsIDBoundsInverse(t *testing.T) {
	t.Parallel()
	for _, at := range []time.Time{time.UnixMilli(0), time.UnixMilli(1), time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC),
		time.UnixMilli(1<<48 - 1)} {
		require.True(t, at.Equal(idTime(idBound(at))), at)
		require.True(t, at.Equal(idTime(v7At(at))), at)
	}
}
