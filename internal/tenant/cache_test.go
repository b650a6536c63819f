package tenant

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/config"
	"github.com/hookline/hookline/internal/db/dbtest"
)

func TestCachedAuthTrustsForTTLOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	store := NewStore(pool)
	tn, key, err := store.Create(ctx, Tenant{Name: "acme", RateLimit: config.RateLimit{RequestsPerMinute: 1, Burst: 1},
		PublishRateLimit: config.PublishRateLimit{RequestsPerSecond: 1, Burst: 1}})
	require.NoError(t, err)

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
	pool := dbtest.New(t)
	store := NewStore(pool)
	_, key, err := store.Create(ctx, Tenant{Name: "acme", RateLimit: config.RateLimit{RequestsPerMinute: 1, Burst: 1},
		PublishRateLimit: config.PublishRateLimit{RequestsPerSecond: 1, Burst: 1}})
	require.NoError(t, err)
	expires := time.Now().Add(2 * time.Second)
	_, err = pool.Exec(ctx, `UPDATE api_keys SET expires_at = $1`, expires)
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
