package webhook

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/db/dbtest"
)

func TestAwaitsVerification(t *testing.T) {
	t.Parallel()
	for state, waits := range map[string]bool{"": false, VerificationPending: true, VerificationFailed: true, VerificationVerified: false} {
		require.Equal(t, waits, AwaitsVerification(state), "state %q", state)
	}
}

// verify_url true starts a verification, false drops it, and leaving it
// out keeps what the webhook had unless its url changes.
func TestBuildVerification(t *testing.T) {
	t.Parallel()
	at := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	verified := &Verification{State: VerificationVerified, VerifiedAt: &at}
	failed := &Verification{State: VerificationFailed, LastError: ptr("endpoint answered 404")}
	pending := &Verification{State: VerificationPending}
	withState := func(v *Verification) Webhook {
		w := storedWebhook(t)
		w.Verification = v
		return w
	}

	tests := []struct {
		name     string
		base     Webhook
		in       Input
		creating bool
		want     *Verification
	}{
		{"create without", Webhook{}, validCreate(), true, nil},
		{"create with false", Webhook{}, withVerify(validCreate(), false), true, nil},
		{"create with true", Webhook{}, withVerify(validCreate(), true), true, pending},
		{"patch keeps none", withState(nil), Input{Active: ptr(false)}, false, nil},
		{"patch keeps verified", withState(verified), Input{Active: ptr(false)}, false, verified},
		{"patch keeps failed", withState(failed), Input{Active: ptr(false)}, false, failed},
		{"patch true on verified", withState(verified), Input{VerifyURL: ptr(true)}, false, pending},
		{"patch true on failed", withState(failed), Input{VerifyURL: ptr(true)}, false, pending},
		{"patch false on failed", withState(failed), Input{VerifyURL: ptr(false)}, false, nil},
		{"new url of a verified webhook", withState(verified), Input{URL: ptr("https://hooks.example.com/v2")}, false, pending},
		{"new url of a failed webhook", withState(failed), Input{URL: ptr("https://hooks.example.com/v2")}, false, pending},
		{"new url without verification", withState(nil), Input{URL: ptr("https://hooks.example.com/v2")}, false, nil},
		{"same url again", withState(verified), Input{URL: ptr("https://hooks.example.com/in")}, false, verified},
		{"new url and false", withState(verified), Input{URL: ptr("https://hooks.example.com/v2"), VerifyURL: ptr(false)}, false, nil},
		// A replace (PUT) starts from the stored url and verification.
		{"replace keeps verified", withState(verified), validCreate(), true, verified},
		{"replace with a new url", withState(verified), Input{URL: ptr("https://hooks.example.com/v3"), Events: []string{"a"}}, true, pending},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			base := tt.base
			if tt.creating && base.URL != "" {
				base = Webhook{ID: base.ID, URL: base.URL, Verification: base.Verification}
			}
			got, err := testRules().Build(context.Background(), base, tt.in, tt.creating)
			require.NoError(t, err)
			require.Equal(t, tt.want, got.Verification)
		})
	}
}

func withVerify(in Input, v bool) Input {
	in.VerifyURL = &v
	return in
}

// The store writes a verification with the webhook, moves it through its
// states, and never lets an outcome land on a url it was not about.
func TestVerificationTransitions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	store := NewStore(pool)
	tenantID := newTenantRow(t, pool)
	now := time.Date(2025, 3, 1, 12, 0, 0, 123456789, time.UTC)

	in := sealedFixture(tenantID, NewSecret())
	in.Verification = &Verification{State: VerificationPending}
	w, err := store.Create(ctx, in)
	require.NoError(t, err)
	got, err := store.Get(ctx, tenantID, w.ID)
	require.NoError(t, err)
	require.Equal(t, &Verification{State: VerificationPending}, got.Verification)

	// A failure says why; a success clears it and says when.
	got, err = store.FinishVerification(ctx, tenantID, w.ID, w.URL, "endpoint answered 404 Not Found", now)
	require.NoError(t, err)
	require.Equal(t, &Verification{State: VerificationFailed, LastError: ptr("endpoint answered 404 Not Found")}, got.Verification)
	again, err := store.FinishVerification(ctx, tenantID, w.ID, w.URL, "", now)
	require.NoError(t, err)
	require.Equal(t, got.Verification, again.Verification, "only a pending verification finishes")

	_, err = store.StartVerification(ctx, tenantID, w.ID)
	require.NoError(t, err)
	got, err = store.FinishVerification(ctx, tenantID, w.ID, w.URL, "", now)
	require.NoError(t, err)
	verifiedAt := now.Truncate(time.Microsecond)
	require.Equal(t, &Verification{State: VerificationVerified, VerifiedAt: &verifiedAt}, got.Verification)
	reread, err := store.Get(ctx, tenantID, w.ID)
	require.NoError(t, err)
	require.Equal(t, got.Verification, reread.Verification)

	// An update that keeps the verification leaves it as stored, even
	// when the caller's copy is older.
	stale := reread
	stale.Verification = &Verification{State: VerificationFailed, LastError: ptr("old")}
	stale.Active = false
	updated, err := store.Update(ctx, stale)
	require.NoError(t, err)
	require.Equal(t, got.Verification, updated.Verification)
	require.False(t, updated.Active)

	// A new url restarts it in the same statement; a check of the old url
	// that finishes afterwards changes nothing.
	moved := updated
	moved.URL = "https://8.8.4.4/"
	moved.Verification = &Verification{State: VerificationPending}
	updated, err = store.Update(ctx, moved)
	require.NoError(t, err)
	require.Equal(t, &Verification{State: VerificationPending}, updated.Verification)
	got, err = store.FinishVerification(ctx, tenantID, w.ID, w.URL, "", now)
	require.NoError(t, err)
	require.Equal(t, &Verification{State: VerificationPending}, got.Verification, "an outcome about the old url")

	// Dropping it stores NULL.
	moved.Verification = nil
	updated, err = store.Update(ctx, moved)
	require.NoError(t, err)
	require.Nil(t, updated.Verification)
	var isNull bool
	require.NoError(t, pool.QueryRow(ctx, `SELECT verification IS NULL FROM webhooks WHERE id = $1`, w.ID).Scan(&isNull))
	require.True(t, isNull)

	_, err = store.StartVerification(ctx, newTenantRow(t, pool), w.ID)
	require.ErrorIs(t, err, ErrNotFound, "another tenant's webhook")
	require.NoError(t, store.Delete(ctx, tenantID, w.ID))
	_, err = store.StartVerification(ctx, tenantID, w.ID)
	require.ErrorIs(t, err, ErrNotFound, "a deleted webhook")
}
