package webhook

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/db"
	"github.com/hookline/hookline/internal/db/dbtest"
	"github.com/hookline/hookline/internal/secret"
)

const (
	bearerValue = "Bearer sk_live_0123456789abcdef"
	teamValue   = "payments"
)

func withHeaders(w Webhook, h map[string]string) Webhook {
	w.Headers = h
	return w
}

// responseHeaders is the headers member of w as every API and console
// response serialises it.
func responseHeaders(t *testing.T, w any) map[string]string {
	t.Helper()
	raw, err := json.Marshal(w)
	require.NoError(t, err)
	var out struct {
		Headers map[string]string `json:"headers"`
	}
	require.NoError(t, json.Unmarshal(raw, &out))
	return out.Headers
}

// Custom header values are credentials for the endpoint: a dump of the
// database shows none of them, every serialisation masks them, and the
// store still hands the real values to the code that sends them.
func TestHeadersAreSealedAtRestAndMasked(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := dbtest.NewURL(t, true)
	pool, err := db.Open(ctx, url, 4)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	keys, entries := testKeyring(t, "k1")
	store := NewStore(pool, WithKeyring(keys))
	tenantID := newTenantRow(t, pool)

	created, err := store.Create(ctx, withHeaders(sealedFixture(tenantID, NewSecret()),
		map[string]string{"Authorization": bearerValue, "X-Team": teamValue}))
	require.NoError(t, err)
	masked := map[string]string{"Authorization": "Bear…", "X-Team": "****"}
	require.Equal(t, masked, responseHeaders(t, created), "the create answer")

	dump := dumpWebhooks(t, pool, url)
	require.NotContains(t, dump, "sk_live_0123456789abcdef")
	require.NotContains(t, dump, teamValue)

	got, err := store.Get(ctx, tenantID, created.ID)
	require.NoError(t, err)
	require.Equal(t, bearerValue, got.Headers["Authorization"], "verification and updates work on the real values")
	require.Equal(t, masked, responseHeaders(t, got), "get")
	list, err := store.List(ctx, tenantID, ListFilter{Limit: 10})
	require.NoError(t, err)
	raw, err := json.Marshal(list)
	require.NoError(t, err)
	var listed []struct {
		Headers map[string]string `json:"headers"`
	}
	require.NoError(t, json.Unmarshal(raw, &listed))
	require.Len(t, listed, 1)
	require.Equal(t, masked, listed[0].Headers, "list")

	// The worker reads the column itself: it stays a JSON object of
	// strings, each value sealed.
	var column map[string]string
	require.NoError(t, pool.QueryRow(ctx, `SELECT headers FROM webhooks WHERE id = $1`, created.ID).Scan(&column))
	require.Len(t, column, 2)
	for name, v := range column {
		id, sealed := secret.KeyID(v)
		require.True(t, sealed, name)
		require.Equal(t, "k1", id)
	}

	// OpenHeaders opens the column as the worker reads it: what a delivery
	// sends.
	var columnRaw []byte
	require.NoError(t, pool.QueryRow(ctx, `SELECT headers FROM webhooks WHERE id = $1`, created.ID).Scan(&columnRaw))
	sent, err := OpenHeaders(keys, created.ID, columnRaw)
	require.NoError(t, err)
	require.Equal(t, map[string]string{"Authorization": bearerValue, "X-Team": teamValue}, sent)
	_, err = OpenHeaders(keys, uuid.Must(uuid.NewV7()), columnRaw)
	require.Error(t, err, "sealed values are bound to their webhook")

	// Without the key nothing opens.
	_, err = NewStore(pool).Get(ctx, tenantID, created.ID)
	require.ErrorIs(t, err, secret.ErrUnknownKey)
	_, err = OpenHeaders(nil, created.ID, columnRaw)
	require.ErrorIs(t, err, secret.ErrUnknownKey)

	// A rotation re-seals the headers too, so that the old key can go.
	newKeys, newEntries := testKeyring(t, "k2")
	require.NoError(t, rotateSecretKey(ctx, pool, append(newEntries, entries...), discardLogger()))
	got, err = NewStore(pool, WithKeyring(newKeys)).Get(ctx, tenantID, created.ID)
	require.NoError(t, err, "the old key is no longer needed")
	require.Equal(t, map[string]string{"Authorization": bearerValue, "X-Team": teamValue}, map[string]string(got.Headers))
}

// A client that reads a webhook and writes it back (PUT, or a PATCH of
// headers) sends the masked values: those keep what is stored, and a
// value that changed is stored as sent.
func TestMaskedHeadersWrittenBackKeepTheStoredValues(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	keys, _ := testKeyring(t, "k1")
	store := NewStore(pool, WithKeyring(keys))
	tenantID := newTenantRow(t, pool)
	created, err := store.Create(ctx, withHeaders(sealedFixture(tenantID, NewSecret()),
		map[string]string{"Authorization": bearerValue, "X-Team": teamValue, "X-Old": "gone"}))
	require.NoError(t, err)

	w, err := store.Get(ctx, tenantID, created.ID)
	require.NoError(t, err)
	w.Headers = responseHeaders(t, w)
	w.Headers["X-Team"] = "ops"
	w.Headers["X-New"] = "Bear…" // a new name: nothing stored to keep
	delete(w.Headers, "X-Old")
	_, err = store.Update(ctx, w)
	require.NoError(t, err)

	got, err := store.Get(ctx, tenantID, created.ID)
	require.NoError(t, err)
	require.Equal(t, map[string]string{"Authorization": bearerValue, "X-Team": "ops", "X-New": "Bear…"},
		map[string]string(got.Headers))
}
