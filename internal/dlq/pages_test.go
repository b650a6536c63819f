package dlq

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/db"
	"github.com/hookline/hookline/internal/db/dbtest"
)

// A batch's pages are planned with each page's values (pageMode): after a
// batch of nine chunks, none of the pool's connections holds its chunk
// statement prepared, where a cached statement would have switched to a
// generic plan after five, one that reads the set from its start at
// every page.
func TestBatchPagesArePlannedWithTheirValues(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, err := db.Open(ctx, dbtest.NewURL(t, true), 2)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	tenant := newTenant(t, pool)
	_, err = pool.Exec(ctx, `WITH w AS (
    INSERT INTO webhooks (id, tenant_id, url, events, secret, retry_config, circuit_breaker_config, rate_limit)
    VALUES (gen_random_uuid(), $1, 'https://8.8.8.8/', '{*}', 'whsec_x', '{}', '{}', '{}') RETURNING id
), e AS (
    INSERT INTO events (id, tenant_id, event_type, idempotency_key, request_hash, priority, data)
    SELECT uuidv7(), $1, 'a', g::text, '\x00', 'normal', '{}' FROM generate_series(1, 90) g RETURNING id
)
INSERT INTO deliveries (id, tenant_id, event_id, webhook_id, status, priority, attempt_count, completed_at)
SELECT uuidv7(), $1, e.id, w.id, 'exhausted', 'normal', 5, now() - interval '1 minute' FROM e, w`, tenant)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO batch_operations (id, tenant_id, filter, requests_per_second, priority)
VALUES (uuidv7(), $1, '{"event_types": ["a"]}', 100, 'normal')`, tenant)
	require.NoError(t, err)

	rec := &taskRecorder{}
	r := NewRunner(pool, rec, slog.New(slog.DiscardHandler), 1, 30*time.Second)
	r.run(ctx, mustClaim(t, r))
	require.Len(t, rec.tasks, 90, "every delivery retried, ten a chunk")

	conns := pool.AcquireAllIdle(ctx)
	require.NotEmpty(t, conns)
	for _, c := range conns {
		var cached int
		err := c.QueryRow(ctx, `SELECT count(*) FROM pg_prepared_statements WHERE starts_with(statement, $1)`,
			chunkSelect[:40]).Scan(&cached)
		c.Release()
		require.NoError(t, err)
		require.Zero(t, cached, "the chunk statement kept prepared")
	}
}
