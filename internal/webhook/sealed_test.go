package webhook

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"log/slog"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/db"
	"github.com/hookline/hookline/internal/db/dbtest"
	"github.com/hookline/hookline/internal/secret"
)

func testKeyring(t *testing.T, ids ...string) (*secret.Keyring, []string) {
	t.Helper()
	var entries []string
	for _, id := range ids {
		b := make([]byte, secret.KeySize)
		_, err := rand.Read(b)
		require.NoError(t, err)
		entries = append(entries, id+":"+base64.StdEncoding.EncodeToString(b))
	}
	k, err := secret.ParseKeys(entries)
	require.NoError(t, err)
	return k, entries
}

func newTenantRow(t *testing.T, pool *pgxpool.Pool) uuid.UUID {
	t.Helper()
	id := uuid.Must(uuid.NewV7())
	_, err := pool.Exec(context.Background(), `INSERT INTO tenants (id, name, rate_limit_rpm, rate_limit_burst, publish_rps, publish_burst)
VALUES ($1, 'acme', 1, 1, 1, 1)`, id)
	require.NoError(t, err)
	return id
}

func sealedFixture(tenantID uuid.UUID, secretValue string) Webhook {
	return Webhook{TenantID: tenantID, URL: "https://8.8.8.8/", Events: []string{"a"}, Active: true,
		RetryConfig: DefaultRetryConfig(), CircuitBreakerConfig: DefaultBreakerConfig(), RateLimit: RateLimit{1, 1},
		OrderingGuarantee: OrderingNone, Headers: map[string]string{}, Metadata: []byte(`{}`), Secret: secretValue}
}

// dumpWebhooks returns every column of every webhook row as text, and the
// pg_dump of the table when pg_dump is installed.
func dumpWebhooks(t *testing.T, pool *pgxpool.Pool, url string) string {
	t.Helper()
	var b strings.Builder
	rows, err := pool.Query(context.Background(), `SELECT w::text FROM webhooks w`)
	require.NoError(t, err)
	for rows.Next() {
		var line string
		require.NoError(t, rows.Scan(&line))
		b.WriteString(line + "\n")
	}
	require.NoError(t, rows.Err())
	if path, err := exec.LookPath("pg_dump"); err == nil {
		out, err := exec.Command(path, "--data-only", "--table=webhooks", url).Output()
		require.NoError(t, err)
		require.Contains(t, string(out), "COPY public.webhooks")
		b.Write(out)
	}
	return b.String()
}

// A dump of the database shows no webhook secret, current or previous;
// the API still reads them, and a key rotation re-encrypts them all.
func TestSecretsAreSealedAtRest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := dbtest.NewURL(t, true)
	pool, err := db.Open(ctx, url, 4)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	keys, entries := testKeyring(t, "k1")
	store := NewStore(pool, WithKeyring(keys))
	tenantID := newTenantRow(t, pool)

	first, second := NewSecret(), NewSecret()
	w, err := store.Create(ctx, sealedFixture(tenantID, first))
	require.NoError(t, err)
	_, err = store.RotateSecret(ctx, tenantID, w.ID, second, time.Now().Add(time.Hour))
	require.NoError(t, err)
	deleted, err := store.Create(ctx, sealedFixture(tenantID, NewSecret()))
	require.NoError(t, err)
	require.NoError(t, store.Delete(ctx, tenantID, deleted.ID))

	dump := dumpWebhooks(t, pool, url)
	for _, s := range []string{first, second, deleted.Secret} {
		require.NotContains(t, dump, s)
		require.NotContains(t, dump, strings.TrimPrefix(s, SecretPrefix), "not even the base64 part")
	}
	require.Contains(t, dump, "enc:v1:k1:")

	got, err := store.Get(ctx, tenantID, w.ID)
	require.NoError(t, err)
	require.Equal(t, second, got.Secret)
	require.Equal(t, first, got.PreviousSecret)
	_, err = NewStore(pool).Get(ctx, tenantID, w.ID)
	require.ErrorIs(t, err, secret.ErrUnknownKey, "without the key nothing opens")

	// A row written in clear before keys were configured.
	legacy, err := NewStore(pool).Create(ctx, sealedFixture(tenantID, NewSecret()))
	require.NoError(t, err)
	got, err = store.Get(ctx, tenantID, legacy.ID)
	require.NoError(t, err, "clear secrets stay readable until re-encrypted")
	require.Equal(t, legacy.Secret, got.Secret)

	// Rotate: a new current key, the old one kept for reading.
	newKeys, newEntries := testKeyring(t, "k2")
	both, err := secret.ParseKeys(append(newEntries, entries...))
	require.NoError(t, err)
	require.NoError(t, rotateSecretKey(ctx, pool, append(newEntries, entries...), discardLogger()))
	n, err := ReencryptSecrets(ctx, pool, both)
	require.NoError(t, err)
	require.Zero(t, n, "a second run has nothing left to do")

	dump = dumpWebhooks(t, pool, url)
	require.NotContains(t, dump, "enc:v1:k1:")
	require.NotContains(t, dump, legacy.Secret)
	onlyNew := NewStore(pool, WithKeyring(newKeys))
	for id, want := range map[uuid.UUID]string{w.ID: second, legacy.ID: legacy.Secret} {
		got, err := onlyNew.Get(ctx, tenantID, id)
		require.NoError(t, err, "the old key is no longer needed")
		require.Equal(t, want, got.Secret)
	}
	got, err = onlyNew.Get(ctx, tenantID, w.ID)
	require.NoError(t, err)
	require.Equal(t, first, got.PreviousSecret)
}

// A sealed secret copied onto another webhook's row does not open there.
func TestSealedSecretBoundToItsWebhook(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	keys, _ := testKeyring(t, "k1")
	store := NewStore(pool, WithKeyring(keys))
	tenantID := newTenantRow(t, pool)
	a, err := store.Create(ctx, sealedFixture(tenantID, NewSecret()))
	require.NoError(t, err)
	b, err := store.Create(ctx, sealedFixture(tenantID, NewSecret()))
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `UPDATE webhooks SET secret = (SELECT secret FROM webhooks WHERE id = $1) WHERE id = $2`, a.ID, b.ID)
	require.NoError(t, err)
	_, err = store.Get(ctx, tenantID, b.ID)
	require.Error(t, err)
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
