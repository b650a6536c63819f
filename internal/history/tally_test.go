package history

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/db/dbtest"
	"github.com/hookline/hookline/internal/wire"
)

// A flush that Postgres refuses keeps its counts: the next one adds them
// with what was counted since, once, in every scope and period.
func TestTallyKeepsWhatAFailedFlushCouldNotAdd(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	down, err := pgxpool.New(ctx, "postgres://postgres@127.0.0.1:1/none?connect_timeout=1")
	require.NoError(t, err)
	t.Cleanup(down.Close)

	var sqlBucket int
	require.NoError(t, pool.QueryRow(ctx, `SELECT latency_bucket(30)`).Scan(&sqlBucket))

	tally := NewTally(down, slog.New(slog.DiscardHandler))
	hook, tenant := uuid.New(), uuid.New()
	created := time.Date(2026, 11, 27, 10, 59, 30, 0, time.UTC)
	tally.Created(hook, tenant, created, 3)
	tally.Attempted(TalliedAttempt{Webhook: hook, Tenant: tenant, DeliveryCreatedAt: created, From: wire.Pending,
		To: wire.Retrying, ExecutedAt: created.Add(time.Second), FailureCategory: "timeout", Duration: 30 * time.Millisecond})
	require.Error(t, tally.Flush(ctx))

	tally.pool = pool
	tally.Created(hook, tenant, created, 1)
	tally.Attempted(TalliedAttempt{Webhook: hook, Tenant: tenant, DeliveryCreatedAt: created, From: wire.Retrying,
		To: wire.Succeeded, ExecutedAt: created.Add(time.Minute), OK: true, Duration: 20 * time.Millisecond})
	require.NoError(t, tally.Flush(ctx))
	require.NoError(t, tally.Flush(ctx), "nothing left to add")

	for _, scope := range []uuid.UUID{hook, tenant, allTenants} {
		var n, retrying, succeeded int64
		require.NoError(t, pool.QueryRow(ctx, `SELECT sum(created), sum(retrying), sum(succeeded) FROM delivery_rollups
WHERE scope_id = $1 AND NOT hourly AND at = $2`, scope, created.Truncate(time.Minute)).Scan(&n, &retrying, &succeeded))
		require.Equal(t, [3]int64{4, 0, 1}, [3]int64{n, retrying, succeeded}, "scope %s", scope)
		var attempts, successes int64
		var errs, latency string
		var noSuccess *time.Time
		require.NoError(t, pool.QueryRow(ctx, `SELECT sum(attempts), sum(successes), jsonb_agg(errors)::text,
    jsonb_agg(latency)::text, max(last_success_at) FROM attempt_rollups WHERE scope_id = $1 AND hourly AND at = $2`,
			scope, created.Truncate(time.Hour)).Scan(&attempts, &successes, &errs, &latency, &noSuccess))
		require.Equal(t, [2]int64{1, 0}, [2]int64{attempts, successes}, "the hour of 10:00: one failed attempt")
		require.Nil(t, noSuccess)
		require.Equal(t, `[{"timeout": 1}]`, errs)
		require.Equal(t, fmt.Sprintf(`[{"%d": 1}]`, sqlBucket), latency, "30 ms in the bucket latency_bucket gives")
		var last time.Time
		require.NoError(t, pool.QueryRow(ctx, `SELECT sum(attempts), sum(successes), max(last_success_at) FROM attempt_rollups
WHERE scope_id = $1 AND hourly AND at = $2`, scope, created.Truncate(time.Hour).Add(time.Hour)).Scan(&attempts, &successes, &last))
		require.Equal(t, [2]int64{1, 1}, [2]int64{attempts, successes}, "the hour of 11:00: one success")
		require.True(t, last.Equal(created.Add(time.Minute)), "last success %v", last)
	}
}

// Each webhook's last attempt is kept whoever records it: the tally,
// after a flush that failed, and the attempt log's trigger for attempts
// recorded without it. An earlier attempt never replaces a later one, and
// an attempt of a webhook gone since is not kept.
func TestTallyKeepsEachWebhooksLastAttempt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	down, err := pgxpool.New(ctx, "postgres://postgres@127.0.0.1:1/none?connect_timeout=1")
	require.NoError(t, err)
	t.Cleanup(down.Close)
	seed := dbtest.Seed(t, pool, 1)
	tenant, hook, gone := seed.Tenant, seed.Webhooks[0], uuid.New()
	type last struct {
		At    time.Time
		Code  *int
		Error *string
	}
	read := func(webhook uuid.UUID) *last {
		t.Helper()
		var l last
		err := pool.QueryRow(ctx, `SELECT executed_at, status_code, error FROM webhook_last_attempts WHERE webhook_id = $1`,
			webhook).Scan(&l.At, &l.Code, &l.Error)
		if err != nil {
			require.ErrorIs(t, err, pgx.ErrNoRows)
			return nil
		}
		return &l
	}
	at := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	attempt := func(webhook uuid.UUID, executed time.Time, code int, msg string) TalliedAttempt {
		return TalliedAttempt{Webhook: webhook, Tenant: tenant, DeliveryCreatedAt: at, From: wire.Pending, To: wire.Retrying,
			ExecutedAt: executed, StatusCode: code, Error: msg}
	}

	tally := NewTally(down, slog.New(slog.DiscardHandler))
	tally.Attempted(attempt(hook, at.Add(2*time.Second), 503, "HTTP 503"))
	require.Error(t, tally.Flush(ctx))
	tally.pool = pool
	tally.Attempted(attempt(hook, at.Add(time.Second), 200, ""))
	tally.Attempted(attempt(gone, at, 0, "dial tcp: connection refused"))
	require.NoError(t, tally.Flush(ctx))
	l := read(hook)
	require.NotNil(t, l)
	require.True(t, l.At.Equal(at.Add(2*time.Second)), "the later attempt, kept by the failed flush: %v", l.At)
	require.Equal(t, 503, *l.Code)
	require.Equal(t, "HTTP 503", *l.Error)
	require.Nil(t, read(gone))

	// An attempt written without the tally (an operator's SQL): the
	// trigger keeps it, and a later flush of an earlier attempt leaves it.
	_, err = pool.Exec(ctx, `INSERT INTO delivery_attempts (delivery_id, delivery_created_at, attempt_number, tenant_id,
    webhook_id, error, duration_ms, scheduled_at, executed_at)
VALUES ($1, $2, 1, $3, $4, 'timeout after 10s', 10000, $2, $5)`, uuid.New(), time.Now(), tenant, hook, at.Add(time.Hour))
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO delivery_attempts (delivery_id, delivery_created_at, attempt_number, tenant_id,
    webhook_id, duration_ms, scheduled_at, executed_at)
VALUES ($1, $2, 1, $3, $4, 5, $2, $2)`, uuid.New(), time.Now(), tenant, gone)
	require.NoError(t, err, "an attempt of a webhook gone is recorded")
	require.Nil(t, read(gone))
	tally.Attempted(attempt(hook, at.Add(time.Minute), 200, ""))
	require.NoError(t, tally.Flush(ctx))
	l = read(hook)
	require.True(t, l.At.Equal(at.Add(time.Hour)), "%v", l.At)
	require.Nil(t, l.Code, "no answer")
	require.Equal(t, "timeout after 10s", *l.Error)

	tally.Attempted(attempt(hook, at.Add(2*time.Hour), 200, ""))
	require.NoError(t, tally.Flush(ctx))
	l = read(hook)
	require.True(t, l.At.Equal(at.Add(2*time.Hour)), "%v", l.At)
	require.Equal(t, 200, *l.Code)
	require.Nil(t, l.Error)
}
