package tenant

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/config"
	"github.com/hookline/hookline/internal/db/dbtest"
)

func newTenant(t *testing.T, store *Store, name string) (Tenant, string) {
	t.Helper()
	tn, key, err := store.Create(context.Background(), Tenant{Name: name, RateLimit: config.RateLimit{RequestsPerMinute: 1, Burst: 1},
		PublishRateLimit: config.PublishRateLimit{RequestsPerSecond: 1, Burst: 1}})
	require.NoError(t, err)
	return tn, key
}

func TestKeyLifecycle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	store := NewStore(pool)
	tn, first := newTenant(t, store, "acme")
	other, _ := newTenant(t, store, "other")

	expires := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	k, err := BuildKey(KeyInput{Name: ptr(" ci "), ExpiresAt: &expires}, time.Now())
	require.NoError(t, err)
	k, second, err := store.CreateKey(ctx, tn.ID, k)
	require.NoError(t, err)
	require.Equal(t, "ci", k.Name)
	require.Equal(t, second[:prefixLen], k.Prefix)
	require.NotEqual(t, first, second)

	keys, err := store.ListKeys(ctx, tn.ID, nil, 10)
	require.NoError(t, err)
	require.Len(t, keys, 2)
	require.Equal(t, "default", keys[0].Name)
	require.Equal(t, k.ID, keys[1].ID)
	require.NotNil(t, keys[1].ExpiresAt)
	var stored int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM api_keys WHERE key_hash = $1 OR prefix = $2`, []byte(second), second).Scan(&stored))
	require.Zero(t, stored, "neither the key nor its whole text is stored")

	p, err := store.Authenticate(ctx, second)
	require.NoError(t, err)
	require.Equal(t, k.ID, p.KeyID)

	require.ErrorIs(t, store.RevokeKey(ctx, other.ID, k.ID), ErrKeyNotFound, "another tenant's key is unknown")
	require.ErrorIs(t, store.RevokeKey(ctx, tn.ID, uuid.New()), ErrKeyNotFound)
	require.NoError(t, store.RevokeKey(ctx, tn.ID, k.ID))
	require.NoError(t, store.RevokeKey(ctx, tn.ID, k.ID), "revoking twice is not an error")
	_, err = store.Authenticate(ctx, second)
	require.ErrorIs(t, err, ErrUnauthorized)
	require.ErrorIs(t, store.RevokeKey(ctx, tn.ID, keys[0].ID), ErrLastKey)
	_, err = store.Authenticate(ctx, first)
	require.NoError(t, err, "the last key still works")

	var actions []string
	rows, err := pool.Query(ctx, `SELECT action FROM audit_log WHERE tenant_id = $1 ORDER BY id`, tn.ID)
	require.NoError(t, err)
	for rows.Next() {
		var a string
		require.NoError(t, rows.Scan(&a))
		actions = append(actions, a)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{"tenant.created", "api_key.created", "api_key.revoked"}, actions)
}

func TestBuildKeyRefusals(t *testing.T) {
	t.Parallel()
	now := time.Now()
	past, bad := now.Add(-time.Second).Format(time.RFC3339), "tomorrow"
	for _, c := range []struct {
		name  string
		in    KeyInput
		field string
	}{
		{"empty name", KeyInput{Name: ptr(" ")}, "name"},
		{"long name", KeyInput{Name: ptr(string(make([]byte, 201)))}, "name"},
		{"NUL in name", KeyInput{Name: ptr("ci\x00")}, "name"},
		{"name not UTF-8", KeyInput{Name: ptr("caf\xe9")}, "name"},
		{"past expiry", KeyInput{ExpiresAt: &past}, "expires_at"},
		{"bad expiry", KeyInput{ExpiresAt: &bad}, "expires_at"},
	} {
		_, err := BuildKey(c.in, now)
		require.ErrorContains(t, err, c.field, c.name)
	}
}

// Two requests revoking a tenant's last two keys at once: one wins, the
// other is refused, and one key stays active.
func TestConcurrentRevocationsKeepOneKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	store := NewStore(pool)
	tn, _ := newTenant(t, store, "acme")
	_, _, err := store.CreateKey(ctx, tn.ID, Key{Name: "second"})
	require.NoError(t, err)
	keys, err := store.ListKeys(ctx, tn.ID, nil, 10)
	require.NoError(t, err)
	require.Len(t, keys, 2)

	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i, k := range keys {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = store.RevokeKey(ctx, tn.ID, k.ID) }()
	}
	wg.Wait()
	require.ElementsMatch(t, []bool{true, false}, []bool{errs[0] == nil, errs[1] == nil}, "%v", errs)
	require.Equal(t, 1, activeKeys(t, pool, tn.ID))
}

func TestLastUsedAtWrittenAtMostOncePerMinute(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	store := NewStore(pool)
	_, key := newTenant(t, store, "acme")
	lastUsed := func() *time.Time {
		var at *time.Time
		require.NoError(t, pool.QueryRow(ctx, `SELECT last_used_at FROM api_keys`).Scan(&at))
		return at
	}
	require.Nil(t, lastUsed())
	_, err := store.Authenticate(ctx, key)
	require.NoError(t, err)
	first := lastUsed()
	require.NotNil(t, first)
	var xmin string
	require.NoError(t, pool.QueryRow(ctx, `SELECT xmin::text FROM api_keys`).Scan(&xmin))
	for range 5 {
		_, err = store.Authenticate(ctx, key)
		require.NoError(t, err)
	}
	var xmin2 string
	require.NoError(t, pool.QueryRow(ctx, `SELECT xmin::text FROM api_keys`).Scan(&xmin2))
	require.Equal(t, xmin, xmin2, "no new row version within the minute")
	require.Equal(t, *first, *lastUsed())

	_, err = pool.Exec(ctx, `UPDATE api_keys SET last_used_at = now() - interval '61 seconds'`)
	require.NoError(t, err)
	_, err = store.Authenticate(ctx, key)
	require.NoError(t, err)
	require.WithinDuration(t, time.Now(), *lastUsed(), 5*time.Second)
}

// A revocation is seen at once by the cache of the process that revoked the
// key, however long its TTL.
func TestCachedAuthForgetsRevokedKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	store := NewStore(pool)
	tn, _ := newTenant(t, store, "acme")
	k, key, err := store.CreateKey(ctx, tn.ID, Key{Name: "ci"})
	require.NoError(t, err)
	auth := NewCachedAuth(store, time.Hour)
	_, err = auth.Authenticate(ctx, key)
	require.NoError(t, err)
	require.NoError(t, store.RevokeKey(ctx, tn.ID, k.ID))
	auth.Forget(k.ID)
	_, err = auth.Authenticate(ctx, key)
	require.ErrorIs(t, err, ErrUnauthorized)
}

func activeKeys(t *testing.T, pool *pgxpool.Pool, tenantID uuid.UUID) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), countActiveSQL, tenantID).Scan(&n))
	return n
}

func ptr[T any](v T) *T { return &v }
