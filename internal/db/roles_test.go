package db_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/db"
	"github.com/hookline/hookline/internal/db/dbtest"
)

// roleCase is one statement run under a process role: allowed, or refused
// for want of a privilege (SQLSTATE 42501, not any other failure).
type roleCase struct {
	sql     string
	allowed bool
}

// roleFixture is a tenant with a key, a webhook, an event with a delivery
// and an attempt, and an attempt partition of a day long gone, written by
// the owner of the schema.
type roleFixture struct {
	tenant, key, webhook, event, delivery uuid.UUID
	oldPartition                          string
}

func newRoleFixture(t *testing.T, pool *pgxpool.Pool) roleFixture {
	t.Helper()
	ctx := context.Background()
	f := roleFixture{tenant: uuid.New(), key: uuid.New(), webhook: uuid.New(), event: uuid.New(), delivery: uuid.New(),
		oldPartition: "delivery_attempts_20200101"}
	for _, stmt := range []struct {
		sql  string
		args []any
	}{
		{`INSERT INTO tenants (id, name, rate_limit_rpm, rate_limit_burst, publish_rps, publish_burst) VALUES ($1, 't', 1, 1, 1, 1)`, []any{f.tenant}},
		{`INSERT INTO api_keys (id, tenant_id, prefix, key_hash) VALUES ($1, $2, 'hk_x', '\x01')`, []any{f.key, f.tenant}},
		{`INSERT INTO webhooks (id, tenant_id, url, events, secret, retry_config, circuit_breaker_config, rate_limit)
			VALUES ($1, $2, 'http://example.com', '{a}', 'whsec_x', '{}', '{}', '{}')`, []any{f.webhook, f.tenant}},
		{`INSERT INTO events (id, tenant_id, event_type, idempotency_key, request_hash, priority, data)
			VALUES ($1, $2, 'a', 'k', '\x00', 'normal', '{}')`, []any{f.event, f.tenant}},
		{`INSERT INTO deliveries (id, tenant_id, event_id, webhook_id, priority) VALUES ($1, $2, $3, $4, 'normal')`,
			[]any{f.delivery, f.tenant, f.event, f.webhook}},
		{`INSERT INTO delivery_attempts (delivery_id, delivery_created_at, attempt_number, tenant_id, webhook_id, duration_ms, scheduled_at, executed_at)
			VALUES ($1, now(), 1, $2, $3, 5, now(), now())`, []any{f.delivery, f.tenant, f.webhook}},
		// An old day's partition, as ensure_attempt_partitions made it then.
		{`CREATE TABLE delivery_attempts_20200101 PARTITION OF delivery_attempts
			FOR VALUES FROM ('2020-01-01 00:00:00+00') TO ('2020-01-02 00:00:00+00')`, nil},
		{`GRANT SELECT ON delivery_attempts_20200101 TO hookline_dlq`, nil},
	} {
		_, err := pool.Exec(ctx, stmt.sql, stmt.args...)
		require.NoError(t, err, stmt.sql)
	}
	return f
}

// checkRole runs each case in its own transaction under role, rolled back
// afterwards so that one case does not change what the next one sees.
func checkRole(t *testing.T, pool *pgxpool.Pool, role string, f roleFixture, cases []roleCase) {
	t.Helper()
	ctx := context.Background()
	for _, c := range cases {
		sql := expand(c.sql, f)
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "SET LOCAL ROLE "+role); err != nil {
				return fmt.Errorf("set role: %w", err)
			}
			var current string
			if err := tx.QueryRow(ctx, "SELECT current_user").Scan(&current); err != nil || current != role {
				return fmt.Errorf("current_user is %q (%v), not %s", current, err, role)
			}
			rows, err := tx.Query(ctx, sql)
			if err != nil {
				return err
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return err
			}
			return errRollback
		})
		if c.allowed {
			require.ErrorIs(t, err, errRollback, "%s must be allowed: %s", role, sql)
			continue
		}
		var pgErr *pgconn.PgError
		require.ErrorAs(t, err, &pgErr, "%s must be refused: %s", role, sql)
		require.Equal(t, "42501", pgErr.Code, "%s: %s must fail for want of a privilege, got %s", role, sql, pgErr.Message)
	}
}

var errRollback = errors.New("rolled back on purpose")

// expand fills the fixture's ids into sql: {tenant}, {key}, {webhook},
// {event}, {delivery} and {old_partition}.
func expand(sql string, f roleFixture) string {
	return strings.NewReplacer("{tenant}", f.tenant.String(), "{key}", f.key.String(), "{webhook}", f.webhook.String(),
		"{event}", f.event.String(), "{delivery}", f.delivery.String(), "{old_partition}", f.oldPartition).Replace(sql)
}

// Statements alike for every process role: each moves the floors of order
// keys; none owns, alters, drops or truncates anything, nor calls the
// partition drop unless it is retention.
var everyRole = []roleCase{
	// Every process moves the floors of order keys (a worker's release,
	// the api's retry and rescue, the dlq's batch retries and recoveries);
	// none removes one.
	{`INSERT INTO order_floors AS f (order_key, event_id, id) VALUES ('k', '{event}', '{delivery}')
		ON CONFLICT (order_key) DO UPDATE SET event_id = excluded.event_id, id = excluded.id
		WHERE (excluded.event_id, excluded.id) < (f.event_id, f.id)`, true},
	{`SELECT event_id, id FROM order_floors WHERE order_key = 'k'`, true},
	{`DELETE FROM order_floors`, false},
	{`DROP TABLE webhooks`, false},
	{`DROP TABLE {old_partition}`, false},
	{`TRUNCATE deliveries`, false},
	{`TRUNCATE delivery_attempts`, false},
	{`ALTER TABLE webhooks ADD COLUMN x int`, false},
	{`CREATE INDEX ON events (source)`, false},
	{`DELETE FROM webhooks`, false},
	{`DELETE FROM tenants`, false},
	{`DELETE FROM api_keys`, false},
	{`UPDATE audit_log SET action = 'x'`, false},
	{`DELETE FROM audit_log`, false},
	// Console signing keys are retired by the owner only.
	{`DELETE FROM console_signing_keys`, false},
	// Nothing outside the schema's tables is analyzed as its owner.
	{`SELECT analyze_table('pg_catalog.pg_authid')`, false},
	{`SELECT analyze_table('deliveries_pkey')`, false},
}

// The worker loads deliveries, records attempts, moves deliveries, persists
// circuits and records owner notifications. It cannot delete webhooks, read
// API keys or change tenants.
func TestWorkerRoleGrants(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	f := newRoleFixture(t, pool)
	checkRole(t, pool, "hookline_worker", f, append([]roleCase{
		{`SELECT * FROM api_keys`, false},
		{`SELECT * FROM console_signing_keys`, false},
		{`SELECT key_hash FROM api_keys`, false},
		{`UPDATE tenants SET name = 'x'`, false},
		{`SELECT name FROM tenants`, false},
		{`UPDATE webhooks SET url = 'http://evil.example'`, false},
		{`INSERT INTO webhooks (id, tenant_id, url, events, secret, retry_config, circuit_breaker_config, rate_limit)
			VALUES (gen_random_uuid(), '{tenant}', 'http://x', '{a}', 's', '{}', '{}', '{}')`, false},
		{`DELETE FROM deliveries`, false},
		{`DELETE FROM events`, false},
		{`UPDATE events SET data = NULL`, false},
		{`SELECT * FROM audit_log`, false},
		{`INSERT INTO audit_log (id, tenant_id, action, target_type, target_id) VALUES (gen_random_uuid(), '{tenant}', 'x', 'x', 'x')`, false},
		{`SELECT error, response_body_sample FROM delivery_attempts`, false},
		{`DELETE FROM delivery_attempts`, false},
		{`SELECT * FROM delivery_attempts_retained`, false},
		{`SELECT * FROM batch_operations`, false},
		{`SELECT drop_attempt_partition('{old_partition}')`, false},
		// The analyzer (db.AnalyzeStale) analyzes the schema's tables as
		// their owner.
		{`SELECT analyze_table('deliveries')`, true},
		{`SELECT analyze_table('events')`, true},

		// The job load query, as internal/delivery runs it.
		{`SELECT d.id, d.status, d.attempt_count, d.created_at, d.next_attempt_at,
			e.event_type, e.source, e.idempotency_key, e.data, e.created_at, e.correlation_id,
			w.url, w.secret, w.previous_secret, w.previous_secret_expires_at, w.retry_config, w.headers,
			w.active, w.deleted_at IS NOT NULL, w.circuit_breaker_config, w.rate_limit, w.verification,
			t.rate_limit_rpm, t.rate_limit_burst,
			c.state, c.updated_at, c.forced_state, c.forced_until, coalesce(d.order_key, ''), d.event_id, d.webhook_id
		FROM deliveries d
		JOIN events e ON e.id = d.event_id
		JOIN webhooks w ON w.id = d.webhook_id
		JOIN tenants t ON t.id = d.tenant_id
		LEFT JOIN circuit_breaker_states c ON c.webhook_id = d.webhook_id
		WHERE d.id = ANY(ARRAY['{delivery}']::uuid[])`, true},
		{`WITH upd AS (UPDATE deliveries SET attempt_count = 1, status = 'retrying' WHERE id = '{delivery}' AND status = 'pending' RETURNING id)
		INSERT INTO delivery_attempts (delivery_id, delivery_created_at, attempt_number, tenant_id, webhook_id, duration_ms, scheduled_at, executed_at)
		SELECT id, now(), 2, '{tenant}', '{webhook}', 5, now(), now() FROM upd RETURNING delivery_id`, true},
		{`UPDATE deliveries SET postponed_count = postponed_count + 1 WHERE id = '{delivery}'`, true},
		{`INSERT INTO circuit_breaker_states (webhook_id, state, updated_at) VALUES ('{webhook}', 'open', now())
			ON CONFLICT (webhook_id) DO UPDATE SET state = 'open' WHERE circuit_breaker_states.updated_at <= now()`, true},
		{`INSERT INTO event_keys (tenant_id, idempotency_key, day, event_id)
			VALUES ('{tenant}', 'n1', (now() AT TIME ZONE 'UTC')::date, gen_random_uuid()) ON CONFLICT DO NOTHING RETURNING event_id`, true},
		{`INSERT INTO events (id, tenant_id, event_type, idempotency_key, request_hash, priority, data)
			VALUES (gen_random_uuid(), '{tenant}', 'webhook.circuit_opened', 'n1', '\x00', 'high', '{}') RETURNING id`, true},
		{`SELECT ensure_event_partitions(14)`, true},
		{`DELETE FROM event_keys`, false},
		{`SELECT drop_event_partition('events_default')`, false},
		{`SELECT drop_delivery_partition('deliveries_before')`, false},
		{`SELECT retire_delivery_partition('deliveries_before', 0)`, false},
		{`SELECT prepare_delivery_swap('deliveries_before', 0)`, false},
		{`INSERT INTO deliveries (id, tenant_id, event_id, webhook_id, priority) VALUES (uuidv7(), '{tenant}', '{event}', '{webhook}', 'high')`, true},
		{`SELECT ensure_attempt_partitions(14)`, true},
		// What counts towards disabling a failing webhook, and nothing else
		// of it.
		{`UPDATE webhooks SET failing_since = now(), circuit_reopens = circuit_reopens + 1 WHERE id = '{webhook}'`, true},
		{`SELECT id FROM webhooks WHERE id = '{webhook}' FOR UPDATE`, true},
		{`UPDATE webhooks SET active = false WHERE id = '{webhook}'`, false},
		{`SELECT * FROM disable_failing_webhooks(1, 10)`, false},
		// Each webhook's last attempt, as the tally flushes it.
		{`INSERT INTO webhook_last_attempts AS l (webhook_id, tenant_id, executed_at, status_code, error)
			VALUES ('{webhook}', '{tenant}', now(), 200, NULL)
			ON CONFLICT (webhook_id) DO UPDATE SET executed_at = excluded.executed_at WHERE excluded.executed_at > l.executed_at`, true},
		{`DELETE FROM webhook_last_attempts`, false},
		// A circuit's hold and release move the webhook's unfinished floor.
		{`INSERT INTO webhook_unfinished_floors AS f (webhook_id, floor) VALUES ('{webhook}', uuidv7())
			ON CONFLICT (webhook_id) DO UPDATE SET floor = excluded.floor WHERE f.floor < excluded.floor`, true},
		{`SELECT floor FROM webhook_unfinished_floors WHERE webhook_id = '{webhook}'`, true},
		{`DELETE FROM webhook_unfinished_floors`, false},
	}, everyRole...))
}

// The api manages tenants, keys and webhooks, publishes, reads history and
// writes the audit log; it deletes nothing and does not write attempts.
func TestAPIRoleGrants(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	f := newRoleFixture(t, pool)
	checkRole(t, pool, "hookline_api", f, append([]roleCase{
		{`SELECT analyze_table('deliveries')`, false},
		{`DELETE FROM deliveries`, false},
		{`DELETE FROM events`, false},
		{`DELETE FROM circuit_breaker_states`, false},
		{`INSERT INTO delivery_attempts (delivery_id, delivery_created_at, attempt_number, tenant_id, webhook_id, duration_ms, scheduled_at, executed_at)
			VALUES ('{delivery}', now(), 2, '{tenant}', '{webhook}', 5, now(), now())`, false},
		{`UPDATE delivery_attempts SET error = 'x'`, false},
		{`DELETE FROM delivery_attempts`, false},
		{`INSERT INTO delivery_attempts_retained SELECT * FROM delivery_attempts`, false},
		{`SELECT * FROM {old_partition}`, false},
		{`UPDATE events SET data = NULL`, false},
		{`SELECT drop_attempt_partition('{old_partition}')`, false},

		{`SELECT k.id, t.publish_rps FROM api_keys k JOIN tenants t ON t.id = k.tenant_id WHERE k.key_hash = '\x01'`, true},
		{`UPDATE api_keys SET last_used_at = now() WHERE id = '{key}'`, true},
		{`SELECT id FROM tenants WHERE id = '{tenant}' FOR UPDATE`, true},
		{`UPDATE tenants SET name = 'renamed' WHERE id = '{tenant}'`, true},
		{`UPDATE webhooks SET deleted_at = now(), active = false WHERE id = '{webhook}'`, true},
		{`UPDATE deliveries SET status = 'cancelled' WHERE webhook_id = '{webhook}' AND status IN ('pending', 'retrying')`, true},
		{`INSERT INTO audit_log (id, tenant_id, action, target_type, target_id) VALUES (gen_random_uuid(), '{tenant}', 'x', 'x', 'x')`, true},
		{`SELECT * FROM audit_log`, true},
		{`SELECT attempt_number FROM delivery_attempts WHERE delivery_id = '{delivery}'
			UNION ALL SELECT attempt_number FROM delivery_attempts_retained WHERE delivery_id = '{delivery}'`, true},
		{`SELECT d.id FROM deliveries d JOIN events e ON e.id = d.event_id WHERE d.enqueued_at IS NULL FOR UPDATE OF d SKIP LOCKED`, true},
		{`INSERT INTO batch_operations (id, tenant_id, filter, requests_per_second, priority) VALUES (gen_random_uuid(), '{tenant}', '{}', 1, 'low')`, true},
		{`INSERT INTO circuit_breaker_states (webhook_id, state, forced_state, updated_at) VALUES ('{webhook}', 'closed', 'open', now())
			ON CONFLICT (webhook_id) DO UPDATE SET forced_state = 'open'`, true},
		{`SELECT ensure_attempt_partitions(14)`, true},
		{`SELECT ensure_event_partitions(14)`, true},
		{`INSERT INTO event_keys (tenant_id, idempotency_key, day, event_id)
			VALUES ('{tenant}', 'k1', (now() AT TIME ZONE 'UTC')::date, gen_random_uuid()) ON CONFLICT DO NOTHING`, true},
		{`SELECT e.id FROM event_keys k JOIN events e ON e.id = k.event_id WHERE k.tenant_id = '{tenant}' AND k.idempotency_key = 'k1'`, true},
		{`DELETE FROM event_keys`, false},
		{`DELETE FROM events_default`, false},
		{`SELECT drop_event_partition('events_default')`, false},
		{`SELECT drop_delivery_partition('deliveries_before')`, false},
		{`SELECT retire_delivery_partition('deliveries_before', 0)`, false},
		{`SELECT prepare_delivery_swap('deliveries_before', 0)`, false},
		// Pausing and enabling a webhook records its disabled periods.
		{`UPDATE webhooks SET active = false, disabled_reason = 'manual', disabled_at = now() WHERE id = '{webhook}'`, true},
		{`SELECT * FROM disable_failing_webhooks(1, 10)`, false},
		// The first api process to need a console signing key makes it.
		{`INSERT INTO console_signing_keys (id, sealed_key) VALUES (1, 'k') ON CONFLICT (id) DO NOTHING`, true},
		{`SELECT id, sealed_key FROM console_signing_keys`, true},
		// "api rotate-secret-key" seals them again, under the api's role.
		{`SELECT id, sealed_key FROM console_signing_keys ORDER BY id FOR UPDATE`, true},
		{`UPDATE console_signing_keys SET sealed_key = 'x'`, true},
		{`UPDATE console_signing_keys SET id = 9`, false},
		// The webhooks pages read each webhook's last attempt.
		{`SELECT webhook_id, status_code, error, executed_at FROM webhook_last_attempts WHERE tenant_id = '{tenant}'`, true},
		{`INSERT INTO webhook_last_attempts (webhook_id, tenant_id, executed_at) VALUES ('{webhook}', '{tenant}', now())`, false},
		// The lists of unfinished deliveries move each webhook's floor.
		{`INSERT INTO webhook_unfinished_floors AS f (webhook_id, floor) VALUES ('{webhook}', uuidv7())
			ON CONFLICT (webhook_id) DO UPDATE SET floor = excluded.floor WHERE f.floor < excluded.floor`, true},
		{`SELECT floor FROM webhook_unfinished_floors WHERE webhook_id = '{webhook}'`, true},
		{`DELETE FROM webhook_unfinished_floors`, false},
	}, everyRole...))
}

// The dlq process records dead letters, runs batch retries and retention.
// It cannot read webhook secrets, API keys or tenants, change webhooks, or
// drop anything but an attempt partition.
func TestDLQRoleGrants(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	f := newRoleFixture(t, pool)
	checkRole(t, pool, "hookline_dlq", f, append([]roleCase{
		{`SELECT analyze_table('deliveries')`, false},
		{`SELECT secret FROM webhooks`, false},
		{`SELECT * FROM webhooks`, false},
		{`SELECT * FROM webhook_last_attempts`, false},
		{`SELECT * FROM api_keys`, false},
		{`SELECT * FROM console_signing_keys`, false},
		{`SELECT * FROM tenants`, false},
		{`UPDATE webhooks SET active = true`, false},
		// The sweeps move their floors (lost deliveries move every
		// webhook's unfinished floor) and delete none.
		{`INSERT INTO webhook_unfinished_floors AS f (webhook_id, floor) VALUES ('{webhook}', uuidv7())
			ON CONFLICT (webhook_id) DO UPDATE SET floor = excluded.floor WHERE f.floor < excluded.floor`, true},
		{`SELECT floor FROM webhook_unfinished_floors WHERE webhook_id = '{webhook}'`, true},
		{`DELETE FROM webhook_unfinished_floors`, false},
		{`INSERT INTO dead_letter_sweep_floor AS f (floor) VALUES (now())
			ON CONFLICT (one) DO UPDATE SET floor = excluded.floor WHERE f.floor < excluded.floor`, true},
		{`DELETE FROM dead_letter_sweep_floor`, false},
		{`INSERT INTO retention_floors AS f (step, floor) VALUES ('deliveries', gen_random_uuid())
			ON CONFLICT (step) DO UPDATE SET floor = excluded.floor WHERE f.floor < excluded.floor`, true},
		{`DELETE FROM retention_floors`, false},
		{`INSERT INTO retention_kept (step, id) VALUES ('payloads', gen_random_uuid())`, true},
		{`DELETE FROM retention_kept WHERE step = 'payloads'`, true},
		{`UPDATE retention_kept SET id = gen_random_uuid()`, false},
		{`UPDATE events SET event_type = 'x'`, false},
		{`INSERT INTO batch_operations (id, tenant_id, filter, requests_per_second, priority) VALUES (gen_random_uuid(), '{tenant}', '{}', 1, 'low')`, false},
		{`SELECT * FROM circuit_breaker_states`, false},
		{`SELECT * FROM audit_log`, false},
		{`SELECT drop_attempt_partition('delivery_attempts_default')`, false},
		{`SELECT drop_attempt_partition('webhooks')`, false},
		{`SELECT drop_attempt_partition('delivery_attempts')`, false},

		{`SELECT w.id FROM webhooks w WHERE w.tenant_id = '{tenant}' AND w.active AND w.deleted_at IS NULL
			AND EXISTS (SELECT 1 FROM unnest(w.events) f WHERE 'a' LIKE f) AND w.ordering_guarantee = 'none'`, true},
		{`UPDATE deliveries d SET status = 'exhausted', dead_lettered_at = now() FROM events e
			WHERE d.id = '{delivery}' AND e.id = d.event_id RETURNING d.id, e.event_type`, true},
		{`INSERT INTO events (id, tenant_id, event_type, idempotency_key, request_hash, priority, data)
			VALUES (gen_random_uuid(), '{tenant}', 'webhook.delivery_exhausted', 'n1', '\x00', 'high', '{}') ON CONFLICT DO NOTHING`, true},
		{`INSERT INTO deliveries (id, tenant_id, event_id, webhook_id, priority, retry_of) VALUES (uuidv7(), '{tenant}', '{event}', '{webhook}', 'low', '{delivery}')`, true},
		{`SELECT state, count(*) FROM batch_operations GROUP BY state`, true},
		{`UPDATE events SET data = NULL WHERE id = '{event}'`, true},
		{`DELETE FROM deliveries WHERE id = '{delivery}'`, true},
		{`DELETE FROM events WHERE id = '{event}'`, true},
		{`DELETE FROM delivery_attempts_default WHERE delivery_created_at < now() - interval '90 days'`, true},
		// Retention deletes the retained attempts of the deliveries it
		// deletes (no foreign key does it for it, migration 31).
		{`DELETE FROM delivery_attempts_retained WHERE delivery_id = '{delivery}'`, true},
		{`SELECT count(*) FROM {old_partition}`, true},
		{`INSERT INTO delivery_attempts_retained SELECT * FROM {old_partition} ON CONFLICT (delivery_id, attempt_number) DO NOTHING`, true},
		{`LOCK TABLE ONLY delivery_attempts IN ACCESS EXCLUSIVE MODE`, true},
		{`SELECT drop_attempt_partition('{old_partition}')`, true},
		{`SELECT ensure_attempt_partitions(14)`, true},
		// Retention drops old weeks of the event log through the one
		// function that does it, and deletes the events kept by a dropped
		// week once they are done with.
		{`SELECT ensure_event_partitions(14)`, true},
		{`SELECT drop_event_partition('events_default')`, false},
		{`SELECT drop_event_partition('events')`, false},
		{`SELECT drop_event_partition('webhooks')`, false},
		{`SELECT drop_event_partition('events_before')`, true},
		// And the weeks of deliveries (migration 33), reading the rows of
		// the partitions that are not weeks there.
		{`SELECT id FROM deliveries_default LIMIT 1`, true},
		{`SELECT id FROM deliveries_before LIMIT 1`, true},
		{`DELETE FROM deliveries_default`, false},
		{`SELECT drop_delivery_partition('deliveries_default')`, false},
		{`SELECT drop_delivery_partition('deliveries')`, false},
		{`SELECT drop_delivery_partition('events_default')`, false},
		{`SELECT retire_delivery_partition('deliveries_default', 0)`, false},
		{`SELECT retire_delivery_partition('events_default', 0)`, false},
		{`SELECT prepare_delivery_swap('deliveries_default', 0)`, false},
		{`SELECT prepare_delivery_swap('events_default', 0)`, false},
		// A partition with more to keep than it moves is swapped for one
		// of its kept deliveries (migration 34), prepared before
		// (migration 37).
		{`SELECT prepare_delivery_swap('deliveries_before', -1)`, true},
		{`SELECT retire_delivery_partition('deliveries_before', -1)`, true},
		{`SELECT drop_delivery_partition('deliveries_before')`, true},
		{`DROP TABLE deliveries_before`, false},
		{`SELECT drop_detached_deliveries()`, true},
		{`DELETE FROM events_default WHERE id = '{event}'`, true},
		{`INSERT INTO event_keys (tenant_id, idempotency_key, day, event_id)
			VALUES ('{tenant}', 'n2', (now() AT TIME ZONE 'UTC')::date, gen_random_uuid()) ON CONFLICT DO NOTHING`, true},
		{`DELETE FROM event_keys`, false},
		{`DROP TABLE events_before`, false},
		// Disabling failing webhooks goes through the one function that
		// does it, audited; recoveries read a webhook's disabled periods.
		{`SELECT * FROM disable_failing_webhooks(1, 10)`, true},
		{`UPDATE webhooks SET active = false, disabled_reason = 'auto_disabled', disabled_at = now()`, false},
		{`INSERT INTO audit_log (id, tenant_id, action, target_type, target_id) VALUES (gen_random_uuid(), '{tenant}', 'x', 'x', 'x')`, true},
		{`SELECT webhook_id, paused_at, resumed_at FROM webhook_pauses`, true},
		{`SELECT created_at FROM webhooks`, true},
		// Retention prunes ended portal sessions and old pauses; the dlq
		// reads nothing else of the platform's tables.
		{`DELETE FROM portal_sessions WHERE expires_at < now() - interval '1 day'`, true},
		{`DELETE FROM webhook_pauses WHERE resumed_at < now() - interval '90 days'`, true},
		{`SELECT * FROM service_keys`, false},
		{`UPDATE portal_sessions SET ended_at = now()`, false},
	}, everyRole...))
}

// Partitions made by ensure_attempt_partitions, whoever calls it, belong to
// the owner of the schema and can be read by retention, and by no other
// role directly.
func TestEnsuredPartitionsAreReadableByRetention(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	day := time.Now().UTC().AddDate(0, 0, 30)
	name := "delivery_attempts_" + day.Format("20060102")
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL ROLE hookline_worker"); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "SELECT ensure_attempt_partitions(31)")
		return err
	})
	require.NoError(t, err)
	var owner string
	var dlq, worker, api bool
	require.NoError(t, pool.QueryRow(ctx, `SELECT pg_get_userbyid(relowner), has_table_privilege('hookline_dlq', oid, 'SELECT'),
		has_table_privilege('hookline_worker', oid, 'SELECT'), has_table_privilege('hookline_api', oid, 'SELECT')
		FROM pg_class WHERE oid = $1::regclass`, name).Scan(&owner, &dlq, &worker, &api))
	var me string
	require.NoError(t, pool.QueryRow(ctx, "SELECT current_user").Scan(&me))
	require.Equal(t, me, owner, "the partition belongs to the owner of the schema, not the calling role")
	require.True(t, dlq)
	require.False(t, worker)
	require.False(t, api)
}

// An api started under its least-privilege role with migrate_on_start
// says why it cannot migrate instead of failing half-way (or hanging).
func TestMigrateRefusesARoleThatCannotCreate(t *testing.T) {
	t.Parallel()
	url := dbtest.NewURL(t, true)
	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["role"] = "hookline_api"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	defer pool.Close()
	_, err = db.Migrate(ctx, pool)
	require.ErrorContains(t, err, "cannot create tables")
	require.ErrorContains(t, err, "API_MIGRATE_ON_START=false")
}
