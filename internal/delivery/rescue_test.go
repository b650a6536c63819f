package delivery

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/db/dbtest"
	"github.com/hookline/hookline/internal/testwait"
)

// The rescue of a lost release unparks the head of an order key parked for
// longer than its age, and no other. It finds them among the deliveries
// parked behind their order key alone: the thousands parked for a backoff
// or a busy host beside them are not read.
func TestRescueReleasesTheStalledHeadOfAnOrderKeyOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	seed := dbtest.Seed(t, pool, 1)
	hook := seed.Webhooks[0]
	exec := func(sql string, args ...any) {
		t.Helper()
		_, err := pool.Exec(ctx, sql, args...)
		require.NoError(t, err)
	}
	// 2,000 retries waiting out their backoff, parked an hour ago.
	exec(`INSERT INTO deliveries (id, tenant_id, event_id, webhook_id, priority, status, attempt_count, parked_at,
    park_reason, next_attempt_at)
SELECT uuidv7(), $1, $2, $3, 'normal', 'retrying', 1, now() - interval '1 hour', 'backoff', now() + interval '1 hour'
FROM generate_series(1, 2000)`, seed.Tenant, seed.Event, hook)
	// Key a: its head parked a minute ago, its release lost. Key b: its
	// head parked a second ago, its release still to come.
	stalled, recent, behind := uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
	for _, d := range []struct {
		id       uuid.UUID
		key      string
		parkedAt string
	}{{stalled, "a", "1 minute"}, {behind, "a", "1 minute"}, {recent, "b", "1 second"}} {
		exec(`INSERT INTO deliveries (id, tenant_id, event_id, webhook_id, priority, order_key, parked_at, park_reason)
VALUES ($1, $2, $3, $4, 'normal', $5, now() - $6::interval, 'order')`, d.id, seed.Tenant, seed.Event, hook, d.key, d.parkedAt)
	}
	exec(`ANALYZE deliveries`)

	var plan []string
	rows, err := pool.Query(ctx, `EXPLAIN (ANALYZE, COSTS OFF) `+stalledKeysSQL, "10 seconds")
	require.NoError(t, err)
	for rows.Next() {
		var line string
		require.NoError(t, rows.Scan(&line))
		plan = append(plan, line)
	}
	require.NoError(t, rows.Err())
	// A partition's index is named after the partition and the
	// partitioned table's index (deliveries_before_order_parked_idx).
	require.Contains(t, strings.Join(plan, "\n"), "_order_parked_idx on", "the order parks' own index")
	require.NotRegexp(t, `Rows Removed by Filter: [0-9]{3,}`, strings.Join(plan, "\n"), "no backoff parking read")

	rescueCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- RescueStalledKeys(rescueCtx, pool, slog.New(slog.DiscardHandler), 50*time.Millisecond, 10*time.Second)
	}()
	parked := func(id uuid.UUID) bool {
		var p bool
		require.NoError(t, pool.QueryRow(ctx, `SELECT parked_at IS NOT NULL FROM deliveries WHERE id = $1`, id).Scan(&p))
		return p
	}
	testwait.Eventually(t, 10*time.Second, func() bool { return !parked(stalled) }, "the stalled head released")
	stop()
	require.NoError(t, <-done)
	require.True(t, parked(behind), "the delivery behind the head waits for the head")
	require.True(t, parked(recent), "a head parked a second ago waits for its own release")
	var backoff int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM deliveries WHERE park_reason = 'backoff'`).Scan(&backoff))
	require.Equal(t, 2000, backoff)
}

// Between vacuums deliveries_unfinished_idx keeps an entry for every
// delivery that was ever unfinished, while the statistics show almost none
// unfinished. The rescue reads the order keys' parked heads through
// deliveries_order_parked_idx, not that index, from a generic plan or a
// custom one.
func TestRescueReadsTheOrderIndexesBetweenVacuums(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	seed := dbtest.Seed(t, pool, 1)
	dbtest.FinishedBehind(t, pool, seed, seed.Webhooks[0], 20000)
	_, err := pool.Exec(ctx, `INSERT INTO deliveries (id, tenant_id, event_id, webhook_id, priority, order_key, parked_at, park_reason)
VALUES (uuidv7(), $1, $2, $3, 'normal', 'k', now() - interval '1 hour', 'order')`, seed.Tenant, seed.Event, seed.Webhooks[0])
	require.NoError(t, err)

	dbtest.ReadsIndex(t, pool, "deliveries_order_parked_idx", 20, stalledKeysSQL, "'1 minute'")
}
