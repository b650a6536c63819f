package history

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/db/dbtest"
	"github.com/hookline/hookline/internal/wire"
)

// The 24-hour counts of the webhooks pages take in the current hour whole
// (from its hourly rows) and the first hour of the window from its
// minutes: an attempt of a minute ago, of an hour and a half ago and of
// 23 h 58 min ago count, one of 24 h 2 min ago does not; another
// tenant's webhook counts nothing.
func TestRecentAttemptsCountTheWindowEndingNow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	mine, others := dbtest.Seed(t, pool, 1), dbtest.Seed(t, pool, 1)
	tenant, hook := mine.Tenant, mine.Webhooks[0]
	other, foreign := others.Tenant, others.Webhooks[0]
	now := time.Now()
	tally := NewTally(pool, slog.New(slog.DiscardHandler))
	for i, ago := range []time.Duration{time.Minute, 90 * time.Minute, 23*time.Hour + 58*time.Minute, 24*time.Hour + 2*time.Minute} {
		at := now.Add(-ago)
		tally.Attempted(TalliedAttempt{Webhook: hook, Tenant: tenant, DeliveryCreatedAt: at, From: wire.Pending,
			To: wire.Succeeded, ExecutedAt: at, OK: i != 1, StatusCode: 200})
	}
	tally.Attempted(TalliedAttempt{Webhook: foreign, Tenant: other, DeliveryCreatedAt: now, From: wire.Pending,
		To: wire.Succeeded, ExecutedAt: now, OK: true, StatusCode: 200})
	require.NoError(t, tally.Flush(ctx))

	got, err := NewReader(pool).RecentAttempts(ctx, tenant, []uuid.UUID{hook, foreign}, 24*time.Hour, now)
	require.NoError(t, err)
	require.Equal(t, map[uuid.UUID][2]int64{hook: {3, 2}}, got, "attempts and successes")
}
