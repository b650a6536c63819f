package tenant

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/config"
	"github.com/hookline/hookline/internal/db/dbtest"
	"github.com/hookline/hookline/internal/testwait"
)

func TestCachedAuthTrustsForTTLOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, store, tn, key := newTenantKey(t)

	now := time.Now()
	auth := NewCachedAuth(store, 5*time.Second)
	auth.now = func() time.Time { return now }

	p, err := auth.Authenticate(ctx, key)
	require.NoError(t, err)
	require.Equal(t, tn.ID, p.TenantID)
	_, err = auth.Authenticate(ctx, key+"x")
	require.ErrorIs(t, err, ErrUnauthorized)

	_, err = pool.Exec(ctx, `UPDATE api_keys SET revoked_at = now()`)
	require.NoError(t, err)
	_, err = store.Authenticate(ctx, key)
	require.ErrorIs(t, err, ErrUnauthorized, "the store sees the revocation at once")
	p, err = auth.Authenticate(ctx, key)
	require.NoError(t, err, "the cache trusts its answer within the TTL")
	require.Equal(t, tn.ID, p.TenantID)

	now = now.Add(5 * time.Second)
	_, err = auth.Authenticate(ctx, key)
	require.ErrorIs(t, err, ErrUnauthorized, "after the TTL the database is asked again")
}

func TestCachedAuthHonoursKeyExpiry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, store, _, key := newTenantKey(t)
	expires := time.Now().Add(2 * time.Second)
	_, err := pool.Exec(ctx, `UPDATE api_keys SET expires_at = $1`, expires)
	require.NoError(t, err)

	now := time.Now()
	auth := NewCachedAuth(store, time.Hour)
	auth.now = func() time.Time { return now }
	_, err = auth.Authenticate(ctx, key)
	require.NoError(t, err)
	now = expires.Add(time.Millisecond)
	// The database still answers with real time, so move the key's expiry
	// into the past there too.
	_, err = pool.Exec(ctx, `UPDATE api_keys SET expires_at = now() - interval '1 second'`)
	require.NoError(t, err)
	_, err = auth.Authenticate(ctx, key)
	require.ErrorIs(t, err, ErrUnauthorized, "a cached key is not trusted past its expiry")
}

// Requests missing the same key at the same moment share one lookup: with
// the table locked, twenty of them leave one query waiting in Postgres, and
// all get the answer once the lock goes.
func TestCachedAuthSharesOneLookupBetweenConcurrentMisses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, store, tn, key := newTenantKey(t)
	auth := NewCachedAuth(store, time.Minute)

	unlock := lockAPIKeys(t, pool)
	const requests = 20
	results := make(chan error, requests)
	for range requests {
		go func() {
			p, err := auth.Authenticate(ctx, key)
			if err == nil && p.TenantID != tn.ID {
				err = fmt.Errorf("tenant %s, want %s", p.TenantID, tn.ID)
			}
			results <- err
		}()
	}
	// The lock and this watch hold connections of their own: without
	// sharing, the requests' lookups would take every one of the pool's.
	watch, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig)
	require.NoError(t, err)
	defer watch.Close(ctx)
	waiting := func() int {
		var n int
		require.NoError(t, watch.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%api_keys%'`).Scan(&n))
		return n
	}
	require.Eventually(t, func() bool { return waiting() > 0 }, 10*time.Second, 10*time.Millisecond)
	// Had every request its own lookup, more would reach the database
	// within this window.
	testwait.Never(t, 300*time.Millisecond, func() bool { return waiting() > 1 }, "one lookup for %d requests", requests)
	unlock()
	for range requests {
		require.NoError(t, <-results)
	}
}

// A request that gives up stops waiting for the shared lookup; the others
// still get its answer.
func TestCachedAuthRequestGivingUpLeavesTheSharedLookup(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, store, _, key := newTenantKey(t)
	auth := NewCachedAuth(store, time.Minute)

	unlock := lockAPIKeys(t, pool)
	gaveUp, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	_, err := auth.Authenticate(gaveUp, key)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	patient := make(chan error, 1)
	go func() {
		_, err := auth.Authenticate(ctx, key)
		patient <- err
	}()
	unlock()
	require.NoError(t, <-patient)
}

// newTenantKey creates a tenant with an API key on a database of the test's own.
func newTenantKey(t *testing.T) (*pgxpool.Pool, *Store, Tenant, string) {
	t.Helper()
	pool := dbtest.New(t)
	store := NewStore(pool)
	tn, key, err := store.Create(context.Background(), Tenant{Name: "acme", RateLimit: config.RateLimit{RequestsPerMinute: 1, Burst: 1},
		PublishRateLimit: config.PublishRateLimit{RequestsPerSecond: 1, Burst: 1}})
	require.NoError(t, err)
	return pool, store, tn, key
}

// lockAPIKeys locks api_keys, on a connection of its own, until unlock is
// called or the test ends: every lookup of a key waits meanwhile.
func lockAPIKeys(t *testing.T, pool *pgxpool.Pool) (unlock func()) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig)
	require.NoError(t, err)
	lock, err := conn.Begin(ctx)
	require.NoError(t, err)
	_, err = lock.Exec(ctx, `LOCK TABLE api_keys IN ACCESS EXCLUSIVE MODE`)
	require.NoError(t, err)
	unlock = func() {
		_ = lock.Rollback(ctx)
		_ = conn.Close(ctx)
	}
	t.Cleanup(unlock)
	return unlock
}
