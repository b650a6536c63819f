package retention

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/eventlog"
)

// A week of the event log whose lock is not obtained in time stays, whole,
// for the next run, which drops it.
func TestOnceLeavesABusyWeekOfEventsForTheNextRun(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	now := time.Now().UTC()
	old := now.Truncate(24 * time.Hour).Add(-100*24*time.Hour + 12*time.Hour)
	week := f.eventWeek(old)
	done := f.event(old)
	f.delivery(done, old, "succeeded", nil, 0)
	dlq := f.event(old)
	exhausted := f.delivery(dlq, old, "exhausted", nil, 0)

	// A long reader of the event log.
	reader := f.longReader("events")

	job := f.job()
	job.lockTimeout = 100 * time.Millisecond
	rep, err := job.Once(f.ctx, now)
	require.NoError(t, err)
	rep.Rollups = 0 // TestOncePrunesOldRollups
	require.Equal(t, Report{Deliveries: 1, Payloads: 1, PartitionsSkipped: 1}, rep, "the done event's payload cleared meanwhile")
	require.True(t, f.exists(week))
	require.True(t, f.eventExists(done) && f.eventExists(dlq))
	require.Contains(t, f.logs.String(), "event partition left for the next run")

	require.NoError(t, reader.Rollback(f.ctx))
	rep, err = job.Once(f.ctx, now)
	require.NoError(t, err)
	rep.Rollups = 0
	require.Equal(t, Report{EventPartitions: 1, EventsKept: 1}, rep)
	require.False(t, f.exists(week))
	require.False(t, f.eventExists(done))
	require.Equal(t, 1, f.count(`SELECT count(*) FROM events_default WHERE id = $1`, dlq), "the DLQ's event is kept")
	require.True(t, f.deliveryExists(exhausted))
	require.True(t, f.hasPayload(dlq), "with its payload, for the DLQ to show and retry")
}

// A retry or recovery that adds a delivery to an event of an old week
// holds eventlog.HoldSQL: the week's drop waits for it, and then keeps the
// event its new delivery names. Without the hold, the drop would choose
// the events to keep before the delivery commits, and remove its event.
func TestAWeekDropWaitsForTheDeliveriesAddedToItsEvents(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	now := time.Now().UTC()
	old := now.Truncate(24 * time.Hour).Add(-100*24*time.Hour + 12*time.Hour)
	week := f.eventWeek(old)
	missed := f.event(old) // no delivery: the week would take it

	recovery, err := f.pool.Begin(f.ctx)
	require.NoError(t, err)
	defer recovery.Rollback(context.Background()) //nolint:errcheck
	_, err = recovery.Exec(f.ctx, eventlog.HoldSQL)
	require.NoError(t, err)
	recovered := uuid.Must(uuid.NewV7())
	_, err = recovery.Exec(f.ctx, `INSERT INTO deliveries (id, tenant_id, event_id, webhook_id, priority, created_at)
		SELECT $1, tenant_id, id, $3, 'normal', now() FROM events WHERE id = $2`, recovered, missed, f.webhook)
	require.NoError(t, err)

	type result struct {
		rep Report
		err error
	}
	done := make(chan result, 1)
	go func() {
		rep, err := f.job().Once(f.ctx, now)
		done <- result{rep, err}
	}()
	// The drop waits on the hold; nothing is dropped meanwhile.
	require.Eventually(t, func() bool {
		return f.count(`SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
			AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`) > 0
	}, 10*time.Second, 10*time.Millisecond)
	require.True(t, f.exists(week))
	require.NoError(t, recovery.Commit(f.ctx))

	r := <-done
	require.NoError(t, r.err)
	require.Equal(t, int64(1), r.rep.EventPartitions)
	require.Equal(t, int64(1), r.rep.EventsKept)
	require.False(t, f.exists(week))
	require.True(t, f.eventExists(missed), "the recovered delivery's event is kept")
	require.Equal(t, 1, f.count(`SELECT count(*) FROM deliveries d JOIN events e ON e.id = d.event_id WHERE d.id = $1`, recovered))
}

// In a database migrated from a release before the weeks, the old events
// of events_before go one by one, as they did, until the partition is old
// enough to drop whole.
func TestOncePrunesTheEventsFromBeforeTheWeeksOneByOne(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	now := time.Now().UTC()
	day := now.Truncate(24 * time.Hour)
	monday := day.AddDate(0, 0, -((int(day.Weekday()) + 6) % 7))
	f.exec(`CREATE TABLE events_before PARTITION OF events FOR VALUES FROM (MINVALUE) TO ('` + idBound(monday).String() + `')`)
	old := day.Add(-100*24*time.Hour + 12*time.Hour)
	done := f.event(old)
	f.delivery(done, old, "succeeded", nil, 0)
	dlq := f.event(old)
	f.delivery(dlq, old, "exhausted", nil, 0)
	require.Equal(t, 2, f.count(`SELECT count(*) FROM events_before`))

	rep, err := f.job().Once(f.ctx, now)
	require.NoError(t, err)
	rep.Rollups = 0 // TestOncePrunesOldRollups
	require.Equal(t, Report{Deliveries: 1, Events: 1}, rep)
	require.True(t, f.exists("events_before"))
	require.False(t, f.eventExists(done))
	require.True(t, f.eventExists(dlq) && f.hasPayload(dlq))
}
