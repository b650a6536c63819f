package outbox

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/db/dbtest"
	"github.com/hookline/hookline/internal/metrics"
	"github.com/hookline/hookline/internal/queue"
	"github.com/hookline/hookline/internal/wire"
)

func tasks(n int) []wire.Task {
	out := make([]wire.Task, n)
	for i := range out {
		out[i] = wire.Task{DeliveryID: uuid.New(), Attempt: 1}
	}
	return out
}

// fullDispatcher returns a dispatcher whose buffer of two is full.
func fullDispatcher(healthy bool) *Dispatcher {
	d := &Dispatcher{in: make(chan wire.Task, 2)}
	d.healthy.Store(healthy)
	d.Enqueue(tasks(2)...)
	return d
}

func TestEnqueueDropsAtOnceWhilePublishingFails(t *testing.T) {
	d := fullDispatcher(false)
	before := testutil.ToFloat64(metrics.OutboxDropped)
	start := time.Now()
	d.Enqueue(tasks(3)...)
	require.Less(t, time.Since(start), enqueueWait/2, "an unhealthy dispatcher must not hold the publisher")
	require.Equal(t, 3.0, testutil.ToFloat64(metrics.OutboxDropped)-before)
	require.Len(t, d.in, 2)
}

func TestEnqueueWaitsForRoomWhileHealthy(t *testing.T) {
	d := fullDispatcher(true)
	before := testutil.ToFloat64(metrics.OutboxDropped)
	extra := tasks(2)
	returned := make(chan struct{})
	go func() {
		d.Enqueue(extra...)
		close(returned)
	}()
	// Make room for the two extra tasks, one at a time, as the dispatcher's
	// loop would; Enqueue returns once both are in.
	got := []wire.Task{<-d.in, <-d.in}
	select {
	case <-returned:
	case <-time.After(10 * time.Second):
		t.Fatal("Enqueue did not return once there was room")
	}
	got = append(got, <-d.in, <-d.in)
	require.Equal(t, extra, got[2:], "the waiting tasks went in, in order")
	require.Equal(t, 0.0, testutil.ToFloat64(metrics.OutboxDropped)-before)
}

func TestEnqueueGivesUpAfterItsWait(t *testing.T) {
	d := fullDispatcher(true)
	before := testutil.ToFloat64(metrics.OutboxDropped)
	start := time.Now()
	d.Enqueue(tasks(2)...)
	require.GreaterOrEqual(t, time.Since(start), enqueueWait)
	require.Equal(t, 2.0, testutil.ToFloat64(metrics.OutboxDropped)-before, "left to the relay")
}

// seedDeliveries inserts n pending deliveries of one event and returns
// their ids.
func seedDeliveries(t *testing.T, pool *pgxpool.Pool, n int) []uuid.UUID {
	t.Helper()
	ctx := context.Background()
	seed := dbtest.Seed(t, pool, 1)
	tenant, hook, event := seed.Tenant, seed.Webhooks[0], seed.Event
	var err error
	ids := make([]uuid.UUID, n)
	for i := range ids {
		ids[i] = uuid.Must(uuid.NewV7())
		_, err = pool.Exec(ctx, `INSERT INTO deliveries (id, tenant_id, event_id, webhook_id, priority) VALUES ($1, $2, $3, $4, 'normal')`,
			ids[i], tenant, event, hook)
		require.NoError(t, err)
	}
	return ids
}

func enqueued(t *testing.T, pool *pgxpool.Pool, id uuid.UUID) bool {
	t.Helper()
	var ok bool
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT enqueued_at IS NOT NULL FROM deliveries WHERE id = $1`, id).Scan(&ok))
	return ok
}

// MarkEnqueued marks only the attempt its message was built for, and
// neither waits for nor marks a delivery another transaction holds (a
// worker recording its attempt), so it cannot deadlock with one.
func TestMarkEnqueued(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := context.Background()
	ids := seedDeliveries(t, pool, 4)
	// ids[1] has had its first attempt: a message for attempt 1 is stale.
	_, err := pool.Exec(ctx, `UPDATE deliveries SET attempt_count = 1, status = 'retrying' WHERE id = $1`, ids[1])
	require.NoError(t, err)

	holder, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = holder.Rollback(ctx) }()
	_, err = holder.Exec(ctx, `SELECT 1 FROM deliveries WHERE id = $1 FOR UPDATE`, ids[2])
	require.NoError(t, err)

	ts := []wire.Task{{DeliveryID: ids[0], Attempt: 1}, {DeliveryID: ids[1], Attempt: 1}, {DeliveryID: ids[2], Attempt: 1},
		{DeliveryID: ids[3], Attempt: 1}}
	markCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	require.NoError(t, wire.MarkEnqueued(markCtx, pool, ts), "the mark must not wait for the held row")

	require.True(t, enqueued(t, pool, ids[0]))
	require.False(t, enqueued(t, pool, ids[1]), "a message for an attempt already made marks nothing")
	require.False(t, enqueued(t, pool, ids[2]), "a held row is skipped")
	require.True(t, enqueued(t, pool, ids[3]))

	// Several attempt numbers in one call: each delivery is matched with
	// its own.
	require.NoError(t, holder.Rollback(ctx))
	_, err = pool.Exec(ctx, `UPDATE deliveries SET enqueued_at = NULL`)
	require.NoError(t, err)
	require.NoError(t, wire.MarkEnqueued(ctx, pool, []wire.Task{{DeliveryID: ids[1], Attempt: 2}, {DeliveryID: ids[2], Attempt: 1}, {DeliveryID: ids[0], Attempt: 3}}))
	require.True(t, enqueued(t, pool, ids[1]))
	require.True(t, enqueued(t, pool, ids[2]))
	require.False(t, enqueued(t, pool, ids[0]))
}

// The mark inside a transaction covers rows that transaction holds itself
// (the relay selects its rows FOR UPDATE, then marks them).
func TestMarkEnqueuedCoversRowsItsTransactionHolds(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := context.Background()
	ids := seedDeliveries(t, pool, 2)
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT 1 FROM deliveries WHERE id = ANY($1) FOR UPDATE`, ids); err != nil {
			return err
		}
		return wire.MarkEnqueued(ctx, tx, []wire.Task{{DeliveryID: ids[0], Attempt: 1}, {DeliveryID: ids[1], Attempt: 1}})
	})
	require.NoError(t, err)
	require.True(t, enqueued(t, pool, ids[0]))
	require.True(t, enqueued(t, pool, ids[1]))
}

// fakePublisher confirms every message at once and remembers their ids
// and how many each call published.
type fakePublisher struct {
	mu    sync.Mutex
	ids   []string
	calls []int
}

func (p *fakePublisher) Publish(_ context.Context, msgs ...queue.Message) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, m := range msgs {
		p.ids = append(p.ids, m.ID)
	}
	p.calls = append(p.calls, len(msgs))
	return nil
}

func (p *fakePublisher) published() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.ids)
}

// The dispatcher publishes at once and marks a second after the confirm,
// when most deliveries are recorded already and need no mark; on shutdown
// it marks what it holds without waiting.
func TestDispatcherMarksAfterItsDelay(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ids := seedDeliveries(t, pool, 3)
	pub := &fakePublisher{}
	d := NewDispatcher(pool, pub, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()

	// ids[1] is attempted and recorded before its mark: the mark must
	// leave it alone.
	_, err := pool.Exec(context.Background(), `UPDATE deliveries SET attempt_count = 1, status = 'succeeded' WHERE id = $1`, ids[1])
	require.NoError(t, err)
	enqueuedAt := time.Now()
	d.Enqueue(wire.Task{DeliveryID: ids[0], Attempt: 1}, wire.Task{DeliveryID: ids[1], Attempt: 1})
	require.Eventually(t, func() bool { return pub.published() == 2 }, 10*time.Second, 5*time.Millisecond)
	require.Eventually(t, func() bool { return enqueued(t, pool, ids[0]) }, 10*time.Second, 20*time.Millisecond)
	require.GreaterOrEqual(t, time.Since(enqueuedAt), markDelay, "marked before its delay")
	require.False(t, enqueued(t, pool, ids[1]), "a recorded delivery is not marked")

	d.Enqueue(wire.Task{DeliveryID: ids[2], Attempt: 1})
	require.Eventually(t, func() bool { return pub.published() == 3 }, 10*time.Second, 5*time.Millisecond)
	cancel()
	require.NoError(t, <-done)
	require.True(t, enqueued(t, pool, ids[2]), "marked at shutdown")
}

// Deliveries committed one after another, while a batch waits for
// company, share its publish: the dispatcher's other loops take none of
// them meanwhile.
func TestDispatcherBatchesDeliveriesArrivingOneAfterAnother(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ids := seedDeliveries(t, pool, 3)
	pub := &fakePublisher{}
	d := NewDispatcher(pool, pub, slog.New(slog.DiscardHandler))
	d.window = time.Hour // the batch ends when Run is stopped
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	for _, id := range ids {
		d.Enqueue(wire.Task{DeliveryID: id, Attempt: 1})
		// The next one is enqueued only once this one was taken.
		require.Eventually(t, func() bool { return len(d.in) == 0 }, 5*time.Second, time.Millisecond)
	}
	cancel()
	require.NoError(t, <-done)
	pub.mu.Lock()
	defer pub.mu.Unlock()
	require.Equal(t, []int{3}, pub.calls)
}

// Confirmed batches falling due within markGather of each other are
// marked by one statement (one transaction: the same enqueued_at).
func TestMarkLoopGathersBatchesDueTogether(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ids := seedDeliveries(t, pool, 3)
	d := NewDispatcher(pool, &fakePublisher{}, slog.New(slog.DiscardHandler))
	marks := make(chan confirmed, 3)
	due := time.Now()
	for i, id := range ids {
		marks <- confirmed{due: due.Add(time.Duration(i) * markGather / 4), tasks: []wire.Task{{DeliveryID: id, Attempt: 1}}}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { d.markLoop(ctx, context.Background(), marks); close(done) }()
	require.Eventually(t, func() bool { return enqueued(t, pool, ids[2]) }, 10*time.Second, 5*time.Millisecond)
	var distinct int
	require.NoError(t, pool.QueryRow(context.Background(),
		`SELECT count(DISTINCT enqueued_at) FROM deliveries WHERE id = ANY($1)`, ids).Scan(&distinct))
	require.Equal(t, 1, distinct, "one statement marked the three batches")
	close(marks)
	<-done
}

// A relay pass reads from shortly before the previous pass's due time,
// not from the oldest entry of the outbox's index, which keeps an entry
// for every delivery enqueued since the last vacuum. A delivery that joins
// with an older due time (a transaction that committed long after it
// began) waits for the pass from the floor, once every FloorEvery, when it
// is at most FloorLag late, and for the pass from the oldest entry, once
// every FullEvery, otherwise. One that another transaction held through a
// pass keeps the floor at it, whatever its age.
func TestRelayPassesReadFromTheLastPassTheFloorAndTheOldest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	ids := seedDeliveries(t, pool, 6)
	due := func(id uuid.UUID, ago string) {
		t.Helper()
		_, err := pool.Exec(ctx, `UPDATE deliveries SET created_at = now() - $2::interval WHERE id = $1`, id, ago)
		require.NoError(t, err)
	}
	pass := func(r *Relay) int {
		t.Helper()
		n, err := r.Pass(ctx)
		require.NoError(t, err)
		return n
	}
	for _, id := range ids {
		due(id, "-1 hour") // not due until the test says
	}
	r := NewRelay(pool, &fakePublisher{}, slog.New(slog.DiscardHandler))

	first, held := ids[0], ids[1]
	due(first, "1 hour")
	due(held, "3 hours")
	holder, err := pool.Begin(ctx)
	require.NoError(t, err)
	_, err = holder.Exec(ctx, `SELECT 1 FROM deliveries WHERE id = $1 FOR UPDATE`, held)
	require.NoError(t, err)
	require.Equal(t, 1, pass(r), "the first pass reads from the oldest entry, past the held delivery")
	require.True(t, enqueued(t, pool, first))
	require.NoError(t, holder.Rollback(ctx))

	withinLag, recent, withinLagAgain, beyondLag := ids[2], ids[3], ids[4], ids[5]
	due(withinLag, "2 minutes")
	require.Zero(t, pass(r), "due long before the last pass")

	due(recent, "6 seconds")
	require.Equal(t, 1, pass(r), "due since the last pass")
	require.True(t, enqueued(t, pool, recent))

	r.Scan.FloorEvery = 0
	require.Equal(t, 2, pass(r), "the pass from the floor, which stayed at the held delivery")
	require.True(t, enqueued(t, pool, held))
	require.True(t, enqueued(t, pool, withinLag))

	due(withinLagAgain, "2 minutes")
	due(beyondLag, "10 minutes")
	require.Equal(t, 1, pass(r), "the floor moved on to FloorLag before the due bound")
	require.True(t, enqueued(t, pool, withinLagAgain))
	require.False(t, enqueued(t, pool, beyondLag))

	r.Scan.FullEvery = 0
	require.Equal(t, 1, pass(r), "the pass from the oldest entry")
	require.True(t, enqueued(t, pool, beyondLag))
}

// Between vacuums deliveries_unfinished_idx keeps an entry for every
// delivery that was ever unfinished, while the statistics show almost none
// unfinished. The relay's statements and its backlog's read
// deliveries_outbox_idx, not that index, from a generic plan or a custom
// one; those bounded by the last pass read only the entries since.
func TestRelayStatementsReadTheOutboxIndexBetweenVacuums(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	seed := dbtest.Seed(t, pool, 1)
	dbtest.FinishedBehind(t, pool, seed, seed.Webhooks[0], 20000)
	_, err := pool.Exec(ctx, `INSERT INTO deliveries (id, tenant_id, event_id, webhook_id, priority, created_at)
VALUES (uuidv7(), $1, $2, $3, 'normal', now() - interval '10 seconds')`, seed.Tenant, seed.Event, seed.Webhooks[0])
	require.NoError(t, err)

	since := "now() - interval '1 minute'"
	for _, tc := range []struct {
		name, sql string
		args      []string
		bounded   bool
	}{
		{"stale", staleSQL, []string{"now() - interval '5 seconds'", "1000"}, false},
		{"stale since", staleSinceSQL, []string{"now() - interval '5 seconds'", "1000", since}, true},
		{"oldest", oldestSQL, nil, false},
		{"oldest since", oldestSinceSQL, []string{since}, true},
		{"backlog", backlogSQL, nil, false},
		{"backlog since", backlogSinceSQL, []string{since}, true},
	} {
		maxPages := 0 // the passes from the oldest entry read every entry since the last vacuum
		if tc.bounded {
			maxPages = 20
		}
		t.Run(tc.name, func(t *testing.T) {
			dbtest.ReadsIndex(t, pool, "deliveries_outbox_idx", maxPages, tc.sql, tc.args...)
		})
	}
}
