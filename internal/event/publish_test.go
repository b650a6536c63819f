package event_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/db/dbtest"
	"github.com/hookline/hookline/internal/event"
	"github.com/hookline/hookline/internal/fielderr"
	"github.com/hookline/hookline/internal/metrics"
	"github.com/hookline/hookline/internal/webhook"
	"github.com/hookline/hookline/internal/wire"
)

type discard struct{}

func (discard) Enqueue(...wire.Task) {}

// A request Postgres would refuse is refused before it joins the group
// commit, where its failure would fail the whole batch and make every
// other tenant's event of it wait for a second, one-by-one run. The
// committer does not run here: a request that reached it would wait for
// the deadline instead of being refused at once.
func TestPublishRefusesUnstorableTextBeforeTheCommit(t *testing.T) {
	t.Parallel()
	svc := event.NewService(dbtest.New(t), nil, "", discard{}, slog.New(slog.DiscardHandler))
	cases := []struct {
		name  string
		req   event.Request
		field string
	}{
		{"data value invalid UTF-8", event.Request{EventType: "a", Data: json.RawMessage("{\"a\":\"caf\xe9\"}")}, "data"},
		{"data key invalid UTF-8", event.Request{EventType: "a", Data: json.RawMessage("{\"\xff\":1}")}, "data"},
		{"data truncated rune", event.Request{EventType: "a", Data: json.RawMessage("{\"a\":[\"\xe2\x82\"]}")}, "data"},
		{"data encoded surrogate", event.Request{EventType: "a", Data: json.RawMessage("{\"a\":\"\xed\xa0\x80\"}")}, "data"},
		{"source NUL", event.Request{EventType: "a", Data: json.RawMessage(`{}`), Source: "s\x00"}, "source"},
		{"key invalid UTF-8", event.Request{EventType: "a", Data: json.RawMessage(`{}`), IdempotencyKey: "k\xff"}, "idempotency_key"},
	}
	for _, tc := range cases {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := svc.Publish(ctx, uuid.New(), tc.req)
		cancel()
		var fe *fielderr.Error
		require.True(t, errors.As(err, &fe), "%s: refused as a field error, got %v", tc.name, err)
		require.Equal(t, tc.field, fe.Field, tc.name)
	}
}

// Looking an event up by a key that no publish could have stored is a
// refusal naming the key, not a query Postgres fails.
func TestGetByKeyRefusesUnstorableKey(t *testing.T) {
	t.Parallel()
	svc := event.NewService(dbtest.New(t), nil, "", discard{}, slog.New(slog.DiscardHandler))
	for _, key := range []string{"\xff", "a\x00b", "with space", ""} {
		_, err := svc.GetByKey(context.Background(), uuid.New(), key)
		var fe *fielderr.Error
		require.True(t, errors.As(err, &fe), "%q: refused as a field error, got %v", key, err)
		require.Equal(t, "idempotency_key", fe.Field)
	}
	_, err := svc.GetByKey(context.Background(), uuid.New(), "order-42")
	require.ErrorIs(t, err, event.ErrNotFound)
}

// Once a publish has joined the group commit, its caller giving up does
// not turn a committed event into an error (a client told "failed" retries,
// and with a generated key that publishes the event twice): the caller
// gets the event it created.
func TestPublishReportsItsCommitAfterTheCallerGaveUp(t *testing.T) {
	t.Parallel()
	svc, pool := runningService(t)
	tenant := addTenant(t, pool, "t")

	gone, cancel := context.WithCancel(context.Background())
	cancel() // the client is gone before the commit has run
	res, err := svc.Publish(gone, tenant, event.Request{EventType: "order.created", Data: json.RawMessage(`{"n":1}`)})
	require.NoError(t, err, "the event is committed: the caller must hear so")
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(*) FROM events WHERE id = $1`, res.ID).Scan(&n))
	require.Equal(t, 1, n)
}

// An idempotency key holds for at least a day, whatever the hour of the
// first publish, and for at most two: a repeat of an event published
// yesterday (any time yesterday) is that event; once its keys are two
// days old the key makes a new event, which a lookup by key then finds.
func TestIdempotencyKeyHoldsForADayWhateverTheHour(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	svc, pool := runningService(t)
	tenant := addTenant(t, pool, "t")
	req := event.Request{EventType: "order.created", Data: json.RawMessage(`{"n":1}`), IdempotencyKey: "order-1"}
	first, err := svc.Publish(ctx, tenant, req)
	require.NoError(t, err)
	require.False(t, first.Replayed)
	var keys int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM event_keys
		WHERE tenant_id = $1 AND idempotency_key = 'order-1' AND event_id = $2
		  AND day IN ((now() AT TIME ZONE 'UTC')::date, (now() AT TIME ZONE 'UTC')::date + 1)`, tenant, first.ID).Scan(&keys))
	require.Equal(t, 2, keys, "held today and tomorrow")

	heldSince := func(daysAgo int) {
		t.Helper()
		_, err := pool.Exec(ctx, `DELETE FROM event_keys WHERE tenant_id = $1`, tenant)
		require.NoError(t, err)
		_, err = pool.Exec(ctx, `INSERT INTO event_keys (tenant_id, idempotency_key, day, event_id)
			SELECT $1, 'order-1', (now() AT TIME ZONE 'UTC')::date - $2::int + d, $3 FROM generate_series(0, 1) d`,
			tenant, daysAgo, first.ID)
		require.NoError(t, err)
	}
	heldSince(1) // as if published yesterday, at whatever hour
	again, err := svc.Publish(ctx, tenant, req)
	require.NoError(t, err)
	require.True(t, again.Replayed)
	require.Equal(t, first.ID, again.ID)

	heldSince(2) // as if published the day before yesterday
	third, err := svc.Publish(ctx, tenant, req)
	require.NoError(t, err)
	require.False(t, third.Replayed, "the key is free again")
	require.NotEqual(t, first.ID, third.ID)
	got, err := svc.GetByKey(ctx, tenant, "order-1")
	require.NoError(t, err)
	require.Equal(t, third.ID, got.ID, "the latest event of the key")

	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM events WHERE tenant_id = $1`, tenant).Scan(&n))
	require.Equal(t, 2, n)
}

// An event published without a key gets idk_ and its id, stored in no
// idempotency key table: no other event can hold it. A producer repeating
// it (alone or in a batch) gets that event, or a conflict for another
// request; another tenant's event of the same key, or a key of the same
// form naming no event, is a new event whose key is stored as any other.
// Replays and test events get keys of their own id too.
func TestAGeneratedKeyIsTheEventsOwn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	svc, pool := runningService(t)
	tenant, other := addTenant(t, pool, "t"), addTenant(t, pool, "u")
	hook := hooks{t: t, store: webhook.NewStore(pool), tenant: tenant}.add([]string{"order.*"}, "")
	count := func(sql string, args ...any) int {
		t.Helper()
		var n int
		require.NoError(t, pool.QueryRow(ctx, sql, args...).Scan(&n))
		return n
	}
	storedKeys := func(tenant uuid.UUID) int {
		return count(`SELECT count(*) FROM event_keys WHERE tenant_id = $1`, tenant)
	}

	req := event.Request{EventType: "order.created", Data: json.RawMessage(`{"n":1}`)}
	first, err := svc.Publish(ctx, tenant, req)
	require.NoError(t, err)
	require.Equal(t, "idk_"+first.ID.String(), first.IdempotencyKey)
	require.Equal(t, 1, first.Deliveries)
	require.Zero(t, storedKeys(tenant), "a generated key is stored in no key table")
	got, err := svc.GetByKey(ctx, tenant, first.IdempotencyKey)
	require.NoError(t, err)
	require.Equal(t, first.ID, got.ID)

	repeat := req
	repeat.IdempotencyKey = first.IdempotencyKey
	again, err := svc.Publish(ctx, tenant, repeat)
	require.NoError(t, err)
	require.True(t, again.Replayed)
	require.Equal(t, first.ID, again.ID)
	require.Equal(t, 1, again.Deliveries)

	changed := repeat
	changed.Data = json.RawMessage(`{"n":2}`)
	_, err = svc.Publish(ctx, tenant, changed)
	require.ErrorIs(t, err, event.ErrIdempotencyConflict)

	batch, err := svc.PublishBatch(ctx, tenant, []event.Request{req, repeat, changed})
	require.NoError(t, err)
	require.NoError(t, batch[0].Err)
	require.False(t, batch[0].Result.Replayed)
	require.Equal(t, "idk_"+batch[0].Result.ID.String(), batch[0].Result.IdempotencyKey)
	require.NoError(t, batch[1].Err)
	require.True(t, batch[1].Result.Replayed)
	require.Equal(t, first.ID, batch[1].Result.ID)
	require.ErrorIs(t, batch[2].Err, event.ErrIdempotencyConflict)
	require.Zero(t, storedKeys(tenant))
	require.Equal(t, 2, count(`SELECT count(*) FROM events WHERE tenant_id = $1`, tenant))
	require.Equal(t, 2, count(`SELECT count(*) FROM deliveries WHERE webhook_id = $1`, hook.ID))

	elsewhere, err := svc.Publish(ctx, other, repeat)
	require.NoError(t, err, "another tenant's key is its own")
	require.False(t, elsewhere.Replayed)
	require.NotEqual(t, first.ID, elsewhere.ID)
	require.Equal(t, 2, storedKeys(other), "held today and tomorrow, as a producer's key")

	unclaimed := req
	unclaimed.IdempotencyKey = "idk_" + uuid.Must(uuid.NewV7()).String()
	fresh, err := svc.Publish(ctx, tenant, unclaimed)
	require.NoError(t, err)
	require.False(t, fresh.Replayed)
	require.Equal(t, 2, storedKeys(tenant))
	again, err = svc.Publish(ctx, tenant, unclaimed)
	require.NoError(t, err)
	require.True(t, again.Replayed)
	require.Equal(t, fresh.ID, again.ID)

	replay, err := svc.Replay(ctx, tenant, first.ID, nil)
	require.NoError(t, err)
	require.Equal(t, "idk_"+replay.ID.String(), replay.IdempotencyKey)
	test, err := svc.SendTest(ctx, tenant, hook.ID)
	require.NoError(t, err)
	require.Equal(t, "idk_"+test.ID.String(), test.IdempotencyKey)
	require.Equal(t, 2, storedKeys(tenant), "replays and test events store no key")
	repeat.IdempotencyKey = replay.IdempotencyKey
	again, err = svc.Publish(ctx, tenant, repeat)
	require.NoError(t, err)
	require.True(t, again.Replayed, "a replay's key is held by the replay, the original's request")
	require.Equal(t, replay.ID, again.ID)
}

// The publish commits write what the api tallies (history.MarkTallied):
// each delivery they create is counted once in the rollups, by the tally,
// and not by the rollup trigger too. A commit that skipped the setting
// counts them twice. The service stops before the count is read: the
// tally adds what it holds as it stops, and the trigger's counts, if any,
// were committed with the deliveries.
func TestPublishedDeliveriesAreCountedOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	svc := event.NewService(pool, nil, "", discard{}, slog.New(slog.DiscardHandler))
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- svc.Run(runCtx) }()
	tenant := addTenant(t, pool, "t")
	hook := hooks{t: t, store: webhook.NewStore(pool), tenant: tenant}.add([]string{"order.*"}, "")
	for i := range 3 {
		_, err := svc.Publish(ctx, tenant, event.Request{EventType: "order.created", Data: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))})
		require.NoError(t, err)
	}
	stop()
	require.NoError(t, <-done)
	var created int
	require.NoError(t, pool.QueryRow(ctx, `SELECT coalesce(sum(created), 0) FROM delivery_rollups WHERE scope_id = $1 AND NOT hourly`,
		hook.ID).Scan(&created))
	require.Equal(t, 3, created)
}

// A publish waits up to the commit window for others to share its commit.
// Events published 5 ms apart, with a window of 80 ms: once the committer
// has seen their pace (it starts as if publishes were sparse, and does not
// wait then), each commit holds many of them; events share a commit when
// they share their row's transaction id. With the default window (5 ms,
// waiting only while publishes come under 3.75 ms apart) each would
// commit alone.
// The commits are counted in hookline_publish_commit_events; the test
// does not run in parallel with the others, whose commits would count
// there too.
func TestCommitWindowSharesCommitsBetweenSpacedPublishes(t *testing.T) {
	ctx := context.Background()
	countBefore, sumBefore := commitEvents(t)
	pool := dbtest.New(t)
	svc := event.NewService(pool, nil, "", discard{}, slog.New(slog.DiscardHandler)).WithCommitWindow(80 * time.Millisecond)
	runService(t, svc)
	tenant := addTenant(t, pool, "t")
	const n = 60
	errs := make(chan error, n)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for i := range n {
		<-tick.C
		go func() {
			_, err := svc.Publish(ctx, tenant, event.Request{EventType: "order.created", Data: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))})
			errs <- err
		}()
	}
	for range n {
		require.NoError(t, <-errs)
	}
	var events, commits int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT xmin::text) FROM events WHERE tenant_id = $1`,
		tenant).Scan(&events, &commits))
	require.Equal(t, n, events)
	require.LessOrEqual(t, commits, n/3, "%d events in %d commits", events, commits)
	count, sum := commitEvents(t)
	require.Equal(t, uint64(commits), count-countBefore)
	require.Equal(t, float64(n), sum-sumBefore)
}

// commitEvents reads hookline_publish_commit_events: commits observed and
// the events they held.
func commitEvents(t *testing.T) (uint64, float64) {
	t.Helper()
	var m dto.Metric
	require.NoError(t, metrics.PublishCommitEvents.Write(&m))
	return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
}

// runningService is a Service on a database of its own, running until the
// test ends.
func runningService(t *testing.T) (*event.Service, *pgxpool.Pool) {
	t.Helper()
	pool := dbtest.New(t)
	svc := event.NewService(pool, nil, "", discard{}, slog.New(slog.DiscardHandler))
	runService(t, svc)
	return svc, pool
}
