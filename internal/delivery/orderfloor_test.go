package delivery

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/db/dbtest"
	"github.com/hookline/hookline/internal/testwait"
	"github.com/hookline/hookline/internal/webhook"
)

// The checks of an ordered webhook read its key from the key's floor on,
// not from the entries of every delivery the key ever had; a release moves
// the floor up to the key's new head (no later than five minutes ago), and
// a retry of an older event moves it down to the retry, which keeps its
// place before the later deliveries. A release that read the floor before
// a retry moved it leaves it where the retry put it.
func TestOrderChecksReadTheKeyFromItsFloor(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	seed := dbtest.Seed(t, pool, 1)
	hook := seed.Webhooks[0]
	const key = "floor-key"
	exec := func(sql string, args ...any) {
		t.Helper()
		_, err := pool.Exec(ctx, sql, args...)
		require.NoError(t, err)
	}
	// 20,000 deliveries of the key a day ago, all finished.
	exec(`INSERT INTO deliveries (id, tenant_id, event_id, webhook_id, priority, status, order_key, completed_at)
SELECT uuidv7(), $1, uuidv7_floor(now() - interval '1 day' + g * interval '1 ms'), $2, 'normal', 'pending', $3, NULL
FROM generate_series(1, 20000) g`, seed.Tenant, hook, key)
	exec(`UPDATE deliveries SET status = 'succeeded', completed_at = now() WHERE order_key = $1`, key)
	// Its head, on its way, and one parked behind it, of an event of now.
	var event uuid.UUID
	require.NoError(t, pool.QueryRow(ctx, `INSERT INTO events (id, tenant_id, event_type, idempotency_key, request_hash, priority)
VALUES (uuidv7(), $1, 'order.created', 'floor', '\x00', 'normal') RETURNING id`, seed.Tenant).Scan(&event))
	head, behind := uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
	exec(`INSERT INTO deliveries (id, tenant_id, event_id, webhook_id, priority, order_key) VALUES ($1, $2, $3, $4, 'normal', $5)`,
		head, seed.Tenant, event, hook, key)
	exec(`INSERT INTO deliveries (id, tenant_id, event_id, webhook_id, priority, order_key, parked_at, park_reason)
VALUES ($1, $2, $3, $4, 'normal', $5, now(), 'order')`, behind, seed.Tenant, event, hook, key)
	exec(`ANALYZE deliveries`)
	floor := func() [2]uuid.UUID {
		t.Helper()
		var f [2]uuid.UUID
		require.NoError(t, pool.QueryRow(ctx, `SELECT event_id, id FROM order_floors WHERE order_key = $1`, key).Scan(&f[0], &f[1]))
		return f
	}

	parked, err := waitYourTurn(ctx, pool, key, event, behind)
	require.NoError(t, err)
	require.True(t, parked, "the head is before it")
	// Without a floor, the check reads the key from its first entry.
	walked := dbtest.PagesRead(t, pool, checkSQL, key, event, behind)

	// The head finishes: the release unparks the next and raises the floor
	// to five minutes ago, the next being newer.
	exec(`UPDATE deliveries SET status = 'succeeded', completed_at = now() WHERE id = $1`, head)
	next, err := ReleaseNext(ctx, pool, key)
	require.NoError(t, err)
	require.NotNil(t, next)
	require.Equal(t, behind, next.DeliveryID)
	raised := floor()
	var fiveMinutesAgo bool
	require.NoError(t, pool.QueryRow(ctx, `SELECT $1::uuid BETWEEN uuidv7_floor(now() - interval '6 minutes')
    AND uuidv7_floor(now() - interval '4 minutes')`, raised[0]).Scan(&fiveMinutesAgo))
	require.True(t, fiveMinutesAgo, "five minutes ago: %s", raised[0])
	require.Equal(t, uuid.UUID{}, raised[1])
	// Other webhooks' deliveries of the last minutes, between the floor
	// and the event: the check reads the key's index, not theirs.
	exec(`INSERT INTO deliveries (id, tenant_id, event_id, webhook_id, priority, status, completed_at)
SELECT uuidv7(), $1, uuidv7_floor(now() - interval '2 minutes' + g * interval '1 ms'), $2, 'normal', 'succeeded', now()
FROM generate_series(1, 20000) g`, seed.Tenant, hook)
	exec(`ANALYZE deliveries`)
	bounded := dbtest.PagesRead(t, pool, checkSQL, key, event, behind)
	t.Logf("pages read by the check: %d from the key's first entry, %d from its floor", walked, bounded)
	// Each other week of deliveries, empty here, costs its index's first
	// pages.
	var weeks int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_inherits WHERE inhparent = 'deliveries'::regclass`).Scan(&weeks))
	require.Less(t, bounded, 8+2*(weeks-1), "from the floor")
	require.Greater(t, walked, 10*bounded, "from the key's first entry")
	parked, err = waitYourTurn(ctx, pool, key, event, behind)
	require.NoError(t, err)
	require.False(t, parked, "the next is the head now")

	// A retry of an event of a day ago moves the floor down to itself and
	// keeps its place: the delivery behind waits for it.
	oldEvent := func(offset int) uuid.UUID {
		t.Helper()
		var e uuid.UUID
		require.NoError(t, pool.QueryRow(ctx, `SELECT event_id FROM deliveries WHERE order_key = $1 ORDER BY event_id LIMIT 1 OFFSET $2`,
			key, offset).Scan(&e))
		return e
	}
	retried := oldEvent(100)
	retry := uuid.Must(uuid.NewV7())
	exec(`INSERT INTO deliveries (id, tenant_id, event_id, webhook_id, priority, order_key) VALUES ($1, $2, $3, $4, 'normal', $5)`,
		retry, seed.Tenant, retried, hook, key)
	k, e, i := webhook.OrderFloors([]string{key, "", key}, []uuid.UUID{retried, event, event}, []uuid.UUID{retry, behind, behind})
	require.Equal(t, []string{key}, k)
	exec(webhook.LowerOrderFloorsSQL, k, e, i)
	require.Equal(t, [2]uuid.UUID{retried, retry}, floor())
	parked, err = waitYourTurn(ctx, pool, key, event, behind)
	require.NoError(t, err)
	require.True(t, parked, "the retry keeps its place")

	// The retry succeeds. A release that read the floor before another
	// retry moved it down does not raise it past that retry: the release
	// waits for the retry's transaction to commit, then finds the floor
	// moved.
	exec(`UPDATE deliveries SET status = 'succeeded', completed_at = now() WHERE id = $1`, retry)
	older, again := oldEvent(50), uuid.Must(uuid.NewV7())
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck // committed below
	_, err = tx.Exec(ctx, `INSERT INTO deliveries (id, tenant_id, event_id, webhook_id, priority, order_key) VALUES ($1, $2, $3, $4, 'normal', $5)`,
		again, seed.Tenant, older, hook, key)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, webhook.LowerOrderFloorsSQL, []string{key}, []uuid.UUID{older}, []uuid.UUID{again})
	require.NoError(t, err)
	released := make(chan error, 1)
	go func() {
		_, err := ReleaseNext(ctx, pool, key)
		released <- err
	}()
	testwait.Eventually(t, 10*time.Second, func() bool {
		var waiting bool
		require.NoError(t, pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
    WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%INSERT INTO order_floors%')`).Scan(&waiting))
		return waiting
	}, "the release waits for the retry's row lock on the floor")
	require.NoError(t, tx.Commit(ctx))
	require.NoError(t, <-released)
	require.Equal(t, [2]uuid.UUID{older, again}, floor(), "the floor the retry moved")

	// A retry given a key without a floor gives it one that bounds
	// nothing: older unfinished deliveries it does not know of stay in
	// view.
	exec(webhook.LowerOrderFloorsSQL, []string{"other-key"}, []uuid.UUID{retried}, []uuid.UUID{retry})
	var other [2]uuid.UUID
	require.NoError(t, pool.QueryRow(ctx, `SELECT event_id, id FROM order_floors WHERE order_key = 'other-key'`).Scan(&other[0], &other[1]))
	require.Equal(t, noFloor, other)
}

// LowerOrderFloorsSQL reads its keys once, whatever their number: a chunk
// of 1,000 keys lowers the floors above its deliveries, keeps those below,
// and gives the new keys one that bounds nothing, with no part of its plan
// run again for each key.
func TestLowerOrderFloorsReadsItsKeysOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	const n = 1000
	keys := make([]string, n)
	events, ids := make([]uuid.UUID, n), make([]uuid.UUID, n)
	for j := range keys {
		keys[j] = fmt.Sprintf("key-%04d", j)
		events[j], ids[j] = uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
	}
	// Keys 0-499 have a floor above the new deliveries, 500-749 one below
	// them, 750-999 none.
	_, err := pool.Exec(ctx, `INSERT INTO order_floors (order_key, event_id, id)
SELECT k, CASE WHEN g < 500 THEN uuidv7_floor(now() + interval '1 hour') ELSE uuidv7_floor(now() - interval '1 hour') END, uuidv7()
FROM unnest($1::text[]) WITH ORDINALITY AS u(k, g1), LATERAL (SELECT g1 - 1 AS g) x WHERE g < 750`, keys)
	require.NoError(t, err)
	var before [2]uuid.UUID
	require.NoError(t, pool.QueryRow(ctx, `SELECT event_id, id FROM order_floors WHERE order_key = $1`, keys[600]).Scan(&before[0], &before[1]))

	var text string
	require.NoError(t, pool.QueryRow(ctx, `EXPLAIN (ANALYZE, FORMAT JSON) `+webhook.LowerOrderFloorsSQL, keys, events, ids).Scan(&text))
	var plan []struct{ Plan planNode }
	require.NoError(t, json.Unmarshal([]byte(text), &plan))
	require.Len(t, plan, 1)
	var walk func(planNode)
	walk = func(p planNode) {
		require.LessOrEqual(t, p.Loops, 1, "%s on %s runs once per key", p.Type, p.CTE)
		for _, c := range p.Plans {
			walk(c)
		}
	}
	walk(plan[0].Plan)

	floorOf := func(key string) [2]uuid.UUID {
		t.Helper()
		var f [2]uuid.UUID
		require.NoError(t, pool.QueryRow(ctx, `SELECT event_id, id FROM order_floors WHERE order_key = $1`, key).Scan(&f[0], &f[1]))
		return f
	}
	require.Equal(t, [2]uuid.UUID{events[0], ids[0]}, floorOf(keys[0]), "lowered")
	require.Equal(t, [2]uuid.UUID{events[499], ids[499]}, floorOf(keys[499]), "lowered")
	require.Equal(t, before, floorOf(keys[600]), "kept")
	require.Equal(t, noFloor, floorOf(keys[999]), "new, bounding nothing")
	var count int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM order_floors`).Scan(&count))
	require.Equal(t, n, count)
}

// planNode is a node of a plan as EXPLAIN (ANALYZE, FORMAT JSON) gives it.
type planNode struct {
	Type  string     `json:"Node Type"`
	CTE   string     `json:"CTE Name"`
	Loops int        `json:"Actual Loops"`
	Plans []planNode `json:"Plans"`
}
