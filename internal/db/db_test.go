package db_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/db"
	"github.com/hookline/hookline/internal/db/dbtest"
)

func TestMigrateIsIdempotent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, err := db.Open(ctx, dbtest.NewURL(t, false), 4)
	require.NoError(t, err)
	defer pool.Close()

	v1, err := db.Migrate(ctx, pool)
	require.NoError(t, err)
	require.Positive(t, v1)
	v2, err := db.Migrate(ctx, pool)
	require.NoError(t, err)
	require.Equal(t, v1, v2)
	require.NoError(t, db.EnsurePartitions(ctx, pool, 14))
	require.NoError(t, db.EnsurePartitions(ctx, pool, 14))
}

func TestMigrateConcurrentInProcess(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := dbtest.NewURL(t, false)
	var wg sync.WaitGroup
	errs := make([]error, 6)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pool, err := db.Open(ctx, url, 2)
			if err != nil {
				errs[i] = err
				return
			}
			defer pool.Close()
			_, errs[i] = db.Migrate(ctx, pool)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
}

// Two api processes started at once against an empty database: both must
// succeed and the schema must be applied once.
func TestMigrateTwoProcessesAtOnce(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "api")
	build := exec.Command("go", "build", "-o", bin, "github.com/hookline/hookline/cmd/api")
	out, err := build.CombinedOutput()
	require.NoError(t, err, string(out))

	url := dbtest.NewURL(t, false)
	cmds := make([]*exec.Cmd, 2)
	outs := make([][]byte, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i := range cmds {
		cmds[i] = exec.Command(bin, "migrate")
		cmds[i].Env = append(os.Environ(), "DATABASE_URL="+url, "ADMIN_TOKEN=test-admin-token", "HOOKLINE_CONFIG=")
		cmds[i].Dir = t.TempDir()
	}
	for i := range cmds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			outs[i], errs[i] = cmds[i].CombinedOutput()
		}()
	}
	wg.Wait()
	for i := range cmds {
		require.NoError(t, errs[i], string(outs[i]))
	}

	pool, err := db.Open(context.Background(), url, 2)
	require.NoError(t, err)
	defer pool.Close()
	var version int
	var dirty bool
	require.NoError(t, pool.QueryRow(context.Background(), "SELECT version, dirty FROM schema_migrations").Scan(&version, &dirty))
	require.False(t, dirty)
	require.Positive(t, version)
	var tables int
	require.NoError(t, pool.QueryRow(context.Background(),
		"SELECT count(*) FROM pg_tables WHERE schemaname = 'public' AND tablename IN ('tenants','webhooks','events','deliveries','batch_operations','circuit_breaker_states','api_keys')").Scan(&tables))
	require.Equal(t, 7, tables)
}

// deliveryFixture makes a tenant, a webhook and an event, and returns a
// function that inserts a pending delivery of that event.
func deliveryFixture(t *testing.T, pool *pgxpool.Pool) (newDelivery func() uuid.UUID) {
	t.Helper()
	seed := dbtest.Seed(t, pool, 1)
	return func() uuid.UUID {
		id := uuid.New()
		_, err := pool.Exec(context.Background(), `INSERT INTO deliveries (id, tenant_id, event_id, webhook_id, priority) VALUES ($1, $2, $3, $4, 'normal')`,
			id, seed.Tenant, seed.Event, seed.Webhooks[0])
		require.NoError(t, err)
		return id
	}
}

// Terminal delivery states are final in the SQL itself.
func TestTerminalDeliveryStatesAreFinal(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	newDelivery := deliveryFixture(t, pool)

	for _, terminal := range []string{"succeeded", "exhausted", "cancelled"} {
		for _, next := range []string{"pending", "retrying", "succeeded", "exhausted", "cancelled"} {
			if next == terminal {
				continue
			}
			id := newDelivery()
			_, err := pool.Exec(ctx, `UPDATE deliveries SET status = $2 WHERE id = $1`, id, terminal)
			require.NoError(t, err, "pending -> %s", terminal)
			_, err = pool.Exec(ctx, `UPDATE deliveries SET status = $2 WHERE id = $1`, id, next)
			require.Error(t, err, "%s -> %s must be refused", terminal, next)
			var status string
			require.NoError(t, pool.QueryRow(ctx, `SELECT status FROM deliveries WHERE id = $1`, id).Scan(&status))
			require.Equal(t, terminal, status)
		}
	}
}

// The guard of terminal states costs an update of a delivery nothing in
// the WAL: each update writes as many records as the same update of a
// twin row with the guard dropped (a BEFORE ROW trigger, even one that
// does not fire, would add a row lock to every one).
func TestTerminalGuardAddsNoWALRecord(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	newDelivery := deliveryFixture(t, pool)
	walRecords := func(q interface {
		QueryRow(context.Context, string, ...any) pgx.Row
	}, update string, id uuid.UUID) int64 {
		t.Helper()
		var plan []struct {
			Plan struct {
				WALRecords int64 `json:"WAL Records"`
			}
		}
		require.NoError(t, q.QueryRow(ctx, `EXPLAIN (ANALYZE, WAL, FORMAT JSON) `+update, id).Scan(&plan), update)
		require.Len(t, plan, 1)
		return plan[0].Plan.WALRecords
	}

	for _, c := range []struct{ from, update string }{
		{"pending", `UPDATE deliveries SET last_error = 'refused', updated_at = now() WHERE id = $1`},
		{"pending", `UPDATE deliveries SET status = 'retrying', attempt_count = 1 WHERE id = $1`},
		{"retrying", `UPDATE deliveries SET status = 'succeeded', attempt_count = 2, completed_at = now() WHERE id = $1`},
		{"succeeded", `UPDATE deliveries SET last_error = 'x' WHERE id = $1`},
	} {
		guarded, unguarded := newDelivery(), newDelivery()
		_, err := pool.Exec(ctx, `UPDATE deliveries SET status = $2 WHERE id = ANY($1) AND status <> $2`,
			[]uuid.UUID{guarded, unguarded}, c.from)
		require.NoError(t, err)
		// Read both rows first, so that neither update pays for setting
		// the page's hint bits.
		_, err = pool.Exec(ctx, `SELECT count(*) FROM deliveries`)
		require.NoError(t, err)

		with := walRecords(pool, c.update, guarded)

		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, `DROP TRIGGER deliveries_keep_terminal ON deliveries`)
		require.NoError(t, err)
		without := walRecords(tx, c.update, unguarded)
		require.NoError(t, tx.Rollback(ctx))

		require.Positive(t, without, c.update)
		require.Equal(t, without, with, "%s from %s", c.update, c.from)
	}
}

// The attempt log refuses a second record of one attempt number, even across
// partitions.
func TestAttemptNumberUniquePerDelivery(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	id := uuid.New()
	insert := `INSERT INTO delivery_attempts (delivery_id, delivery_created_at, attempt_number, tenant_id, webhook_id, duration_ms, scheduled_at, executed_at)
		VALUES ($1, now(), 1, $2, $2, 5, now(), now())`
	_, err := pool.Exec(ctx, insert, id, uuid.New())
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO delivery_attempts (delivery_id, delivery_created_at, attempt_number, tenant_id, webhook_id, duration_ms, scheduled_at, executed_at)
		SELECT delivery_id, delivery_created_at, 1, tenant_id, webhook_id, 7, now(), now() FROM delivery_attempts WHERE delivery_id = $1`, id)
	require.Error(t, err)
	var partition string
	require.NoError(t, pool.QueryRow(ctx, `SELECT tableoid::regclass::text FROM delivery_attempts WHERE delivery_id = $1`, id).Scan(&partition))
	require.Regexp(t, `^delivery_attempts_\d{8}$`, partition, "today's attempts go to a daily partition, not the default one")
}

// A day whose attempts already landed in the default partition is skipped,
// not an error that would stop every later start.
func TestEnsurePartitionsSkipsDaysInTheDefaultPartition(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	_, err := pool.Exec(ctx, `INSERT INTO delivery_attempts (delivery_id, delivery_created_at, attempt_number, tenant_id, webhook_id, duration_ms, scheduled_at, executed_at)
		VALUES ($1, now() + interval '20 days', 1, $1, $1, 1, now(), now())`, uuid.New())
	require.NoError(t, err)
	require.NoError(t, db.EnsurePartitions(ctx, pool, 25))
	var inDefault int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM delivery_attempts_default`).Scan(&inDefault))
	require.Equal(t, 1, inDefault)
	var partitions int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_inherits WHERE inhparent = 'delivery_attempts'::regclass`).Scan(&partitions))
	require.Greater(t, partitions, 20, "the other days got their partitions")
}

// insertTenantsSQL inserts $1 tenants, named $2 followed by a number.
const insertTenantsSQL = `INSERT INTO tenants (id, name, rate_limit_rpm, rate_limit_burst, publish_rps, publish_burst)
SELECT gen_random_uuid(), $2 || g, 60, 10, 10, 10 FROM generate_series(1, $1::int) g`

// tenantsConn inserts n tenants named prefix followed by a number through a
// connection of pool it keeps, runs then, in order, the statements given,
// and returns the connection: statistics are flushed per connection.
func tenantsConn(t *testing.T, pool *pgxpool.Pool, n int, prefix string, then ...string) *pgxpool.Conn {
	t.Helper()
	ctx := context.Background()
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	t.Cleanup(conn.Release)
	_, err = conn.Exec(ctx, insertTenantsSQL, n, prefix)
	require.NoError(t, err)
	for _, sql := range then {
		_, err = conn.Exec(ctx, sql)
		require.NoError(t, err, sql)
	}
	return conn
}

func TestAnalyzeStaleAnalyzesNewAndChangedTables(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)

	// A new database: no table is analyzed while it is empty. Postgres
	// plans a table never analyzed as if it had ten pages, and one
	// analyzed empty as empty: a generic plan made then may read the whole
	// table for each key once it has filled.
	first, err := db.AnalyzeStale(ctx, pool)
	require.NoError(t, err)
	require.Empty(t, first)
	var tuples float64
	require.NoError(t, pool.QueryRow(ctx, `SELECT reltuples FROM pg_class WHERE oid = 'deliveries'::regclass`).Scan(&tuples))
	require.EqualValues(t, -1, tuples, "never analyzed")

	// Rows beyond the threshold make a table stale; the statistics then
	// count them, and it is not stale again until it changes.
	tenantsConn(t, pool, 200, "analyze-", `SELECT pg_stat_force_next_flush()`)
	stale, err := db.AnalyzeStale(ctx, pool)
	require.NoError(t, err)
	require.Equal(t, []string{"public.tenants"}, stale)
	require.NoError(t, pool.QueryRow(ctx, `SELECT reltuples FROM pg_class WHERE oid = 'tenants'::regclass`).Scan(&tuples))
	require.EqualValues(t, 200, tuples)
	again, err := db.AnalyzeStale(ctx, pool)
	require.NoError(t, err)
	require.Empty(t, again)
}

// A table that grew by a tenth since its last analysis waits for that
// analysis to age; one that doubled does not.
func TestAnalyzeStaleWaitsForTheLastAnalysisToAgeUnlessTheTableDoubled(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	insertTenants := func(n int) {
		t.Helper()
		_, err := pool.Exec(ctx, insertTenantsSQL, n, "analyze-")
		require.NoError(t, err)
		_, err = pool.Exec(ctx, `SELECT pg_stat_force_next_flush()`)
		require.NoError(t, err)
	}
	_, err := db.AnalyzeStale(ctx, pool)
	require.NoError(t, err)
	insertTenants(1000)
	doubled, err := db.AnalyzeStale(ctx, pool)
	require.NoError(t, err)
	require.Equal(t, []string{"public.tenants"}, doubled, "1000 rows beside none")

	// 300 rows beside 1000: past the 10 % threshold, short of doubling.
	insertTenants(300)
	fresh, err := db.AnalyzeStale(ctx, pool)
	require.NoError(t, err)
	require.Empty(t, fresh, "analyzed a moment ago")
	aged, err := db.AnalyzeStaleAfter(ctx, pool, 0)
	require.NoError(t, err)
	require.Equal(t, []string{"public.tenants"}, aged, "last analysis older than the wait")
	var tuples float64
	require.NoError(t, pool.QueryRow(ctx, `SELECT reltuples FROM pg_class WHERE oid = 'tenants'::regclass`).Scan(&tuples))
	require.EqualValues(t, 1300, tuples)

	// Under the threshold, an old analysis is not enough.
	insertTenants(100)
	under, err := db.AnalyzeStaleAfter(ctx, pool, 0)
	require.NoError(t, err)
	require.Empty(t, under, "100 rows beside 1300 is under 50 + 10 %")
}

// A partitioned table gets statistics of its own, which the planner reads
// for the table as a whole, once its partitions hold rows; it is analyzed
// before the partitions, which its analysis covers, and again by the same
// thresholds as a table, counted in its partitions' rows.
func TestAnalyzeStaleAnalyzesPartitionedTablesAsAWhole(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	insertEvents := func(n int) {
		t.Helper()
		_, err := pool.Exec(ctx, `INSERT INTO events (id, tenant_id, event_type, idempotency_key, request_hash, priority)
SELECT uuidv7(), t.id, 'order.' || (g % 7), 'k' || g || '-' || gen_random_uuid(), '\x00', 'normal'
FROM generate_series(1, $1::int) g, (SELECT id FROM tenants LIMIT 1) t`, n)
		require.NoError(t, err)
		_, err = pool.Exec(ctx, `SELECT pg_stat_force_next_flush()`)
		require.NoError(t, err)
	}
	inherited := func() (rows float64, typed int) {
		t.Helper()
		require.NoError(t, pool.QueryRow(ctx, `SELECT c.reltuples,
    (SELECT count(*) FROM pg_stats s WHERE s.tablename = 'events' AND s.inherited AND s.attname = 'event_type')
FROM pg_class c WHERE c.oid = 'events'::regclass`).Scan(&rows, &typed))
		return rows, typed
	}
	tenantsConn(t, pool, 1, "parent-", `SELECT pg_stat_force_next_flush()`)
	_, err := db.AnalyzeStale(ctx, pool)
	require.NoError(t, err)
	rows, typed := inherited()
	require.EqualValues(t, -1, rows, "an empty event log is not analyzed")
	require.Zero(t, typed)

	insertEvents(400)
	first, err := db.AnalyzeStale(ctx, pool)
	require.NoError(t, err)
	require.NotEmpty(t, first)
	require.Equal(t, "public.events", first[0], "the partitioned table before its partitions")
	for _, name := range first[1:] {
		require.NotContains(t, name, "public.events_", "its partitions were analyzed with it")
	}
	rows, typed = inherited()
	require.EqualValues(t, 400, rows)
	require.Equal(t, 1, typed, "statistics of the event log as a whole")

	// 100 events beside 400: past the 10 % threshold, short of doubling.
	insertEvents(100)
	fresh, err := db.AnalyzeStale(ctx, pool)
	require.NoError(t, err)
	require.NotContains(t, fresh, "public.events", "analyzed a moment ago")
	aged, err := db.AnalyzeStaleAfter(ctx, pool, 0)
	require.NoError(t, err)
	require.Contains(t, aged, "public.events", "last analysis older than the wait")
	rows, _ = inherited()
	require.EqualValues(t, 500, rows)

	insertEvents(20)
	under, err := db.AnalyzeStaleAfter(ctx, pool, 0)
	require.NoError(t, err)
	require.NotContains(t, under, "public.events", "20 events beside 500 is under 50 + 10 %")
}

// A table once analyzed is analyzed again on its changes alone, even when
// the count of its live rows is lost (statistics reset, crash recovery)
// and only updates have come since.
func TestAnalyzeStaleAfterStatisticsReset(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	conn := tenantsConn(t, pool, 200, "reset-",
		`ANALYZE tenants`,
		`SELECT pg_stat_force_next_flush()`,
		`SELECT 1`,
		`SELECT pg_stat_reset()`,
		`UPDATE tenants SET rate_limit_rpm = 61`,
		`SELECT pg_stat_force_next_flush()`)
	var live int
	require.NoError(t, conn.QueryRow(ctx, `SELECT n_live_tup FROM pg_stat_user_tables WHERE relid = 'tenants'::regclass`).Scan(&live))
	require.Zero(t, live, "the count of live rows is gone")
	stale, err := db.AnalyzeStaleAfter(ctx, pool, 0)
	require.NoError(t, err)
	require.Equal(t, []string{"public.tenants"}, stale, "200 rows changed beside 200")
}

func TestAnalyzeStaleLeavesTheWorkToTheProcessHoldingTheLock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	conn := tenantsConn(t, pool, 1, "t-", `SELECT pg_stat_force_next_flush()`,
		`SELECT pg_advisory_lock(x'686c616e6c7a'::bigint)`)
	tables, err := db.AnalyzeStale(ctx, pool)
	require.NoError(t, err)
	require.Empty(t, tables)
	_, err = conn.Exec(ctx, `SELECT pg_advisory_unlock(x'686c616e6c7a'::bigint)`)
	require.NoError(t, err)
	tables, err = db.AnalyzeStale(ctx, pool)
	require.NoError(t, err)
	require.NotEmpty(t, tables)
}

// A generic plan made while a table is small is kept while the table
// grows; on the hot path's connections it must still find rows by key.
func TestGenericPlansFindRowsByKeyWhateverTheTableSizeWhenPlanned(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	// A young table, analyzed with its first few rows.
	_, err := pool.Exec(ctx, insertTenantsSQL, 3, "young-")
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `ANALYZE tenants`)
	require.NoError(t, err)
	hot, err := db.OpenHot(pool, db.HotPool{MaxConns: 1, GenericPlans: true}, nil)
	require.NoError(t, err)
	t.Cleanup(hot.Close)

	const lookup = `SELECT name FROM tenants WHERE id = ANY($1)`
	plain, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer plain.Release()
	_, err = plain.Exec(ctx, `SET plan_cache_mode = force_generic_plan`)
	require.NoError(t, err)
	conn, err := hot.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	for _, c := range []*pgxpool.Conn{plain, conn} {
		_, err = c.Exec(ctx, `PREPARE lookup(uuid[]) AS `+lookup)
		require.NoError(t, err)
		_, err = c.Exec(ctx, `EXECUTE lookup('{}')`)
		require.NoError(t, err)
	}

	_, err = pool.Exec(ctx, insertTenantsSQL, 5000, "plan-")
	require.NoError(t, err)
	plan := func(c *pgxpool.Conn) string {
		rows, err := c.Query(ctx, `EXPLAIN EXECUTE lookup('{}')`)
		require.NoError(t, err)
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		return strings.Join(lines, "\n")
	}
	// Without the hot path's settings the plan made for the small table
	// scans it whole; with them it uses the primary key.
	require.Contains(t, plan(plain), "Seq Scan on tenants")
	hotPlan := plan(conn)
	require.Contains(t, hotPlan, "tenants_pkey")
	require.NotContains(t, hotPlan, "Seq Scan")
}

// The connections of a pool end spread over a fifth of their lifetime
// after it, not all in the same minute, unless the URL says otherwise.
func TestPoolConnectionsEndSpreadOut(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := dbtest.NewURL(t, false)
	for _, tc := range []struct {
		params           string
		lifetime, jitter time.Duration
	}{
		{"", time.Hour, 12 * time.Minute},
		{"pool_max_conn_lifetime=10m", 10 * time.Minute, 2 * time.Minute},
		{"pool_max_conn_lifetime_jitter=30s", time.Hour, 30 * time.Second},
	} {
		pool, err := db.Open(ctx, withParam(url, tc.params), 1)
		require.NoError(t, err)
		cfg := pool.Config()
		pool.Close()
		require.Equal(t, tc.lifetime, cfg.MaxConnLifetime, tc.params)
		require.Equal(t, tc.jitter, cfg.MaxConnLifetimeJitter, tc.params)
	}
}

// Statements run without parallel workers, whose start costs more than the
// bounded reads they would share, and without JIT compilation, which costs
// more than running them, unless the URL asks for them.
func TestPoolsRunStatementsWithoutParallelWorkersOrJIT(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := dbtest.NewURL(t, false)
	for _, tc := range []struct{ url, want string }{
		{url, "0 off"},
		{withParam(url, "max_parallel_workers_per_gather=1"), "1 off"},
		{withParam(url, "jit=on"), "0 on"},
	} {
		pool, err := db.Open(ctx, tc.url, 1)
		require.NoError(t, err)
		var workers, jit string
		err = pool.QueryRow(ctx, `SELECT current_setting('max_parallel_workers_per_gather'), current_setting('jit')`).
			Scan(&workers, &jit)
		pool.Close()
		require.NoError(t, err)
		got := workers + " " + jit
		require.Equal(t, tc.want, got, tc.url)
	}
}

// A process's connections name it in pg_stat_activity unless the URL names
// them.
func TestOpenAsNamesTheConnectionsUnlessTheURLDoes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := dbtest.NewURL(t, false)
	for _, tc := range []struct{ url, name, want string }{
		{url, "hookline-worker", "hookline-worker"},
		{withParam(url, "application_name=mine"), "hookline-worker", "mine"},
		{url, "", ""},
	} {
		pool, err := db.OpenAs(ctx, tc.url, 1, tc.name)
		require.NoError(t, err)
		var got string
		err = pool.QueryRow(ctx, `SELECT application_name FROM pg_stat_activity WHERE pid = pg_backend_pid()`).Scan(&got)
		pool.Close()
		require.NoError(t, err)
		require.Equal(t, tc.want, got, tc.url)
	}
}

// withParam returns url with the query parameter param ("key=value")
// added; url itself when param is empty.
func withParam(url, param string) string {
	switch {
	case param == "":
		return url
	case strings.Contains(url, "?"):
		return url + "&" + param
	}
	return url + "?" + param
}

// Under the worker's least-privilege role, which owns no table, the
// analyzer still analyzes, through analyze_table: run by the role itself,
// ANALYZE skips the table with a warning and no error.
func TestAnalyzeStaleUnderTheWorkersRole(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	tenantsConn(t, pool, 200, "role-", `SELECT pg_stat_force_next_flush()`)
	cfg := pool.Config().Copy()
	cfg.ConnConfig.RuntimeParams["role"] = "hookline_worker"
	worker, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	defer worker.Close()

	stale, err := db.AnalyzeStale(ctx, worker)
	require.NoError(t, err)
	require.Equal(t, []string{"public.tenants"}, stale)
	var tuples float64
	require.NoError(t, pool.QueryRow(ctx, `SELECT reltuples FROM pg_class WHERE oid = 'tenants'::regclass`).Scan(&tuples))
	require.EqualValues(t, 200, tuples, "analyzed")
	again, err := db.AnalyzeStale(ctx, worker)
	require.NoError(t, err)
	require.Empty(t, again)
}
