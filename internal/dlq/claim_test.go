package dlq

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/db"
	"github.com/hookline/hookline/internal/db/dbtest"
)

// These tests call claim as Run does each time a slot is free, on their
// own database; a claimed batch stays running until the test finishes it,
// so what is running is exactly what was claimed.

func newTenant(t *testing.T, pool *pgxpool.Pool) uuid.UUID {
	t.Helper()
	id := uuid.New()
	_, err := pool.Exec(context.Background(), `INSERT INTO tenants (id, name, rate_limit_rpm, rate_limit_burst, publish_rps, publish_burst)
VALUES ($1, 't', 1, 1, 1, 1)`, id)
	require.NoError(t, err)
	return id
}

// newBatches stores n pending batches of the tenant, created age ago and
// one second apart, oldest first. Their filter matches no delivery.
func newBatches(t *testing.T, pool *pgxpool.Pool, tenantID uuid.UUID, n int, age time.Duration) []uuid.UUID {
	t.Helper()
	ids := make([]uuid.UUID, n)
	for i := range ids {
		ids[i] = uuid.Must(uuid.NewV7())
		_, err := pool.Exec(context.Background(), `INSERT INTO batch_operations (id, tenant_id, filter, requests_per_second, priority, created_at)
VALUES ($1, $2, '{"event_types": ["order.created"]}', 10, 'normal', now() - $3::interval)`,
			ids[i], tenantID, age-time.Duration(i)*time.Second)
		require.NoError(t, err)
	}
	return ids
}

func newClaimRunner(pool *pgxpool.Pool, perTenant int) *Runner {
	r := NewRunner(pool, nil, slog.New(slog.DiscardHandler), 2, 30*time.Second)
	r.ConcurrencyPerTenant = perTenant
	return r
}

func mustClaim(t *testing.T, r *Runner) claim {
	t.Helper()
	c, ok, err := r.claim(context.Background())
	require.NoError(t, err)
	require.True(t, ok, "a batch to be claimed")
	return c
}

func requireNoClaim(t *testing.T, r *Runner, why string) {
	t.Helper()
	c, ok, err := r.claim(context.Background())
	require.NoError(t, err)
	require.False(t, ok, "%s; claimed %s of tenant %s", why, c.id, c.tenantID)
}

// runningPerTenant counts the running batches of each tenant whose claim
// is fresh.
func runningPerTenant(t *testing.T, pool *pgxpool.Pool) map[uuid.UUID]int {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT tenant_id, count(*)::int FROM batch_operations
WHERE state = 'running' AND heartbeat_at > now() - interval '30 seconds' GROUP BY tenant_id`)
	require.NoError(t, err)
	got := map[uuid.UUID]int{}
	var id uuid.UUID
	var n int
	_, err = pgx.ForEachRow(rows, []any{&id, &n}, func() error { got[id] = n; return nil })
	require.NoError(t, err)
	return got
}

func batchState(t *testing.T, pool *pgxpool.Pool, id uuid.UUID) string {
	t.Helper()
	var s string
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT state FROM batch_operations WHERE id = $1`, id).Scan(&s))
	return s
}

// Tenant A's three batches are all older than tenant B's one; with two
// slots and one batch per tenant, A and B run one each, and A's other two
// wait.
func TestBatchClaimSharesSlotsBetweenTenants(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	a, b := newTenant(t, pool), newTenant(t, pool)
	aIDs := newBatches(t, pool, a, 3, time.Hour)
	bIDs := newBatches(t, pool, b, 1, time.Minute)
	r := newClaimRunner(pool, 1)

	first, second := mustClaim(t, r), mustClaim(t, r)
	require.Equal(t, aIDs[0], first.id, "A's oldest first")
	require.Equal(t, bIDs[0], second.id, "then B's, though A's next are older")
	requireNoClaim(t, r, "both tenants run their one batch")
	require.Equal(t, map[uuid.UUID]int{a: 1, b: 1}, runningPerTenant(t, pool))
	require.Equal(t, "pending", batchState(t, pool, aIDs[1]))
	require.Equal(t, "pending", batchState(t, pool, aIDs[2]))
}

// Under a cap of two, the tenant with fewer running batches goes first:
// B's first batch before A's second, though A's is older.
func TestBatchClaimPrefersTenantWithFewestRunning(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	a, b := newTenant(t, pool), newTenant(t, pool)
	aIDs := newBatches(t, pool, a, 3, time.Hour)
	bIDs := newBatches(t, pool, b, 1, time.Minute)
	r := newClaimRunner(pool, 2)

	var got []uuid.UUID
	for range 3 {
		got = append(got, mustClaim(t, r).id)
	}
	require.Equal(t, []uuid.UUID{aIDs[0], bIDs[0], aIDs[1]}, got)
	requireNoClaim(t, r, "A runs two, B has no more")
	require.Equal(t, "pending", batchState(t, pool, aIDs[2]))
}

// When A's running batch finishes, A's next one is claimed; a batch that
// has enqueued every retry and waits for their outcomes no longer holds
// A's place either.
func TestBatchClaimTakesTenantsNextBatchWhenOneFinishes(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	a := newTenant(t, pool)
	ids := newBatches(t, pool, a, 3, time.Hour)
	r := newClaimRunner(pool, 1)
	ctx := context.Background()

	c := mustClaim(t, r)
	require.Equal(t, ids[0], c.id)
	requireNoClaim(t, r, "A runs its one batch")
	r.run(ctx, c) // its filter matches nothing: it completes at once
	require.Equal(t, "completed", batchState(t, pool, ids[0]))

	c = mustClaim(t, r)
	require.Equal(t, ids[1], c.id)
	requireNoClaim(t, r, "A runs its one batch")
	tag, err := pool.Exec(ctx, finishEnqueueSQL, c.id, r.ID)
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected())
	require.Equal(t, "running", batchState(t, pool, ids[1]), "it waits for its retries' outcomes")

	require.Equal(t, ids[2], mustClaim(t, r).id)
}

// Two dlq processes, each on its own pool, claim from many goroutines at
// once; no tenant ever runs more than the cap, and no batch is claimed
// twice.
func TestBatchClaimCapHoldsAcrossConcurrentProcesses(t *testing.T) {
	t.Parallel()
	url := dbtest.NewURL(t, true)
	ctx := context.Background()
	var runners []*Runner
	for range 2 {
		pool, err := db.Open(ctx, url, 16)
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		runners = append(runners, newClaimRunner(pool, 2))
	}
	pool := runners[0].pool
	tenants := []uuid.UUID{newTenant(t, pool), newTenant(t, pool), newTenant(t, pool)}
	for _, id := range tenants {
		newBatches(t, pool, id, 10, time.Hour)
	}

	var (
		mu      sync.Mutex
		claimed []uuid.UUID
		errs    []error
		wg      sync.WaitGroup
	)
	start := make(chan struct{})
	for i := range 32 {
		r := runners[i%2]
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for range 4 {
				c, ok, err := r.claim(ctx)
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				}
				if ok {
					claimed = append(claimed, c.id)
				}
				mu.Unlock()
			}
		}()
	}
	close(start)
	wg.Wait()
	require.Empty(t, errs)
	require.NotEmpty(t, claimed)
	for tenant, n := range runningPerTenant(t, pool) {
		require.LessOrEqual(t, n, 2, "tenant %s runs %d batches", tenant, n)
	}

	// A claim that found a tenant being claimed elsewhere moved on; what
	// room is left is taken now, and no more.
	for {
		c, ok, err := runners[0].claim(ctx)
		require.NoError(t, err)
		if !ok {
			break
		}
		claimed = append(claimed, c.id)
	}
	require.Equal(t, map[uuid.UUID]int{tenants[0]: 2, tenants[1]: 2, tenants[2]: 2}, runningPerTenant(t, pool))
	require.Len(t, claimed, 6)
	seen := map[uuid.UUID]bool{}
	for _, id := range claimed {
		require.False(t, seen[id], "batch %s claimed twice", id)
		seen[id] = true
	}
}

// A batch whose process died (its heartbeat is older than the claim
// timeout) no longer counts against its tenant: another process takes it
// over, and then it counts again.
func TestBatchClaimDoesNotCountAbandonedBatch(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	a := newTenant(t, pool)
	ids := newBatches(t, pool, a, 2, time.Hour)
	dead, live := newClaimRunner(pool, 1), newClaimRunner(pool, 1)

	require.Equal(t, ids[0], mustClaim(t, dead).id)
	requireNoClaim(t, live, "A's batch runs in the other process")
	// The other process dies: its heartbeats stop. Rather than wait out
	// the claim timeout, date its last one back past it.
	_, err := pool.Exec(context.Background(), `UPDATE batch_operations SET heartbeat_at = now() - interval '1 minute' WHERE id = $1`, ids[0])
	require.NoError(t, err)

	c := mustClaim(t, live)
	require.Equal(t, ids[0], c.id, "the abandoned batch is taken over, oldest first")
	var claimedBy string
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT claimed_by FROM batch_operations WHERE id = $1`, ids[0]).Scan(&claimedBy))
	require.Equal(t, live.ID, claimedBy)
	requireNoClaim(t, live, "the taken-over batch counts again")
	require.Equal(t, "pending", batchState(t, pool, ids[1]))
}
