package retention

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/history"
	"github.com/hookline/hookline/internal/metrics"
)

// attemptNumbers reads a delivery's attempts as GET /v1/deliveries/{id}
// does.
func (f *fixture) attemptNumbers(id uuid.UUID) []int {
	f.t.Helper()
	d, err := history.NewReader(f.pool).Get(f.ctx, f.tenant, id)
	require.NoError(f.t, err)
	out := []int{}
	for _, a := range d.Attempts {
		out = append(out, a.AttemptNumber)
	}
	return out
}

func TestOnceRemovesOldDataAndKeepsWhatIsStillNeeded(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	now := time.Now().UTC()
	day := now.Truncate(24 * time.Hour).Add(-100 * 24 * time.Hour)
	old := day.Add(12 * time.Hour)          // in a partition of its own
	older := old.Add(-20 * 24 * time.Hour)  // no partition: in the default one
	recent := now.Add(-10 * 24 * time.Hour) // older than the payload age only
	fresh := now.Add(-2 * 24 * time.Hour)
	part := f.partition(old)
	week := f.eventWeek(old) // older: in the default partition

	// Old, attempts in the old partition (16 rows).
	evA := f.event(old)
	a1 := f.delivery(evA, old, "succeeded", nil, 2)
	evB := f.event(old)
	b1 := f.delivery(evB, old, "exhausted", nil, 3)
	evC := f.event(old)
	c1 := f.delivery(evC, old, "exhausted", nil, 2)
	c2 := f.delivery(evC, old.Add(time.Hour), "succeeded", &c1, 1)
	evD := f.event(old)
	d1 := f.delivery(evD, old, "exhausted", nil, 2)
	d2 := f.delivery(evD, recent, "succeeded", &d1, 1)
	evE := f.event(old) // exhausted, retried, exhausted again, retried, succeeded
	e1 := f.delivery(evE, old, "exhausted", nil, 1)
	e2 := f.delivery(evE, old.Add(time.Hour), "exhausted", &e1, 1)
	e3 := f.delivery(evE, old.Add(2*time.Hour), "succeeded", &e2, 1)
	evF := f.event(old) // exhausted, retried, exhausted again: still in the DLQ
	f1 := f.delivery(evF, old, "exhausted", nil, 1)
	f2 := f.delivery(evF, old.Add(time.Hour), "exhausted", &f1, 1)
	evG := f.event(old)
	g1 := f.delivery(evG, old, "cancelled", nil, 0)
	evH := f.event(old) // stuck in flight
	h1 := f.delivery(evH, old, "retrying", nil, 1)
	evU := f.event(old) // matched no webhook
	// Old, attempts in the default partition.
	evV := f.event(older)
	v1 := f.delivery(evV, older, "succeeded", nil, 2)
	evW := f.event(older)
	w1 := f.delivery(evW, older, "exhausted", nil, 2)
	// Recent.
	evP := f.event(recent)
	p1 := f.delivery(evP, recent, "succeeded", nil, 1)
	evQ := f.event(recent)
	q1 := f.delivery(evQ, recent, "exhausted", nil, 1)
	evR := f.event(fresh)
	r1 := f.delivery(evR, fresh, "succeeded", nil, 1)
	evS := f.event(recent)
	s1 := f.delivery(evS, recent, "retrying", nil, 1)
	evT := f.event(recent)
	require.Equal(t, 16, f.count(`SELECT count(*) FROM `+part))
	recentAttempts := f.count(`SELECT count(*) FROM delivery_attempts WHERE delivery_created_at >= $1`, recent)

	partitionsBefore := testutil.ToFloat64(metrics.RetentionPruned.WithLabelValues("attempt_partitions"))
	rep, err := f.job().Once(f.ctx, now)
	require.NoError(t, err)
	require.Positive(t, rep.Rollups, "the old minutes' rollups went too (TestOncePrunesOldRollups checks which)")
	rep.Rollups = 0
	require.Equal(t, Report{
		Attempts:          10 + 2, // the partition's 16 less the 6 kept; v1's two in the default partition
		AttemptPartitions: 1,
		Deliveries:        9, // a1, c1, c2, d1, e1, e2, e3, g1, v1
		Payloads:          3, // evD, evP, evT
		Events:            1, // evV, from the default partition
		EventPartitions:   1, // evA, evC, evE, evG and evU went with it
		EventsKept:        4, // evB, evD, evF, evH, moved to the default partition
		AttemptsRetained:  6, // b1's 3, f1's, f2's, h1's
	}, rep)

	require.False(t, f.exists(part), "the old partition is dropped")
	require.False(t, f.exists(week), "the old week of events is dropped")
	require.Equal(t, 6, f.count(`SELECT count(*) FROM events_default WHERE id = ANY($1)`,
		[]uuid.UUID{evB, evD, evF, evH, evW, evQ}), "the kept events are in the default partition")
	for _, id := range []uuid.UUID{a1, c1, c2, d1, e1, e2, e3, g1, v1} {
		require.False(t, f.deliveryExists(id), "delivery %s", id)
	}
	for _, id := range []uuid.UUID{b1, d2, f1, f2, h1, w1, p1, q1, r1, s1} {
		require.True(t, f.deliveryExists(id), "delivery %s", id)
	}
	require.Zero(t, f.count(`SELECT count(*) FROM deliveries WHERE id = $1 AND retry_of IS NOT NULL`, d2),
		"the retry lost its link to the exhausted delivery it resolved")

	// The DLQ keeps its history; in flight ones too.
	require.Equal(t, []int{1, 2, 3}, f.attemptNumbers(b1))
	require.Equal(t, 3, f.count(`SELECT count(*) FROM delivery_attempts_retained WHERE delivery_id = $1`, b1))
	require.Equal(t, []int{1}, f.attemptNumbers(f1))
	require.Equal(t, []int{1}, f.attemptNumbers(f2))
	require.Equal(t, []int{1}, f.attemptNumbers(h1))
	require.Equal(t, []int{1, 2}, f.attemptNumbers(w1), "kept in the default partition")
	require.Zero(t, f.count(`SELECT count(*) FROM delivery_attempts WHERE delivery_id = $1`, v1))
	require.Equal(t, recentAttempts, f.count(`SELECT count(*) FROM delivery_attempts WHERE delivery_created_at >= $1`, recent))

	for _, id := range []uuid.UUID{evA, evC, evE, evG, evU, evV} {
		require.False(t, f.eventExists(id), "event %s", id)
	}
	for _, id := range []uuid.UUID{evB, evF, evH, evW, evQ, evR, evS} {
		require.True(t, f.hasPayload(id), "event %s keeps its payload", id)
	}
	for _, id := range []uuid.UUID{evD, evP, evT} {
		require.True(t, f.eventExists(id), "event %s", id)
		require.False(t, f.hasPayload(id), "event %s loses its payload", id)
	}

	require.GreaterOrEqual(t, testutil.ToFloat64(metrics.RetentionPruned.WithLabelValues("attempt_partitions"))-partitionsBefore, 1.0)
	require.GreaterOrEqual(t, testutil.ToFloat64(metrics.RetentionLastSuccess), float64(now.Unix()))
	require.Contains(t, f.logs.String(), `msg="retention run" attempts=12 attempt_partitions=1 deliveries=9 payloads=3 events=1`)

	rep, err = f.job().Once(f.ctx, now.Add(time.Minute))
	require.NoError(t, err)
	require.Equal(t, Report{}, rep, "a second run finds nothing more")
	require.Equal(t, []int{1, 2, 3}, f.attemptNumbers(b1))
}

// Once the last exhausted delivery of a dropped partition is resolved, the
// first run a day after the last look at the kept deliveries removes it
// with the attempts it had kept.
func TestOnceRemovesKeptAttemptsOnceResolved(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	now := time.Now().UTC()
	old := now.Truncate(24 * time.Hour).Add(-100*24*time.Hour + 12*time.Hour)
	f.partition(old)
	ev := f.event(old)
	exhausted := f.delivery(ev, old, "exhausted", nil, 3)

	rep, err := f.job().Once(f.ctx, now)
	require.NoError(t, err)
	require.EqualValues(t, 3, rep.AttemptsRetained)
	require.Equal(t, []int{1, 2, 3}, f.attemptNumbers(exhausted))
	require.True(t, f.hasPayload(ev), "an unresolved delivery keeps its event's payload")

	retry := f.delivery(ev, now.Add(-time.Hour), "succeeded", &exhausted, 1)
	rep, err = f.job().Once(f.ctx, now.Add(revisitEvery))
	require.NoError(t, err)
	require.EqualValues(t, 1, rep.Rollups, "the DLQ's all-time row of the deleted delivery, at zero")
	rep.Rollups = 0
	require.Equal(t, Report{Deliveries: 1, Payloads: 1}, rep)
	require.False(t, f.deliveryExists(exhausted))
	require.Zero(t, f.count(`SELECT count(*) FROM delivery_attempts_retained`), "the kept attempts went with their delivery")
	require.True(t, f.deliveryExists(retry))
	require.Equal(t, []int{1}, f.attemptNumbers(retry))
}

// Workers keep recording attempts and the API keeps reading them while a
// run drops an old partition: every insert succeeds, every read too.
func TestOnceDropsAnOldPartitionWhileDeliveriesContinue(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	now := time.Now().UTC()
	old := now.Truncate(24 * time.Hour).Add(-100*24*time.Hour + 12*time.Hour)
	part := f.partition(old)
	ev := f.event(old)
	kept := f.delivery(ev, old, "exhausted", nil, 3)
	f.exec(`INSERT INTO delivery_attempts (delivery_id, delivery_created_at, attempt_number, tenant_id, webhook_id, duration_ms, scheduled_at, executed_at)
		SELECT gen_random_uuid(), $1, 1, $2, $3, 10, $1, $1 FROM generate_series(1, 20000)`, old, f.tenant, f.webhook)

	const writers = 4
	current := make([]uuid.UUID, writers)
	created := make([]time.Time, writers)
	for i := range current {
		created[i] = time.Now().UTC().Truncate(time.Microsecond)
		current[i] = f.delivery(f.event(created[i]), created[i], "pending", nil, 0)
	}

	ctx, stop := context.WithCancel(f.ctx)
	defer stop()
	recorded := make([]atomic.Int64, writers)
	var reads atomic.Int64
	errs := make(chan error, writers+1)
	var wg sync.WaitGroup
	for i := range current {
		wg.Go(func() { errs <- f.recordAttempts(ctx, current[i], created[i], &recorded[i]) })
	}
	wg.Go(func() { errs <- f.readAttempts(ctx, kept, &reads) })

	started := func() bool {
		for i := range recorded {
			if recorded[i].Load() < 5 {
				return false
			}
		}
		return reads.Load() >= 5
	}
	require.Eventually(t, started, 10*time.Second, 5*time.Millisecond, "writers and reader started")
	rep, err := f.job().Once(f.ctx, now)
	require.NoError(t, err)
	atOnceEnd := make([]int64, writers)
	for i := range recorded {
		atOnceEnd[i] = recorded[i].Load()
	}
	require.Eventually(t, func() bool {
		for i := range recorded {
			if recorded[i].Load() < atOnceEnd[i]+5 {
				return false
			}
		}
		return true
	}, 10*time.Second, 5*time.Millisecond, "writers go on after the run")
	stop()
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}

	require.EqualValues(t, 1, rep.AttemptPartitions)
	require.EqualValues(t, 20000, rep.Attempts)
	require.False(t, f.exists(part))
	require.Equal(t, []int{1, 2, 3}, f.attemptNumbers(kept))
	for i, id := range current {
		n := int(recorded[i].Load())
		require.Len(t, f.attemptNumbers(id), n, "every attempt recorded is there")
		require.Equal(t, n, f.count(`SELECT attempt_count FROM deliveries WHERE id = $1`, id))
	}
}

// recordAttempts records attempt after attempt of a delivery, as a worker
// does, until stop ends; it returns the first failure. Statements do not
// take stop, so that every attempt committed is counted.
func (f *fixture) recordAttempts(stop context.Context, id uuid.UUID, created time.Time, recorded *atomic.Int64) error {
	ctx := f.ctx
	for n := 1; stop.Err() == nil; n++ {
		tx, err := f.pool.Begin(ctx)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE deliveries SET status = 'retrying', attempt_count = $2, updated_at = now()
			WHERE id = $1 AND status IN ('pending', 'retrying')`, id, n)
		if err == nil {
			_, err = tx.Exec(ctx, `INSERT INTO delivery_attempts (delivery_id, delivery_created_at, attempt_number, tenant_id,
				webhook_id, status_code, duration_ms, scheduled_at, executed_at) VALUES ($1, $2, $3, $4, $5, 503, 3, now(), now())`,
				id, created, n, f.tenant, f.webhook)
		}
		if err == nil {
			err = tx.Commit(ctx)
		}
		if err != nil {
			_ = tx.Rollback(ctx)
			return fmt.Errorf("attempt %d of delivery %s: %w", n, id, err)
		}
		recorded.Add(1)
	}
	return nil
}

// readAttempts reads a delivery's three attempts until stop ends.
func (f *fixture) readAttempts(stop context.Context, id uuid.UUID, reads *atomic.Int64) error {
	r := history.NewReader(f.pool)
	for stop.Err() == nil {
		d, err := r.Get(f.ctx, f.tenant, id)
		if err != nil {
			return err
		}
		if len(d.Attempts) != 3 {
			return fmt.Errorf("read %d attempts of delivery %s, want 3", len(d.Attempts), id)
		}
		reads.Add(1)
	}
	return nil
}

// A partition whose lock is not obtained in time is left, whole, for the
// next run; the other steps go on.
func TestOnceLeavesABusyPartitionForTheNextRun(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	now := time.Now().UTC()
	old := now.Truncate(24 * time.Hour).Add(-100*24*time.Hour + 12*time.Hour)
	part := f.partition(old)
	ev := f.event(old)
	kept := f.delivery(ev, old, "exhausted", nil, 3)
	done := f.delivery(f.event(old), old, "succeeded", nil, 2)

	// A long reader of the attempt log.
	reader := f.longReader("delivery_attempts")

	job := f.job()
	job.lockTimeout = 100 * time.Millisecond
	rep, err := job.Once(f.ctx, now)
	require.NoError(t, err)
	rep.Rollups = 0 // TestOncePrunesOldRollups
	require.Equal(t, Report{Deliveries: 1, Events: 1, PartitionsSkipped: 1}, rep)
	require.True(t, f.exists(part))
	require.False(t, f.deliveryExists(done))
	require.Zero(t, f.count(`SELECT count(*) FROM delivery_attempts_retained`), "nothing copied for a partition left in place")
	require.Equal(t, []int{1, 2, 3}, f.attemptNumbers(kept))
	require.Contains(t, f.logs.String(), "attempt partition left for the next run")
	require.Contains(t, f.logs.String(), "partitions_skipped=1")

	require.NoError(t, reader.Rollback(f.ctx))
	rep, err = job.Once(f.ctx, now)
	require.NoError(t, err)
	require.Equal(t, Report{Attempts: 2, AttemptPartitions: 1, AttemptsRetained: 3}, rep)
	require.False(t, f.exists(part))
	require.Equal(t, []int{1, 2, 3}, f.attemptNumbers(kept))
}

// One process at a time runs the job.
func TestOnceRunsInOneProcessAtATime(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	other, err := f.pool.Acquire(f.ctx)
	require.NoError(t, err)
	defer other.Release()
	var got bool
	require.NoError(t, other.QueryRow(f.ctx, tryLockSQL).Scan(&got))
	require.True(t, got)

	_, err = f.job().Once(f.ctx, time.Now())
	require.ErrorIs(t, err, ErrRunning)

	_, err = other.Exec(f.ctx, unlockSQL)
	require.NoError(t, err)
	_, err = f.job().Once(f.ctx, time.Now())
	require.NoError(t, err)
}

// Run runs the job soon after it starts and returns when its context ends.
func TestRunPrunesUntilCancelled(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	old := time.Now().UTC().Truncate(24 * time.Hour).Add(-100*24*time.Hour + 12*time.Hour)
	part := f.partition(old)
	f.delivery(f.event(old), old, "succeeded", nil, 1)

	job := f.job()
	job.startDelay = 10 * time.Millisecond
	ctx, cancel := context.WithCancel(f.ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- job.Run(ctx) }()

	require.Eventually(t, func() bool {
		var exists bool
		err := f.pool.QueryRow(f.ctx, `SELECT to_regclass($1) IS NOT NULL`, part).Scan(&exists)
		return err == nil && !exists
	}, 10*time.Second, 10*time.Millisecond, "the first run dropped the partition")
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
}

// Portal sessions go a day after they ended or expired, pauses once older
// than what is kept of events; the others stay.
func TestOncePrunesEndedPortalSessionsAndOldPauses(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	session := func(expires, ended string) uuid.UUID {
		id := uuid.Must(uuid.NewV7())
		f.exec(`INSERT INTO portal_sessions (id, tenant_id, token_hash, link_expires_at, expires_at, ended_at)
			VALUES ($1, $2, $3, now(), now() + $4::interval, now() + $5::interval)`, id, f.tenant, id[:], expires, ended)
		return id
	}
	expiredLong := session("-2 days", "1 hour")
	endedLong := session("1 hour", "-30 hours")
	live := session("1 hour", "1 hour")
	endedRecently := session("1 hour", "-1 hour")
	f.exec(`UPDATE portal_sessions SET ended_at = NULL WHERE id = $1`, live)
	f.exec(`INSERT INTO webhook_pauses (webhook_id, paused_at, resumed_at) VALUES
		($1, now() - interval '120 days', now() - interval '100 days'),
		($1, now() - interval '10 days', now() - interval '9 days'),
		($1, now() - interval '1 day', NULL)`, f.webhook)

	rep, err := f.job().Once(f.ctx, time.Now())
	require.NoError(t, err)
	require.EqualValues(t, 2, rep.PortalSessions)
	require.EqualValues(t, 1, rep.Pauses)
	rows, err := f.pool.Query(f.ctx, `SELECT id FROM portal_sessions ORDER BY id`)
	require.NoError(t, err)
	left, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	require.NoError(t, err)
	require.ElementsMatch(t, []uuid.UUID{live, endedRecently}, left)
	require.NotContains(t, left, expiredLong)
	require.NotContains(t, left, endedLong)
	var pauses int
	require.NoError(t, f.pool.QueryRow(f.ctx, `SELECT count(*) FROM webhook_pauses`).Scan(&pauses))
	require.Equal(t, 2, pauses, "the recent pause and the one still going stay")
	require.Contains(t, f.logs.String(), "portal_sessions=2")
}

// The rollups of minutes older than the attempt cutoff go; the recent ones
// stay, and so does a DLQ rollup that still counts an unresolved entry,
// however old. A DLQ rollup emptied by the deletes goes.
func TestOncePrunesOldRollups(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	now := time.Now()
	old, recent := now.Add(-100*24*time.Hour), now.Add(-time.Hour)
	for _, at := range []time.Time{old, recent} {
		f.delivery(f.event(at), at, "succeeded", nil, 1)
	}
	unresolved := f.delivery(f.event(old), old, "retrying", nil, 1)
	resolved := f.delivery(f.event(old.Add(time.Minute)), old.Add(time.Minute), "retrying", nil, 1)
	f.exec(`UPDATE deliveries SET status = 'exhausted', completed_at = created_at + interval '1 hour'
		WHERE id IN ($1, $2)`, unresolved, resolved)
	f.delivery(f.event(old.Add(2*time.Minute)), old.Add(2*time.Minute), "succeeded", &resolved, 1)
	require.Equal(t, 2, f.count(`SELECT sum(exhausted) FROM dead_letter_rollups WHERE at = '-infinity'`))
	rollups := func(table string, before time.Time) int {
		return f.count(`SELECT count(*) FROM `+table+` WHERE at < $1`, before)
	}
	require.Positive(t, rollups("delivery_rollups", now.Add(-90*24*time.Hour)))

	rep, err := f.job().Once(f.ctx, now)
	require.NoError(t, err)
	require.Positive(t, rep.Rollups)
	require.Zero(t, rollups("delivery_rollups", now.Add(-90*24*time.Hour)))
	require.Zero(t, rollups("attempt_rollups", now.Add(-90*24*time.Hour)))
	require.Positive(t, rollups("delivery_rollups", now.Add(time.Minute)), "the recent minutes stay")
	require.Positive(t, rollups("attempt_rollups", now.Add(time.Minute)))
	require.True(t, f.deliveryExists(unresolved))
	require.False(t, f.deliveryExists(resolved))
	require.Equal(t, 3, f.count(`SELECT count(*) FROM dead_letter_rollups`), "only the unresolved entry's rows (its hour, its day, all time) are left")
	require.Equal(t, 1, f.count(`SELECT sum(exhausted - retried) FROM dead_letter_rollups WHERE at = '-infinity'`))
	require.Contains(t, f.logs.String(), "rollups=")
}
