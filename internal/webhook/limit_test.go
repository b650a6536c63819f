package webhook_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/db/dbtest"
	"github.com/hookline/hookline/internal/webhook"
)

// A tenant's webhooks are capped, and creates racing each other cannot
// together pass the cap; a deleted webhook frees its place.
func TestWebhooksPerTenantAreCapped(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := context.Background()
	tenant := uuid.New()
	_, err := pool.Exec(ctx, `INSERT INTO tenants (id, name, rate_limit_rpm, rate_limit_burst, publish_rps, publish_burst)
		VALUES ($1, 't', 1000, 100, 1000, 100)`, tenant)
	require.NoError(t, err)
	store := webhook.NewStore(pool, webhook.WithMaxPerTenant(5))
	hook := func() webhook.Webhook {
		return webhook.Webhook{TenantID: tenant, URL: "https://example.com/h", Events: []string{"*"}, Active: true,
			Secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", RetryConfig: webhook.DefaultRetryConfig(),
			CircuitBreakerConfig: webhook.DefaultBreakerConfig(), OrderingGuarantee: webhook.OrderingNone,
			Headers: webhook.Headers{}, Metadata: []byte(`{}`)}
	}
	var created, refused atomic.Int64
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := store.Create(ctx, hook())
			switch {
			case err == nil:
				created.Add(1)
			case errors.Is(err, webhook.ErrTooMany):
				refused.Add(1)
			default:
				t.Errorf("create: %v", err)
			}
		}()
	}
	wg.Wait()
	require.EqualValues(t, 5, created.Load())
	require.EqualValues(t, 15, refused.Load())

	var one uuid.UUID
	require.NoError(t, pool.QueryRow(ctx, `SELECT id FROM webhooks LIMIT 1`).Scan(&one))
	_, err = pool.Exec(ctx, `UPDATE webhooks SET deleted_at = now() WHERE id = $1`, one)
	require.NoError(t, err)
	_, err = store.Create(ctx, hook())
	require.NoError(t, err, "a deleted webhook frees its place")
	_, err = store.Create(ctx, hook())
	require.ErrorIs(t, err, webhook.ErrTooMany)
}
