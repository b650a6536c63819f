package dlq

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/db/dbtest"
	"github.com/hookline/hookline/internal/history"
	"github.com/hookline/hookline/internal/webhook"
	"github.com/hookline/hookline/internal/wire"
)

// taskRecorder is the dispatcher of these tests: it keeps what the store
// hands to the broker.
type taskRecorder struct {
	mu    sync.Mutex
	tasks []wire.Task
}

func (r *taskRecorder) Enqueue(tasks ...wire.Task) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.tasks = append(r.tasks, tasks...)
}

func (r *taskRecorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.tasks)
}

// retryFixture is a tenant's webhook with one exhausted delivery.
type retryFixture struct {
	pool                          *pgxpool.Pool
	tenant, hook, event, delivery uuid.UUID
}

func newRetryFixture(t *testing.T, ordering string) retryFixture {
	t.Helper()
	ctx := context.Background()
	pool := dbtest.New(t)
	f := retryFixture{pool: pool, tenant: newTenant(t, pool), hook: uuid.New(), event: uuid.Must(uuid.NewV7()),
		delivery: uuid.Must(uuid.NewV7())}
	_, err := pool.Exec(ctx, `INSERT INTO webhooks (id, tenant_id, url, events, secret, retry_config, circuit_breaker_config,
    rate_limit, ordering_guarantee) VALUES ($1, $2, 'https://8.8.8.8/', '{order.*}', 'whsec_x', '{}', '{}', '{}', $3)`,
		f.hook, f.tenant, ordering)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO events (id, tenant_id, event_type, idempotency_key, request_hash, priority, data)
VALUES ($1, $2, 'order.created', 'k', '\x00', 'normal', '{}')`, f.event, f.tenant)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO deliveries (id, tenant_id, event_id, webhook_id, status, priority, attempt_count,
    order_key, completed_at) VALUES ($1, $2, $3, $4, 'exhausted', 'normal', 5, $5, now())`,
		f.delivery, f.tenant, f.event, f.hook, nullIfEmpty(webhook.OrderKey(ordering, f.hook.String(), "order.created")))
	require.NoError(t, err)
	return f
}

func nullIfEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func (f retryFixture) succeed(t *testing.T, id uuid.UUID) {
	t.Helper()
	_, err := f.pool.Exec(context.Background(), `UPDATE deliveries SET status = 'succeeded', attempt_count = 1,
    completed_at = now() WHERE id = $1`, id)
	require.NoError(t, err)
}

// A DLQ entry whose retry succeeded is resolved: retrying it again would
// deliver the event a second time, so only an explicit force does.
func TestRetryOfResolvedEntryIsRefusedUnlessForced(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newRetryFixture(t, webhook.OrderingNone)
	sent := &taskRecorder{}
	s := NewStore(f.pool, sent)

	first, err := s.Retry(ctx, f.tenant, f.hook, f.delivery, "")
	require.NoError(t, err)
	f.succeed(t, first)

	_, err = s.Retry(ctx, f.tenant, f.hook, f.delivery, "")
	require.ErrorIs(t, err, ErrAlreadyResolved)
	require.Equal(t, 1, sent.count(), "nothing sent again")
	var n int
	require.NoError(t, f.pool.QueryRow(ctx, `SELECT count(*) FROM deliveries WHERE event_id = $1`, f.event).Scan(&n))
	require.Equal(t, 2, n, "no delivery created")

	forced, err := s.RetryWith(ctx, f.tenant, f.hook, f.delivery, RetryOptions{Force: true})
	require.NoError(t, err)
	require.NotEqual(t, first, forced)
	require.Equal(t, 2, sent.count())
}

// Resolved means the event reached the webhook after the entry, also down
// a chain of retries: the entry's retry failed too, and its own retry
// succeeded.
func TestRetryOfEntryResolvedDownTheChain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newRetryFixture(t, webhook.OrderingNone)
	s := NewStore(f.pool, &taskRecorder{})

	first, err := s.Retry(ctx, f.tenant, f.hook, f.delivery, "")
	require.NoError(t, err)
	_, err = f.pool.Exec(ctx, `UPDATE deliveries SET status = 'exhausted', attempt_count = 5, completed_at = now() WHERE id = $1`, first)
	require.NoError(t, err)
	second, err := s.Retry(ctx, f.tenant, f.hook, first, "")
	require.NoError(t, err)
	f.succeed(t, second)

	_, err = s.Retry(ctx, f.tenant, f.hook, f.delivery, "")
	require.ErrorIs(t, err, ErrAlreadyResolved)
	_, err = s.Retry(ctx, f.tenant, f.hook, first, "")
	require.ErrorIs(t, err, ErrAlreadyResolved)
}

// A retry of an ordered webhook's delivery waits its turn like the
// deliveries fan-out creates: it carries the order key publish gives them.
func TestRetryKeepsTheOrderKey(t *testing.T) {
	t.Parallel()
	for _, ordering := range []string{webhook.OrderingStrict, webhook.OrderingPerEventType, webhook.OrderingNone} {
		t.Run(ordering, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			f := newRetryFixture(t, ordering)
			id, err := NewStore(f.pool, &taskRecorder{}).Retry(ctx, f.tenant, f.hook, f.delivery, "high")
			require.NoError(t, err)
			var key *string
			require.NoError(t, f.pool.QueryRow(ctx, `SELECT order_key FROM deliveries WHERE id = $1`, id).Scan(&key))
			require.Equal(t, nullIfEmpty(webhook.OrderKey(ordering, f.hook.String(), "order.created")), key)
		})
	}
}

// A retry of an ordered webhook's delivery gives its order key a delivery
// of an older event than the key's floor, if a release had raised it since:
// the retry moves the floor down to itself, so that the checks of the key
// see it (it keeps its place before the later deliveries).
func TestRetryOfAnOrderedDeliveryMovesItsKeysFloorDown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newRetryFixture(t, webhook.OrderingStrict)
	key := webhook.OrderKey(webhook.OrderingStrict, f.hook.String(), "order.created")
	_, err := f.pool.Exec(ctx, `INSERT INTO order_floors (order_key, event_id, id) VALUES ($1, uuidv7_floor(now() + interval '1 second'), uuidv7())`, key)
	require.NoError(t, err)
	s := NewStore(f.pool, &taskRecorder{})

	retry, err := s.Retry(ctx, f.tenant, f.hook, f.delivery, "")
	require.NoError(t, err)
	var floor [2]uuid.UUID
	require.NoError(t, f.pool.QueryRow(ctx, `SELECT event_id, id FROM order_floors WHERE order_key = $1`, key).Scan(&floor[0], &floor[1]))
	require.Equal(t, [2]uuid.UUID{f.event, retry}, floor)
}

// Retries of the same entries asked for at once give each one unfinished
// retry: by two batches of 300 entries, and with retries of one of them one
// at a time beside them, with no unique index on deliveries to turn the
// second away (none spans the history): each takes the entry's row first
// (retryTargetSQL, lockEntriesSQL) and looks for a retry in a statement
// after.
func TestConcurrentRetriesGiveAnEntryOneRetry(t *testing.T) {
	t.Parallel()
	for _, singles := range []int{0, 6} {
		t.Run(fmt.Sprintf("%d single retries", singles), func(t *testing.T) {
			t.Parallel()
			concurrentRetries(t, singles)
		})
	}
}

func concurrentRetries(t *testing.T, singles int) {
	ctx := context.Background()
	f := newRetryFixture(t, webhook.OrderingNone)
	const entries = 300
	_, err := f.pool.Exec(ctx, `WITH e AS (
    INSERT INTO events (id, tenant_id, event_type, idempotency_key, request_hash, priority, data)
    SELECT uuidv7(), $1, 'order.created', 'k' || g, '\x00', 'normal', '{}' FROM generate_series(2, $3) g
    RETURNING id
)
INSERT INTO deliveries (id, tenant_id, event_id, webhook_id, status, priority, attempt_count, completed_at)
SELECT uuidv7(), $1, e.id, $2, 'exhausted', 'normal', 5, now() FROM e`, f.tenant, f.hook, entries)
	require.NoError(t, err)
	s := NewStore(f.pool, &taskRecorder{})
	req := BatchRequest{Filter: history.DeadLetterFilter{WebhookIDs: []uuid.UUID{f.hook}}}
	req.RateLimit.RequestsPerSecond = maxBatchRate
	for range 2 {
		_, err := s.CreateBatch(ctx, f.tenant, req)
		require.NoError(t, err)
	}
	r := newClaimRunner(f.pool, 2)
	r.dispatch = &taskRecorder{}
	batches := []claim{mustClaim(t, r), mustClaim(t, r)}

	start := make(chan struct{})
	errs := make(chan error, singles)
	var wg sync.WaitGroup
	for range singles {
		wg.Go(func() {
			<-start
			_, err := s.Retry(ctx, f.tenant, f.hook, f.delivery, "")
			errs <- err
		})
	}
	for _, c := range batches {
		wg.Go(func() {
			<-start
			r.run(ctx, c)
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			require.ErrorIs(t, err, ErrRetryInFlight)
		}
	}
	var retries, retried, processed int
	require.NoError(t, f.pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT retry_of) FROM deliveries WHERE retry_of IS NOT NULL`).
		Scan(&retries, &retried))
	require.Equal(t, entries, retried, "every entry retried")
	require.Equal(t, entries, retries, "one retry of each entry, unfinished")
	require.NoError(t, f.pool.QueryRow(ctx, `SELECT coalesce(sum(processed), 0) FROM batch_operations`).Scan(&processed))
	require.LessOrEqual(t, processed, entries, "a batch that found a retry made counts it skipped")
}
