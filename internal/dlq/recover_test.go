package dlq

import (
	"context"
	"crypto/rand"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/db/dbtest"
)

// recoverFixture is a tenant's webhook created three hours ago and
// disabled from two hours ago to one hour ago, subscribed to order.* and to
// notifications.
type recoverFixture struct {
	t            *testing.T
	pool         *pgxpool.Pool
	tenant, hook uuid.UUID
	now          time.Time
}

func newRecoverFixture(t *testing.T, filter string) recoverFixture {
	t.Helper()
	pool := dbtest.New(t)
	f := recoverFixture{t: t, pool: pool, tenant: newTenant(t, pool), hook: uuid.New(), now: time.Now()}
	f.exec(`INSERT INTO webhooks (id, tenant_id, url, events, secret, retry_config, circuit_breaker_config, rate_limit, filter, created_at)
VALUES ($1, $2, 'https://8.8.8.8/', '{order.*,webhook.*}', 'whsec_x', '{}', '{}', '{}', $3, $4)`, f.hook, f.tenant, filter, f.ago(3*time.Hour))
	f.exec(`INSERT INTO webhook_pauses (webhook_id, paused_at, resumed_at) VALUES ($1, $2, $3)`, f.hook, f.ago(2*time.Hour), f.ago(time.Hour))
	return f
}

func (f recoverFixture) ago(d time.Duration) time.Time { return f.now.Add(-d) }

func (f recoverFixture) exec(sql string, args ...any) {
	f.t.Helper()
	_, err := f.pool.Exec(context.Background(), sql, args...)
	require.NoError(f.t, err)
}

// uuidV7At is a UUIDv7 of time at.
func uuidV7At(at time.Time) uuid.UUID {
	u := uuidAt(at)
	_, _ = rand.Read(u[6:])
	u[6] = 0x70 | u[6]&0x0f
	u[8] = 0x80 | u[8]&0x3f
	return u
}

// event stores an event of type published at; data nil is a payload
// removed by retention.
func (f recoverFixture) event(eventType string, at time.Time, data *string) uuid.UUID {
	f.t.Helper()
	id := uuidV7At(at)
	f.exec(`INSERT INTO events (id, tenant_id, event_type, idempotency_key, request_hash, priority, data, created_at)
VALUES ($1, $2, $3, $6, '\x00', 'normal', $4::json, $5)`, id, f.tenant, eventType, data, at, id.String())
	return id
}

func (f recoverFixture) delivery(event uuid.UUID, status string, retryOf *uuid.UUID) uuid.UUID {
	f.t.Helper()
	id := uuid.Must(uuid.NewV7())
	f.exec(`INSERT INTO deliveries (id, tenant_id, event_id, webhook_id, status, priority, attempt_count, retry_of, completed_at)
VALUES ($1, $2, $3, $4, $5, 'normal', 1, $6, CASE WHEN $5 IN ('exhausted', 'succeeded') THEN now() - interval '1 minute' END)`,
		id, f.tenant, event, f.hook, status, retryOf)
	return id
}

func (f recoverFixture) count(sql string, args ...any) int {
	f.t.Helper()
	var n int
	require.NoError(f.t, f.pool.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

func text(s string) *string { return &s }

// recoverAll runs the recovery claimed next to its end, as a dlq process
// does, and returns its batch operation.
func recoverAll(t *testing.T, r *Runner, store *Store, tenant uuid.UUID) Batch {
	t.Helper()
	c := mustClaim(t, r)
	r.run(context.Background(), c)
	b, err := store.Batch(context.Background(), tenant, c.id)
	require.NoError(t, err)
	return b
}

// A recovery covers the webhook's DLQ entries of the window, and the events
// of the window it subscribes to that made no delivery to it because it was
// disabled (payload kept, not a notification about itself), never those
// from before it existed; a dry run counts them, a run gives each one
// delivery, and a second run finds nothing left.
func TestRecoveryCoversFailedAndMissedOnce(t *testing.T) {
	t.Parallel()
	f := newRecoverFixture(t, "")
	ctx := context.Background()
	beforeIt := f.event("order.created", f.ago(3*time.Hour+30*time.Minute), text(`{"n": 1}`))
	whilePaused := f.event("order.created", f.ago(90*time.Minute), text(`{"n": 2}`))
	queued := f.event("order.created", f.ago(89*time.Minute), text(`{}`))
	f.delivery(queued, "pending", nil) // parked while the webhook was disabled: it goes when enabled
	f.event("user.created", f.ago(88*time.Minute), text(`{}`))
	f.event("order.created", f.ago(87*time.Minute), nil)
	f.event("webhook.endpoint_disabled", f.ago(86*time.Minute), text(`{"webhook_id": "`+f.hook.String()+`"}`))
	aboutOther := f.event("webhook.circuit_opened", f.ago(85*time.Minute), text(`{"webhook_id": "`+uuid.NewString()+`"}`))
	f.event("order.created", f.ago(30*time.Minute), text(`{}`)) // active then, yet no delivery: not missed
	f.event("order.created", f.ago(5*time.Hour), text(`{}`))    // before the window

	failedEvent := f.event("order.created", f.ago(20*time.Minute), text(`{}`))
	exhausted := f.delivery(failedEvent, "exhausted", nil)
	retried := f.delivery(f.event("order.created", f.ago(19*time.Minute), text(`{}`)), "exhausted", nil)
	f.delivery(f.event("order.created", f.ago(19*time.Minute), text(`{}`)), "pending", &retried)
	f.delivery(f.event("order.created", f.ago(5*time.Hour), text(`{}`)), "exhausted", nil)

	sent := &taskRecorder{}
	store := NewStore(f.pool, sent)
	from := f.ago(4 * time.Hour)
	req := RecoverRequest{From: &from}
	req.RateLimit.RequestsPerSecond = 1000
	counts, err := store.CountRecovery(ctx, f.tenant, f.hook, req)
	require.NoError(t, err)
	require.Equal(t, 1, *counts.Failed)
	require.Equal(t, 2, *counts.Missed)

	b, err := store.Recover(ctx, f.tenant, f.hook, req)
	require.NoError(t, err)
	require.Equal(t, KindRecover, b.Kind)
	require.Equal(t, []string{IncludeFailed, IncludeMissed}, b.Recovery.Include)
	require.Nil(t, b.Recovery.Failed, "counted when it starts")
	r := newClaimRunner(f.pool, 1)
	r.dispatch = sent
	b = recoverAll(t, r, store, f.tenant)
	require.Equal(t, 3, b.Total)
	require.Equal(t, 3, b.Processed)
	require.Zero(t, b.Skipped)
	require.Equal(t, 1, *b.Recovery.Failed)
	require.Equal(t, 2, *b.Recovery.Missed)
	require.Equal(t, 3, sent.count())
	require.Equal(t, 1, f.count(`SELECT count(*) FROM deliveries WHERE retry_of = $1 AND batch_operation_id = $2`, exhausted, b.ID))
	require.Zero(t, f.count(`SELECT count(*) FROM deliveries WHERE event_id = $1`, beforeIt), "published before the webhook existed")
	for _, ev := range []uuid.UUID{whilePaused, aboutOther} {
		require.Equal(t, 1, f.count(`SELECT count(*) FROM deliveries WHERE event_id = $1 AND webhook_id = $2 AND batch_operation_id = $3`,
			ev, f.hook, b.ID))
	}
	require.Equal(t, 1, f.count(`SELECT count(*) FROM deliveries WHERE event_id = $1`, queued), "the queued delivery is not doubled")

	again, err := store.CountRecovery(ctx, f.tenant, f.hook, req)
	require.NoError(t, err)
	require.Zero(t, *again.Failed)
	require.Zero(t, *again.Missed)
	second, err := store.Recover(ctx, f.tenant, f.hook, req)
	require.NoError(t, err)
	c := mustClaim(t, r)
	require.Equal(t, second.ID, c.id)
	r.run(ctx, c)
	require.Equal(t, "completed", batchState(t, f.pool, second.ID), "nothing left to recover")
	require.Equal(t, 3, sent.count())
}

// include narrows a recovery to one of its sets, and the webhook's payload
// filter, as it is now, decides which missed events it receives
// (notifications are not filtered).
func TestRecoveryIncludesAndFilter(t *testing.T) {
	t.Parallel()
	f := newRecoverFixture(t, "data.n > 1")
	ctx := context.Background()
	f.event("order.created", f.ago(90*time.Minute), text(`{"n": 1}`))
	big := f.event("order.created", f.ago(89*time.Minute), text(`{"n": 2}`))
	f.event("webhook.circuit_opened", f.ago(88*time.Minute), text(`{"webhook_id": "`+uuid.NewString()+`"}`))
	f.delivery(f.event("order.created", f.ago(10*time.Minute), text(`{"n": 5}`)), "exhausted", nil)

	store := NewStore(f.pool, &taskRecorder{})
	from := f.ago(4 * time.Hour)
	req := RecoverRequest{From: &from, Include: []string{"missed"}}
	counts, err := store.CountRecovery(ctx, f.tenant, f.hook, req)
	require.NoError(t, err)
	require.Nil(t, counts.Failed)
	require.Equal(t, 2, *counts.Missed)

	req.RateLimit.RequestsPerSecond = 1000
	_, err = store.Recover(ctx, f.tenant, f.hook, req)
	require.NoError(t, err)
	r := newClaimRunner(f.pool, 1)
	r.dispatch = &taskRecorder{}
	b := recoverAll(t, r, store, f.tenant)
	require.Equal(t, 2, b.Total)
	require.Equal(t, 2, b.Processed)
	require.Equal(t, 1, f.count(`SELECT count(*) FROM deliveries WHERE event_id = $1`, big))
	require.Zero(t, f.count(`SELECT count(*) FROM deliveries WHERE retry_of IS NOT NULL`), "failed was not included")
}

// Two recoveries of the same window running at once give each missed event
// one delivery between them, with no unique index on deliveries to turn
// the second away (none spans the history): they take turns
// (lockMissedSQL).
func TestConcurrentRecoveriesDeliverEachMissedEventOnce(t *testing.T) {
	t.Parallel()
	f := newRecoverFixture(t, "")
	ctx := context.Background()
	const n = 300
	f.exec(`INSERT INTO events (id, tenant_id, event_type, idempotency_key, request_hash, priority, data, created_at)
SELECT uuidv7(), $1, 'order.created', 'k' || g, '\x00', 'normal', '{}', $2 FROM generate_series(1, $3) g`,
		f.tenant, f.ago(90*time.Minute), n)
	// The events' ids are of now; the window is on their time.
	store := NewStore(f.pool, &taskRecorder{})
	from, to := f.ago(4*time.Hour), f.now
	req := RecoverRequest{From: &from, To: &to}
	req.RateLimit.RequestsPerSecond = 10_000
	_, err := store.Recover(ctx, f.tenant, f.hook, req)
	require.NoError(t, err)
	_, err = store.Recover(ctx, f.tenant, f.hook, req)
	require.NoError(t, err)

	r := newClaimRunner(f.pool, 2)
	r.dispatch = &taskRecorder{}
	a, b := mustClaim(t, r), mustClaim(t, r)
	var wg sync.WaitGroup
	for _, c := range []claim{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.run(ctx, c)
		}()
	}
	wg.Wait()
	require.Equal(t, n, f.count(`SELECT count(*) FROM deliveries`))
	require.Equal(t, n, f.count(`SELECT count(DISTINCT event_id) FROM deliveries`))
	require.Equal(t, n, f.count(`SELECT sum(processed) FROM batch_operations`))
	// A recovery whose snapshot comes after the other delivered everything
	// finds nothing missed; one that overlaps skips what the other took.
	// Either way each accounts for all it counted.
	require.Zero(t, f.count(`SELECT count(*) FROM batch_operations WHERE processed + skipped <> total`))
}

// A recovery is refused for a webhook that is not the tenant's, and for an
// inactive one unless it is a dry run; its window and its include are
// checked.
func TestRecoveryRefusals(t *testing.T) {
	t.Parallel()
	f := newRecoverFixture(t, "")
	ctx := context.Background()
	store := NewStore(f.pool, &taskRecorder{})
	from := f.ago(time.Hour)
	req := RecoverRequest{From: &from}
	req.RateLimit.RequestsPerSecond = 10
	_, err := store.Recover(ctx, newTenant(t, f.pool), f.hook, req)
	require.ErrorIs(t, err, ErrNotFound)
	f.exec(`UPDATE webhooks SET active = false, disabled_reason = 'manual', disabled_at = now()`)
	_, err = store.Recover(ctx, f.tenant, f.hook, req)
	require.ErrorIs(t, err, ErrInactive)
	_, err = store.CountRecovery(ctx, f.tenant, f.hook, req)
	require.NoError(t, err)

	later := f.ago(2 * time.Hour)
	for _, bad := range []RecoverRequest{{}, {From: &from, To: &later}, {From: &from, Include: []string{"lost"}}, {From: &from}} {
		_, err := store.Recover(ctx, f.tenant, f.hook, bad)
		require.Error(t, err)
		require.NotErrorIs(t, err, ErrInactive, "%+v: the request is checked first", bad)
	}
}
