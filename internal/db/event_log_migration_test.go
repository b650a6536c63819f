package db_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/db"
	"github.com/hookline/hookline/internal/eventlog"
)

// A database with events from before the event log was partitioned
// migrates with them: every event stays where its id finds it, with its
// deliveries and its replays; the keys of the last two days' events keep
// turning their repeats away, older keys no longer do; and migrating back
// gives one table again.
func TestEventLogMigrationKeepsTheEventsAndTheRecentKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, exec := atVersion(t, 15)
	tenant, _ := tenantWithWebhook(exec)
	// 40 events of 30 days ago (keys o1-o40), 10 of an hour ago (r1-r10),
	// each with a UUIDv7 of its time and a delivery; one event whose id is
	// no UUIDv7 of any time yet; a replay of an old event.
	exec(`INSERT INTO events (id, tenant_id, event_type, idempotency_key, request_hash, priority, data, created_at)
		SELECT (lpad(to_hex(floor(extract(epoch FROM at) * 1000)::bigint), 12, '0')
		        || substr(replace(gen_random_uuid()::text, '-', ''), 13))::uuid,
		       $1, 'a.b', k, '\x00', 'normal', '{}', at
		FROM (SELECT 'o' || n AS k, now() - interval '30 days' + n * interval '1 minute' AS at FROM generate_series(1, 40) n
		      UNION ALL
		      SELECT 'r' || n, now() - interval '1 hour' + n * interval '1 second' FROM generate_series(1, 10) n) s`, tenant)
	exec(`INSERT INTO events (id, tenant_id, event_type, idempotency_key, request_hash, priority, data)
		VALUES ('ffffffff-0000-4000-8000-000000000000', $1, 'a.b', 'v4', '\x00', 'normal', '{}')`, tenant)
	exec(`INSERT INTO events (id, tenant_id, event_type, idempotency_key, request_hash, priority, data, replay_of)
		SELECT uuidv7(), tenant_id, event_type, 'replay', request_hash, priority, data, id
		FROM events WHERE idempotency_key = 'o1'`)
	exec(`INSERT INTO deliveries (id, tenant_id, event_id, webhook_id, priority, created_at)
		SELECT uuidv7(), e.tenant_id, e.id, w.id, 'normal', e.created_at FROM events e JOIN webhooks w ON w.tenant_id = e.tenant_id`)
	before := eventRows(t, pool)
	require.Len(t, before, 52)

	v, err := db.Migrate(ctx, pool)
	require.NoError(t, err)
	require.GreaterOrEqual(t, v, uint(16))

	require.Equal(t, "p", eventsKind(t, pool))
	require.Equal(t, before, eventRows(t, pool), "every event kept, as it was")
	count := func(sql string, args ...any) int {
		t.Helper()
		var n int
		require.NoError(t, pool.QueryRow(ctx, sql, args...).Scan(&n))
		return n
	}
	require.Equal(t, 51, count(`SELECT count(*) FROM events_before`))
	require.Equal(t, 1, count(`SELECT count(*) FROM events_default WHERE idempotency_key = 'v4'`))
	require.Equal(t, 52, count(`SELECT count(*) FROM deliveries d JOIN events e ON e.id = d.event_id`))
	require.Equal(t, 1, count(`SELECT count(*) FROM events r JOIN events o ON o.id = r.replay_of WHERE o.idempotency_key = 'o1'`))
	require.Equal(t, 1, count(`SELECT count(*) FROM events WHERE id = 'ffffffff-0000-4000-8000-000000000000'`))

	// The recent keys are held for their day and the next; a repeat is
	// turned away, while an old key is free again.
	require.Equal(t, 2*12, count(`SELECT count(*) FROM event_keys WHERE tenant_id = $1`, tenant),
		"r1-r10, v4 and replay: the events of the last two days")
	require.Zero(t, count(`SELECT count(*) FROM event_keys WHERE idempotency_key LIKE 'o%'`))
	publish := func(key string) int {
		t.Helper()
		return count(`WITH `+eventlog.KeysSQL(`(SELECT uuidv7() AS id, $1::uuid AS tenant_id, $2::text AS idempotency_key) AS p`)+`
			SELECT count(*) FROM keyed`, tenant, key)
	}
	require.Zero(t, publish("r3"), "a repeat of an hour-old key")
	require.Equal(t, 1, publish("o3"), "a key of 30 days ago")
	var owner uuid.UUID
	require.NoError(t, pool.QueryRow(ctx, eventlog.OwnerSQL(`e.id`), tenant, "r3").Scan(&owner))
	require.Equal(t, before["r3"], owner)

	// Back: one table, the key unique again, the foreign keys back.
	require.NoError(t, db.MigrateTo(ctx, pool, 15))
	require.Equal(t, before, eventRows(t, pool))
	require.Equal(t, "r", eventsKind(t, pool))
	_, err = pool.Exec(ctx, `INSERT INTO events (id, tenant_id, event_type, idempotency_key, request_hash, priority)
		VALUES (uuidv7(), $1, 'a.b', 'r3', '\x00', 'normal')`, tenant)
	require.ErrorContains(t, err, "events_tenant_id_idempotency_key_key")
	_, err = pool.Exec(ctx, `INSERT INTO deliveries (id, tenant_id, event_id, webhook_id, priority)
		SELECT uuidv7(), $1, uuidv7(), id, 'normal' FROM webhooks`, tenant)
	require.ErrorContains(t, err, "deliveries_event_id_fkey")
}

// eventRows maps each event's key to its id.
func eventRows(t *testing.T, pool *pgxpool.Pool) map[string]uuid.UUID {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT idempotency_key, id FROM events`)
	require.NoError(t, err)
	defer rows.Close()
	out := map[string]uuid.UUID{}
	for rows.Next() {
		var k string
		var id uuid.UUID
		require.NoError(t, rows.Scan(&k, &id))
		out[k] = id
	}
	require.NoError(t, rows.Err())
	return out
}

// eventsKind is the kind of the events table: "r" for a plain table, "p"
// for a partitioned one.
func eventsKind(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	var kind string
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT relkind::text FROM pg_class WHERE oid = 'events'::regclass`).Scan(&kind))
	return kind
}
