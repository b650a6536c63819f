package history

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/db/dbtest"
	"github.com/hookline/hookline/internal/unfinished"
)

// A webhook's unfinished floor moves to its oldest unfinished delivery and
// never past one, nor to within unfinished.FloorLag of now, nor back; a page of
// pending deliveries read from it reads a few pages, where one read from
// the webhook's first entry reads the entries every finished delivery
// left in deliveries_unfinished_idx. Another tenant cannot move it.
func TestUnfinishedListsReadFromTheWebhooksFloor(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	mine, others := dbtest.Seed(t, pool, 1), dbtest.Seed(t, pool, 0)
	tenant, hook := mine.Tenant, mine.Webhooks[0]
	exec := func(sql string, args ...any) {
		t.Helper()
		_, err := pool.Exec(ctx, sql, args...)
		require.NoError(t, err)
	}
	// delivery stores a delivery of its own event with the id of at.
	delivery := func(at time.Time, status string) uuid.UUID {
		t.Helper()
		id := IDAt(at)
		id[15] = 1
		exec(`INSERT INTO events (id, tenant_id, event_type, idempotency_key, request_hash, priority, data)
VALUES ($1, $2, 'a', $3, '\x00', 'normal', '{}')`, id, tenant, id.String())
		exec(`INSERT INTO deliveries (id, tenant_id, event_id, webhook_id, priority, status, created_at)
VALUES ($1, $2, $1, $3, 'normal', $4, $5)`, id, tenant, hook, status, at)
		return id
	}
	storedFloor := func() uuid.UUID {
		t.Helper()
		var f uuid.UUID
		require.NoError(t, pool.QueryRow(ctx, `SELECT floor FROM webhook_unfinished_floors WHERE webhook_id = $1`, hook).Scan(&f))
		return f
	}
	before := func(a, b uuid.UUID) bool { return bytes.Compare(a[:], b[:]) < 0 }
	r := NewReader(pool)
	now := time.Now()

	// 20,000 deliveries of two days ago that were pending and succeeded,
	// one retrying since three hours ago, and three pending of now.
	exec(`INSERT INTO deliveries (id, tenant_id, event_id, webhook_id, priority, status)
SELECT uuidv7_floor(now() - interval '2 days' + g * interval '1 ms'), $1, $3, $2, 'normal', 'pending'
FROM generate_series(1, 20000) g`, tenant, hook, mine.Event)
	exec(`UPDATE deliveries SET status = 'succeeded', completed_at = now() WHERE webhook_id = $1`, hook)
	retrying := delivery(now.Add(-3*time.Hour), "retrying")
	var pending []uuid.UUID
	for i := range 3 {
		pending = append(pending, delivery(now.Add(time.Duration(i-3)*time.Second), "pending"))
	}
	exec(`ANALYZE deliveries`)

	sp, err := r.UnfinishedSpan(ctx, tenant, hook)
	require.NoError(t, err)
	floor := sp.Floor
	require.Equal(t, retrying, floor, "the oldest unfinished delivery")
	require.Equal(t, floor, storedFloor())

	ids := func(status string) []uuid.UUID {
		t.Helper()
		page, err := r.List(ctx, tenant, hook, ListFilter{Status: &status, Limit: 50})
		require.NoError(t, err)
		out := []uuid.UUID{}
		for _, d := range page {
			out = append(out, d.ID)
		}
		return out
	}
	require.Equal(t, pending, ids("pending"))
	require.Equal(t, []uuid.UUID{retrying}, ids("retrying"))

	// The page of pending deliveries, read from the floor and from the
	// webhook's first entry.
	pendingStatus := "pending"
	fromFloor := dbtest.PagesRead(t, pool, listDeliveriesSQL, hook, tenant, nil, &pendingStatus, nil, nil, nil, 50, floor, MaxID, nil)
	fromStart := dbtest.PagesRead(t, pool, listDeliveriesSQL, hook, tenant, nil, &pendingStatus, nil, nil, nil, 50, uuid.Nil, MaxID, nil)
	t.Logf("pages read: %d from the floor, %d from the first entry", fromFloor, fromStart)
	require.Less(t, fromFloor, 40)
	require.Greater(t, fromStart, fromFloor+60, "the 20,000 finished deliveries' entries")

	// Another tenant's call moves nothing.
	exec(`UPDATE deliveries SET status = 'exhausted', completed_at = now() WHERE id = $1`, retrying)
	_, err = r.UnfinishedSpan(ctx, others.Tenant, hook)
	require.NoError(t, err)
	require.Equal(t, retrying, storedFloor())

	// With the retrying one exhausted, the floor moves up to unfinished.FloorLag
	// before now, short of the pending deliveries.
	earliest := time.Now().Add(-unfinished.FloorLag).UnixMilli()
	sp, err = r.UnfinishedSpan(ctx, tenant, hook)
	require.NoError(t, err)
	floor = sp.Floor
	latest := time.Now().Add(-unfinished.FloorLag).UnixMilli()
	require.False(t, before(floor, retrying) || floor == retrying, "moved past the finished delivery")
	// A UUIDv7's first six bytes are its millisecond.
	ms := int64(0)
	for _, b := range floor[:6] {
		ms = ms<<8 | int64(b)
	}
	require.GreaterOrEqual(t, ms, earliest, "unfinished.FloorLag before the call's now")
	require.LessOrEqual(t, ms, latest, "no later than unfinished.FloorLag before now")
	require.True(t, before(floor, pending[0]))
	require.Equal(t, floor, storedFloor())

	// A delivery committed late, with an id taken within the lag, is
	// still at or after the floor, and listed.
	late := delivery(time.Now().Add(-unfinished.FloorLag/2), "pending")
	require.Equal(t, append([]uuid.UUID{late}, pending...), ids("pending"))

	// The floor never moves back: with a stored floor later than what a
	// call finds, the call keeps it; and the lists read from it, so that
	// with the floor ahead of every delivery they find none.
	ahead := IDAt(time.Now().Add(time.Hour))
	exec(`UPDATE webhook_unfinished_floors SET floor = $2 WHERE webhook_id = $1`, hook, ahead)
	sp, err = r.UnfinishedSpan(ctx, tenant, hook)
	require.NoError(t, err)
	floor = sp.Floor
	require.Equal(t, ahead, floor)
	require.Equal(t, ahead, storedFloor())
	require.Empty(t, ids("pending"))
	require.Empty(t, ids("retrying"))
	require.Len(t, ids("succeeded"), 50, "other states read from the first delivery")
}

// Old unfinished deliveries hold the floor, but not the span. With five
// deliveries retrying since two days ago and 20,000 that came and finished
// after them, the span keeps the five by id and its head at
// unfinished.FloorLag before now: a list reads those by id and the range
// from the head, where one from the floor reads every entry the 20,000
// left. Once the five end, none is kept. With more old ones than
// unfinished.BehindCap (another webhook, 150), the span keeps the oldest
// by id and its head is the next; lists page through all of them, then
// the pending ones of now, in order.
func TestUnfinishedSpanReadsPastOldDeliveries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	s := dbtest.Seed(t, pool, 2)
	tenant := s.Tenant
	exec := func(sql string, args ...any) {
		t.Helper()
		_, err := pool.Exec(ctx, sql, args...)
		require.NoError(t, err)
	}
	ids := func(sql string, args ...any) []uuid.UUID {
		t.Helper()
		var out []uuid.UUID
		require.NoError(t, pool.QueryRow(ctx, `SELECT coalesce(array_agg(id ORDER BY id), '{}') FROM (`+sql+`) x`, args...).Scan(&out))
		return out
	}
	// store gives webhook n old deliveries retrying since two days ago,
	// finished ones that came after them, and three pending of now, and
	// returns the old and the pending ones.
	store := func(hook uuid.UUID, n, finished int) (old, pending []uuid.UUID) {
		t.Helper()
		exec(`INSERT INTO deliveries (id, tenant_id, event_id, webhook_id, priority, status)
SELECT uuidv7_floor(now() - interval '2 days' + g * interval '1 ms'), $1, $3, $2, 'normal', 'retrying'
FROM generate_series(1, $4) g`, tenant, hook, s.Event, n)
		exec(`INSERT INTO deliveries (id, tenant_id, event_id, webhook_id, priority, status)
SELECT uuidv7_floor(now() - interval '1 day' + g * interval '1 ms'), $1, $3, $2, 'normal', 'pending'
FROM generate_series(1, $4) g`, tenant, hook, s.Event, finished)
		exec(`UPDATE deliveries SET status = 'succeeded', completed_at = now() WHERE webhook_id = $1 AND status = 'pending'`, hook)
		exec(`INSERT INTO deliveries (id, tenant_id, event_id, webhook_id, priority, status)
SELECT uuidv7(), $1, $3, $2, 'normal', 'pending' FROM generate_series(1, 3)`, tenant, hook, s.Event)
		return ids(`SELECT id FROM deliveries WHERE webhook_id = $1 AND status = 'retrying'`, hook),
			ids(`SELECT id FROM deliveries WHERE webhook_id = $1 AND status = 'pending'`, hook)
	}
	r := NewReader(pool)
	// page lists the webhook's deliveries of a status in pages of 40.
	page := func(hook uuid.UUID, status string) []uuid.UUID {
		t.Helper()
		all := []uuid.UUID{}
		var after *uuid.UUID
		for {
			p, err := r.List(ctx, tenant, hook, ListFilter{Status: &status, After: after, Limit: 40})
			require.NoError(t, err)
			for _, d := range p {
				all = append(all, d.ID)
			}
			if len(p) < 40 {
				return all
			}
			after = &p[len(p)-1].ID
		}
	}

	hook := s.Webhooks[0]
	old, pending := store(hook, 5, 20000)
	exec(`ANALYZE deliveries`)
	sp, err := r.UnfinishedSpan(ctx, tenant, hook)
	require.NoError(t, err)
	require.Equal(t, old[0], sp.Floor, "the floor stays at the oldest")
	require.Equal(t, old, sp.Behind)
	finished := ids(`SELECT id FROM deliveries WHERE webhook_id = $1 AND status = 'succeeded' ORDER BY id DESC LIMIT 1`, hook)
	require.Greater(t, sp.Head.String(), finished[0].String(), "the head past the finished deliveries")
	require.Less(t, sp.Head.String(), pending[0].String(), "and short of the pending ones")
	require.Equal(t, old, page(hook, "retrying"))
	require.Equal(t, pending, page(hook, "pending"))

	retrying := "retrying"
	byID := dbtest.PagesRead(t, pool, listDeliveriesSQL, hook, tenant, nil, nil, nil, nil, nil, len(sp.Behind), sp.Floor, sp.Head, sp.Behind)
	fromHead := dbtest.PagesRead(t, pool, listDeliveriesSQL, hook, tenant, nil, &retrying, nil, nil, nil, 50, sp.Head, MaxID, nil)
	fromFloor := dbtest.PagesRead(t, pool, listDeliveriesSQL, hook, tenant, nil, &retrying, nil, nil, nil, 50, sp.Floor, MaxID, nil)
	t.Logf("pages read: %d by id and %d from the head, %d from the floor", byID, fromHead, fromFloor)
	require.Less(t, byID+fromHead, 60)
	require.Greater(t, fromFloor, byID+fromHead+60, "the entries of the 20,000 finished deliveries")

	// A call a moment later finds the same and writes nothing: the head
	// moved by less than unfinished.HeadStep. Nor does it lock the row (a
	// lock sets its xmax), which would make the read a write that waits
	// for a WAL flush at its commit.
	version := func() string {
		t.Helper()
		var v string
		require.NoError(t, pool.QueryRow(ctx, `SELECT xmin::text || '/' || xmax::text FROM webhook_unfinished_floors WHERE webhook_id = $1`, hook).Scan(&v))
		return v
	}
	written := version()
	again, err := r.UnfinishedSpan(ctx, tenant, hook)
	require.NoError(t, err)
	require.Equal(t, sp.Behind, again.Behind)
	require.Equal(t, written, version(), "the row neither written nor locked again")

	exec(`UPDATE deliveries SET status = 'exhausted', completed_at = now() WHERE webhook_id = $1 AND status = 'retrying'`, hook)
	sp, err = r.UnfinishedSpan(ctx, tenant, hook)
	require.NoError(t, err)
	require.Empty(t, sp.Behind)
	require.Empty(t, page(hook, "retrying"))
	require.Equal(t, pending, page(hook, "pending"))

	// More old ones than the span keeps by id.
	other := s.Webhooks[1]
	old, pending = store(other, 150, 0)
	sp, err = r.UnfinishedSpan(ctx, tenant, other)
	require.NoError(t, err)
	require.Equal(t, old[:unfinished.BehindCap], sp.Behind)
	require.Equal(t, old[unfinished.BehindCap], sp.Head)
	require.Equal(t, old, page(other, "retrying"))
	require.Equal(t, pending, page(other, "pending"))
}
