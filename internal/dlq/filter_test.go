package dlq

import (
	"context"
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/db"
	"github.com/hookline/hookline/internal/db/dbtest"
	"github.com/hookline/hookline/internal/metrics"
)

// asDLQRole is dbURL with the dlq process's role, which reads only some
// columns of webhooks.
func asDLQRole(t *testing.T, dbURL string) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	q := u.Query()
	q.Set("options", "-c role=hookline_dlq")
	u.RawQuery = strings.ReplaceAll(q.Encode(), "+", "%20")
	return u.String()
}

// A batch retry goes by each webhook's filter as it is now: the
// deliveries whose event the filter refuses (false, or failing on it) are
// skipped and counted as such; the others are retried. It runs as the dlq
// process's role.
func TestBatchRetrySkipsWhatTheFilterRefuses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := dbtest.NewURL(t, true)
	pool, err := db.Open(ctx, dbURL, 4)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	dlqPool, err := db.Open(ctx, asDLQRole(t, dbURL), 4)
	require.NoError(t, err)
	t.Cleanup(dlqPool.Close)

	tenant := newTenant(t, pool)
	hook := func(filter string) uuid.UUID {
		id := uuid.New()
		_, err := pool.Exec(ctx, `INSERT INTO webhooks (id, tenant_id, url, events, secret, retry_config, circuit_breaker_config,
    rate_limit, filter) VALUES ($1, $2, 'https://8.8.8.8/', '{order.*}', 'whsec_x', '{}', '{}', '{}', $3)`, id, tenant, filter)
		require.NoError(t, err)
		return id
	}
	event := func(data string) uuid.UUID {
		id := uuid.Must(uuid.NewV7())
		_, err := pool.Exec(ctx, `INSERT INTO events (id, tenant_id, event_type, idempotency_key, request_hash, priority, data)
VALUES ($1, $2, 'order.created', $4, '\x00', 'normal', $3::json)`, id, tenant, data, id.String())
		require.NoError(t, err)
		return id
	}
	all, big, gold := hook(""), hook(`data.amount > 100`), hook(`data.customer.tier == "gold"`)
	rich, poor := event(`{"amount": 500, "customer": {"tier": "gold"}}`), event(`{"amount": 5}`)
	type pair struct{ hook, event uuid.UUID }
	for _, p := range []pair{{all, rich}, {all, poor}, {big, rich}, {big, poor}, {gold, rich}, {gold, poor}} {
		_, err := pool.Exec(ctx, `INSERT INTO deliveries (id, tenant_id, event_id, webhook_id, status, priority, attempt_count,
    completed_at) VALUES (uuidv7(), $1, $2, $3, 'exhausted', 'normal', 5, now() - interval '1 minute')`, tenant, p.event, p.hook)
		require.NoError(t, err)
	}
	batch := uuid.Must(uuid.NewV7())
	_, err = pool.Exec(ctx, `INSERT INTO batch_operations (id, tenant_id, filter, requests_per_second, priority)
VALUES ($1, $2, '{"event_types": ["order.created"]}', 1000, 'normal')`, batch, tenant)
	require.NoError(t, err)

	errorsBefore := testutil.ToFloat64(metrics.FilterErrors.WithLabelValues("error"))
	rec := &taskRecorder{}
	r := NewRunner(dlqPool, rec, slog.New(slog.DiscardHandler), 1, 30*time.Second)
	r.run(ctx, mustClaim(t, r))

	var got []pair
	for _, task := range rec.tasks {
		got = append(got, pair{task.WebhookID, task.EventID})
	}
	require.ElementsMatch(t, []pair{{all, rich}, {all, poor}, {big, rich}, {gold, rich}}, got)
	var processed, skipped, total int
	require.NoError(t, pool.QueryRow(ctx, `SELECT processed, skipped, total FROM batch_operations WHERE id = $1`, batch).
		Scan(&processed, &skipped, &total))
	require.Equal(t, []int{4, 2, 6}, []int{processed, skipped, total})
	require.GreaterOrEqual(t, testutil.ToFloat64(metrics.FilterErrors.WithLabelValues("error"))-errorsBefore, 1.0,
		"the filter failing on the poor event (no customer) is counted")
}
