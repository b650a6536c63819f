package delivery

import (
	"context"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/db"
	"github.com/hookline/hookline/internal/db/dbtest"
)

// The hot pool prepares each new connection with the statements of every
// delivery; a mistake in one would only be logged, so each must run as
// prepared, on the schema as migrated, and write nothing.
func TestPrepareRunsEveryStatementOfADelivery(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	st := &store{pool: pool, hot: pool}
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	require.NoError(t, st.prepare(ctx, conn.Conn()))
	for _, sql := range []string{loadJobsSQL, recordSQL} {
		require.True(t, dbtest.Prepared(t, conn, sql), "prepared: %.40s", sql)
	}
	var rows int
	require.NoError(t, conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM deliveries) + (SELECT count(*) FROM delivery_attempts)`).Scan(&rows))
	require.Zero(t, rows)
}

// The worker prepares its statements as it starts, on a new database
// while its tables are still empty, and runs them from those generic
// plans until the tables are next analyzed: the load must find each
// delivery, its event and its webhook by key however many rows the tables
// have come to hold since.
func TestLoadPlannedOnEmptyTablesFindsRowsByKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	_, err := db.AnalyzeStale(ctx, pool) // the worker's analyzer, at start
	require.NoError(t, err)
	conn := workerConn(t, pool)
	var name string
	require.NoError(t, conn.QueryRow(ctx, `SELECT name FROM pg_prepared_statements WHERE statement = $1`, loadJobsSQL).Scan(&name))

	seed := dbtest.Seed(t, pool, 1)
	insert := func(n int) (last uuid.UUID) {
		t.Helper()
		require.NoError(t, pool.QueryRow(ctx, `WITH ev AS (
    INSERT INTO events (id, tenant_id, event_type, idempotency_key, request_hash, priority, data)
    SELECT uuidv7(), $1, 'a', gen_random_uuid()::text, '\x00', 'normal', json_build_object('pad', repeat('x', 1000))
    FROM generate_series(1, $3::int) g RETURNING id, tenant_id
), d AS (
    INSERT INTO deliveries (id, tenant_id, event_id, webhook_id, priority)
    SELECT uuidv7(), tenant_id, id, $2, 'normal' FROM ev RETURNING id)
SELECT id FROM d ORDER BY id DESC LIMIT 1`, seed.Tenant, seed.Webhooks[0], n).Scan(&last))
		return last
	}
	load := func(id uuid.UUID) string {
		t.Helper()
		return explainExecute(t, conn, name, `ARRAY['`+id.String()+`']::uuid[]`)
	}
	byKey := func(plan string) {
		t.Helper()
		require.Contains(t, plan, "Index Cond: ((id = ANY ($1))", plan)
		require.NotContains(t, plan, "Rows Removed by", plan)
	}
	byKey(load(insert(2000)))

	// Analyzed while young (a slow start), then grown forty times over.
	_, err = pool.Exec(ctx, `ANALYZE`)
	require.NoError(t, err)
	load(insert(50)) // planned again, on the new statistics
	byKey(load(insert(2000)))
}

// The statements that find deliveries by id (the attempt record, the
// parking, the enqueue mark) run from generic plans made from the
// statistics of the moment. Made while no delivery was unfinished, such a
// plan could read the partial index of unfinished deliveries whole and
// filter it by id; with 3,000 unfinished deliveries since, each must still
// look its ids up by primary key, reading nothing for none.
func TestStatementsByKeyReadNoUnfinishedDeliveries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	seed := dbtest.Seed(t, pool, 1)
	insert := func(status string, n int) {
		t.Helper()
		_, err := pool.Exec(ctx, `INSERT INTO deliveries (id, tenant_id, event_id, webhook_id, priority, status, completed_at)
SELECT uuidv7(), $1, $2, $3, 'normal', $4, CASE WHEN $4 <> 'pending' THEN now() END FROM generate_series(1, $5::int)`,
			seed.Tenant, seed.Event, seed.Webhooks[0], status, n)
		require.NoError(t, err)
	}
	insert("succeeded", 2000)
	_, err := pool.Exec(ctx, `ANALYZE`)
	require.NoError(t, err)
	insert("pending", 3000)

	conn := workerConn(t, pool)
	for _, tc := range []struct {
		name, start, args string
	}{
		{"record", "WITH input AS (", strings.Repeat("'{}', ", 15) + "'{}'"},
		{"park", "UPDATE deliveries d SET parked_at", "'{}', '{}', '{}', '{}'"},
		{"mark", "WITH locked AS (", "'{}', 0"},
	} {
		var name string
		require.NoError(t, conn.QueryRow(ctx, `SELECT name FROM pg_prepared_statements WHERE starts_with(statement, $1)`,
			tc.start).Scan(&name), tc.name)
		plan := explainExecute(t, conn, name, tc.args)
		require.NotContains(t, plan, "deliveries_unfinished_idx", "%s:\n%s", tc.name, plan)
		require.NotContains(t, plan, "Rows Removed by", "%s:\n%s", tc.name, plan)
	}
}

// workerConn is a connection of a hot pool as the worker opens it
// (generic plans), with the statements of a delivery prepared.
func workerConn(t *testing.T, pool *pgxpool.Pool) *pgxpool.Conn {
	t.Helper()
	st := &store{pool: pool}
	hot, err := db.OpenHot(pool, db.HotPool{MaxConns: 1, Prepare: st.prepare, GenericPlans: true}, nil)
	require.NoError(t, err)
	t.Cleanup(hot.Close)
	conn, err := hot.Acquire(context.Background())
	require.NoError(t, err)
	t.Cleanup(conn.Release)
	return conn
}

// explainExecute runs the prepared statement name with args (SQL
// literals) under EXPLAIN ANALYZE and returns the plan.
func explainExecute(t *testing.T, conn *pgxpool.Conn, name, args string) string {
	t.Helper()
	rows, err := conn.Query(context.Background(), `EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) EXECUTE `+
		pgx.Identifier{name}.Sanitize()+`(`+args+`)`)
	require.NoError(t, err)
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return strings.Join(lines, "\n")
}
