package autodisable_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/autodisable"
	"github.com/hookline/hookline/internal/db/dbtest"
	"github.com/hookline/hookline/internal/wire"
)

// tasks is the dispatcher of these tests: it keeps what the disabler hands
// to the broker.
type tasks struct {
	mu  sync.Mutex
	got []wire.Task
}

func (r *tasks) Enqueue(t ...wire.Task) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, t...)
}

type fixture struct {
	t      *testing.T
	pool   *pgxpool.Pool
	tenant uuid.UUID
}

func newFixture(t *testing.T) fixture {
	t.Helper()
	f := fixture{t: t, pool: dbtest.New(t), tenant: uuid.New()}
	f.exec(`INSERT INTO tenants (id, name, rate_limit_rpm, rate_limit_burst, publish_rps, publish_burst, auto_disable_failing_ms)
VALUES ($1, 't', 1, 1, 1, 1, 3600000)`, f.tenant)
	return f
}

func (f fixture) exec(sql string, args ...any) {
	f.t.Helper()
	_, err := f.pool.Exec(context.Background(), sql, args...)
	require.NoError(f.t, err)
}

// webhook stores a webhook of the fixture's tenant subscribed to events,
// with its own window (nil: the tenant's, an hour), failing since
// failingFor ago (0: not failing) and reopens re-openings in a row.
func (f fixture) webhook(events string, window *int64, failingFor time.Duration, reopens int, active bool) uuid.UUID {
	f.t.Helper()
	id := uuid.Must(uuid.NewV7())
	var since *time.Time
	if failingFor > 0 {
		s := time.Now().Add(-failingFor)
		since = &s
	}
	f.exec(`INSERT INTO webhooks (id, tenant_id, url, events, secret, retry_config, circuit_breaker_config, rate_limit,
    auto_disable_failing_ms, failing_since, circuit_reopens, active, disabled_reason, disabled_at)
VALUES ($1, $2, $8, $3, 'whsec_x', '{}', '{}', '{}', $4, $5, $6, $7,
    CASE WHEN $7 THEN NULL ELSE 'manual' END, CASE WHEN $7 THEN NULL ELSE now() END)`,
		id, f.tenant, []string{events}, window, since, reopens, active, "https://8.8.8.8/"+id.String())
	return id
}

func (f fixture) state(id uuid.UUID) (bool, string) {
	f.t.Helper()
	var active bool
	var reason string
	require.NoError(f.t, f.pool.QueryRow(context.Background(),
		`SELECT active, coalesce(disabled_reason, '') FROM webhooks WHERE id = $1`, id).Scan(&active, &reason))
	return active, reason
}

func ms(v int64) *int64 { return &v }

// rolePool is a pool on the fixture's database under role.
func (f fixture) rolePool(role string) *pgxpool.Pool {
	f.t.Helper()
	cfg := f.pool.Config().Copy()
	cfg.ConnConfig.RuntimeParams["role"] = role
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(f.t, err)
	f.t.Cleanup(pool.Close)
	return pool
}

// Webhooks past their window (their own, else their tenant's), or whose
// circuit opened again too often in a row, are disabled with the reason
// auto_disabled, announced to the tenant's webhooks subscribed to
// webhook.endpoint_disabled and audited, once; the others are left alone.
// The pass runs under the dlq's own database role, as in production.
func TestPassDisablesFailingWebhooks(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ownWindow := f.webhook("order.*", ms(60_000), 2*time.Minute, 0, true)
	tenantWindow := f.webhook("order.*", nil, 2*time.Hour, 0, true)
	notYet := f.webhook("order.*", nil, 30*time.Minute, 0, true)
	never := f.webhook("order.*", ms(0), 48*time.Hour, 9, true)
	reopening := f.webhook("order.*", nil, time.Minute, 3, true)
	paused := f.webhook("order.*", ms(60_000), 2*time.Hour, 0, false)
	healthy := f.webhook("order.*", nil, 0, 0, true)
	owner := f.webhook("webhook.endpoint_disabled", nil, 0, 0, true)
	catchAll := f.webhook("*", nil, 0, 0, true)

	sent := &tasks{}
	d := autodisable.New(f.rolePool("hookline_dlq"), sent, slog.New(slog.DiscardHandler), time.Minute, 3)
	n, err := d.Pass(context.Background())
	require.NoError(t, err)
	require.Equal(t, 3, n)
	for _, id := range []uuid.UUID{ownWindow, tenantWindow, reopening} {
		active, reason := f.state(id)
		require.False(t, active)
		require.Equal(t, "auto_disabled", reason)
	}
	for _, id := range []uuid.UUID{notYet, never, healthy, owner, catchAll} {
		active, reason := f.state(id)
		require.True(t, active)
		require.Empty(t, reason)
	}
	_, reason := f.state(paused)
	require.Equal(t, "manual", reason, "a webhook already disabled keeps its reason")

	// One notification per disabled webhook, delivered only to the webhook
	// that subscribed to it by name.
	require.Len(t, sent.got, 3)
	for _, task := range sent.got {
		require.Equal(t, owner, task.WebhookID)
		require.Equal(t, "high", task.Priority)
	}
	rows, err := f.pool.Query(context.Background(), `SELECT data FROM events WHERE event_type = 'webhook.endpoint_disabled'`)
	require.NoError(t, err)
	causes := map[uuid.UUID]string{}
	for rows.Next() {
		var raw []byte
		require.NoError(t, rows.Scan(&raw))
		var data autodisable.Disabled
		require.NoError(t, json.Unmarshal(raw, &data))
		require.Equal(t, "auto_disabled", data.DisabledReason)
		require.Equal(t, "https://8.8.8.8/"+data.WebhookID.String(), data.URL)
		require.NotNil(t, data.FailingSince)
		causes[data.WebhookID] = data.Cause
	}
	require.NoError(t, rows.Err())
	require.Equal(t, map[uuid.UUID]string{ownWindow: "failing", tenantWindow: "failing", reopening: "circuit_reopens"}, causes)
	var audited int
	require.NoError(t, f.pool.QueryRow(context.Background(), `SELECT count(*) FROM audit_log
WHERE action = 'webhook.auto_disabled' AND actor_key_id IS NULL AND details->>'by' = 'hookline'`).Scan(&audited))
	require.Equal(t, 3, audited)

	n, err = d.Pass(context.Background())
	require.NoError(t, err)
	require.Zero(t, n, "nothing left to disable")
}

// With circuit re-openings not counted (0), only the failure window
// disables.
func TestReopeningsCountOnlyWhenConfigured(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	reopening := f.webhook("order.*", nil, time.Minute, 500, true)
	d := autodisable.New(f.pool, &tasks{}, slog.New(slog.DiscardHandler), time.Minute, 0)
	n, err := d.Pass(context.Background())
	require.NoError(t, err)
	require.Zero(t, n)
	active, _ := f.state(reopening)
	require.True(t, active)
}
