// Package dbtest gives each test its own Postgres database, cloned from a
// migrated template, and drops it when the test ends. Tests using it can run
// in parallel, in one package or many.
package dbtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookline/hookline/internal/db"
)

// AdminURL is the maintenance database used to create and drop test
// databases: $TEST_DATABASE_URL, or the local postgres database.
func AdminURL() string {
	if u := os.Getenv("TEST_DATABASE_URL"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
}

// New returns a pool on a fresh, fully migrated database that is dropped
// when t ends.
func New(t testing.TB) *pgxpool.Pool {
	t.Helper()
	url := NewURL(t, true)
	pool, err := db.Open(context.Background(), url, 8)
	if err != nil {
		t.Fatalf("open test database: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// NewURL creates a fresh database (migrated when migrated is true, else
// empty) that is dropped when t ends, and returns its URL.
func NewURL(t testing.TB, migrated bool) string {
	t.Helper()
	url, dropFn, err := Create(migrated)
	if err != nil {
		t.Fatalf("test database: %v", err)
	}
	t.Cleanup(dropFn)
	return url
}

// Create makes a fresh database and returns its URL and the function that
// drops it; for TestMain and examples, which have no testing.TB.
func Create(migrated bool) (string, func(), error) {
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, AdminURL())
	if err != nil {
		return "", nil, fmt.Errorf("connect to postgres at %s: %w (is it running?)", AdminURL(), err)
	}
	defer admin.Close(ctx)
	name := "hookline_test_" + randomHex(6)
	stmt := "CREATE DATABASE " + name
	if migrated {
		tpl, err := ensureTemplate(ctx, admin)
		if err != nil {
			return "", nil, fmt.Errorf("template database: %w", err)
		}
		stmt += " TEMPLATE " + tpl
	}
	if _, err := admin.Exec(ctx, stmt); err != nil {
		return "", nil, fmt.Errorf("create test database: %w", err)
	}
	url := withDatabase(AdminURL(), name)
	if migrated {
		// The template's partitions were made the day it was built; make
		// today's and the next ones exist here.
		conn, err := pgx.Connect(ctx, url)
		if err == nil {
			_, err = conn.Exec(ctx, `SELECT ensure_attempt_partitions(14), ensure_event_partitions(14)`)
			conn.Close(ctx)
		}
		if err != nil {
			drop(name)
			return "", nil, fmt.Errorf("partitions of the test database: %w", err)
		}
	}
	return url, func() { drop(name) }, nil
}

func drop(name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, AdminURL())
	if err != nil {
		return
	}
	defer admin.Close(ctx)
	_, _ = admin.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
}

// ensureTemplate creates the migrated template database once per schema
// version, under an advisory lock so that parallel test binaries agree.
func ensureTemplate(ctx context.Context, admin *pgx.Conn) (string, error) {
	name := "hookline_tpl_" + db.SchemaFingerprint()
	if _, err := admin.Exec(ctx, "SELECT pg_advisory_lock(727274)"); err != nil {
		return "", err
	}
	defer admin.Exec(ctx, "SELECT pg_advisory_unlock(727274)") //nolint:errcheck
	var exists bool
	if err := admin.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		return "", err
	}
	if exists {
		return name, nil
	}
	// Templates of older schema versions are of no further use. They are
	// dropped only when nothing uses them: another checkout with another
	// schema may be running its tests against one right now.
	rows, err := admin.Query(ctx, "SELECT datname FROM pg_database WHERE datname LIKE 'hookline\\_tpl\\_%'")
	if err != nil {
		return "", err
	}
	old, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return "", err
	}
	for _, o := range old {
		_, _ = admin.Exec(ctx, "DROP DATABASE IF EXISTS "+o)
	}
	building := name + "_building"
	_, _ = admin.Exec(ctx, "DROP DATABASE IF EXISTS "+building+" WITH (FORCE)")
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+building); err != nil {
		return "", err
	}
	pool, err := db.Open(ctx, withDatabase(AdminURL(), building), 2)
	if err != nil {
		return "", err
	}
	_, err = db.Migrate(ctx, pool)
	pool.Close()
	if err != nil {
		return "", fmt.Errorf("migrate template: %w", err)
	}
	if _, err := admin.Exec(ctx, "ALTER DATABASE "+building+" RENAME TO "+name); err != nil {
		return "", err
	}
	return name, nil
}

func withDatabase(raw, name string) string {
	u, err := url.Parse(raw)
	if err != nil {
		panic(fmt.Sprintf("bad TEST_DATABASE_URL: %v", err))
	}
	u.Path = "/" + name
	return u.String()
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Prepared reports whether conn's Postgres session holds sql as a prepared
// statement (pgx prepares its statements by the extended protocol, which
// lists them under their text).
func Prepared(t testing.TB, conn *pgxpool.Conn, sql string) bool {
	t.Helper()
	var n int
	if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM pg_prepared_statements WHERE statement = $1`, sql).Scan(&n); err != nil {
		t.Fatalf("list prepared statements: %v", err)
	}
	return n > 0
}

// PagesRead is the number of pages sql read (EXPLAIN ANALYZE's shared
// buffers hit and read): its plan's top node counts its children's.
func PagesRead(t testing.TB, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var plan []struct{ Plan planNode }
	var text string
	if err := pool.QueryRow(context.Background(), `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) `+sql, args...).Scan(&text); err != nil {
		t.Fatalf("explain: %v", err)
	}
	if err := json.Unmarshal([]byte(text), &plan); err != nil || len(plan) != 1 {
		t.Fatalf("explain: %d plans, %v", len(plan), err)
	}
	return plan[0].Plan.Hit + plan[0].Plan.Read
}

// Seeded is what Seed stored: a tenant, its webhooks and one event of it.
type Seeded struct {
	Tenant   uuid.UUID
	Webhooks []uuid.UUID
	Event    uuid.UUID
}

// Seed stores a tenant with the given number of webhooks (to
// http://example.com/, for every event type) and one event, the rows a
// delivery refers to, for tests that write deliveries directly.
func Seed(t testing.TB, pool *pgxpool.Pool, webhooks int) Seeded {
	t.Helper()
	ctx := context.Background()
	s := Seeded{Tenant: uuid.New(), Event: uuid.New()}
	exec := func(sql string, args ...any) {
		if _, err := pool.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("seed: %v", err)
		}
	}
	exec(`INSERT INTO tenants (id, name, rate_limit_rpm, rate_limit_burst, publish_rps, publish_burst) VALUES ($1, 't', 60, 60, 10, 10)`, s.Tenant)
	for range webhooks {
		id := uuid.New()
		exec(`INSERT INTO webhooks (id, tenant_id, url, events, secret, retry_config, circuit_breaker_config, rate_limit)
VALUES ($1, $2, 'http://example.com/', '{*}', 's', '{}', '{}', '{}')`, id, s.Tenant)
		s.Webhooks = append(s.Webhooks, id)
	}
	exec(`INSERT INTO events (id, tenant_id, event_type, idempotency_key, request_hash, priority, data)
VALUES ($1, $2, 'a', 'k', '\x00', 'normal', '{}')`, s.Event, s.Tenant)
	return s
}

// FinishedBehind writes n deliveries of the seeded event to webhook, an
// hour old, as the service does: pending and then succeeded, so that
// every partial index of unfinished deliveries keeps a dead entry for
// each until a vacuum. It then analyzes the table, whose statistics show
// almost no unfinished delivery: the state of a busy database between
// vacuums.
func FinishedBehind(t testing.TB, pool *pgxpool.Pool, s Seeded, webhook uuid.UUID, n int) {
	t.Helper()
	ctx := context.Background()
	for _, sql := range []string{
		`INSERT INTO deliveries (id, tenant_id, event_id, webhook_id, priority, created_at)
SELECT uuidv7(), $1, $2, $3, 'normal', now() - interval '1 hour' FROM generate_series(1, $4::int)`,
		`UPDATE deliveries SET status = 'succeeded', attempt_count = 1, enqueued_at = now(), completed_at = now()
WHERE webhook_id = $3 AND status = 'pending' AND $1::uuid IS NOT NULL AND $2::uuid IS NOT NULL AND $4::int > 0`,
		`ANALYZE deliveries`,
	} {
		args := []any{s.Tenant, s.Event, webhook, n}
		if strings.HasPrefix(sql, "ANALYZE") {
			args = nil
		}
		if _, err := pool.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("finished deliveries: %v", err)
		}
	}
}

// Plans explains sql, with the given arguments (SQL literals), as a
// prepared statement run from its generic plan and from a custom plan, in
// a transaction rolled back after each. It returns each plan's nodes (a
// line each: "Index Scan deliveries_pkey", "Seq Scan webhooks") and the
// pages it read (shared buffers hit and read).
func Plans(t testing.TB, pool *pgxpool.Pool, sql string, args ...string) (plans []string, pages []int) {
	t.Helper()
	ctx := context.Background()
	for _, mode := range []string{"force_generic_plan", "force_custom_plan"} {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatalf("plans: %v", err)
		}
		_, err = tx.Exec(ctx, `SET LOCAL plan_cache_mode = `+mode)
		if err == nil {
			_, err = tx.Exec(ctx, `PREPARE planned AS `+sql)
		}
		var text string
		if err == nil {
			call := `EXECUTE planned`
			if len(args) > 0 {
				call += `(` + strings.Join(args, ", ") + `)`
			}
			err = tx.QueryRow(ctx, `EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, FORMAT JSON) `+call).Scan(&text)
		}
		if err == nil {
			_, err = tx.Exec(ctx, `DEALLOCATE planned`)
		}
		_ = tx.Rollback(ctx)
		if err != nil {
			t.Fatalf("plans (%s): %v", mode, err)
		}
		var plan []struct{ Plan planNode }
		if err := json.Unmarshal([]byte(text), &plan); err != nil || len(plan) != 1 {
			t.Fatalf("plans: %d plans, %v", len(plan), err)
		}
		roots, err := indexRoots(ctx, pool, plan[0].Plan.indexes(nil))
		if err != nil {
			t.Fatalf("plans: %v", err)
		}
		plans = append(plans, mode+":\n"+strings.Join(plan[0].Plan.nodes(nil, roots), "\n"))
		pages = append(pages, plan[0].Plan.Hit+plan[0].Plan.Read)
	}
	return plans, pages
}

// planNode is a node of EXPLAIN's JSON output.
type planNode struct {
	Type     string     `json:"Node Type"`
	Index    string     `json:"Index Name"`
	Relation string     `json:"Relation Name"`
	Hit      int        `json:"Shared Hit Blocks"`
	Read     int        `json:"Shared Read Blocks"`
	Plans    []planNode `json:"Plans"`
}

// nodes appends a line per node of the tree under n: its type, and the
// index or the relation it reads. An index of a partition is named by the
// partitioned table's index it is part of (roots): "Index Scan
// deliveries_outbox_idx (deliveries_20261130_coalesce_idx)".
func (n planNode) nodes(out []string, roots map[string]string) []string {
	line := n.Type
	switch {
	case n.Index != "" && roots[n.Index] != "" && roots[n.Index] != n.Index:
		line += " " + roots[n.Index] + " (" + n.Index + ")"
	case n.Index != "":
		line += " " + n.Index
	case n.Relation != "":
		line += " " + n.Relation
	}
	out = append(out, fmt.Sprintf("%s (%d pages)", line, n.Hit+n.Read))
	for _, c := range n.Plans {
		out = c.nodes(out, roots)
	}
	return out
}

// indexes appends the names of the indexes the tree under n reads.
func (n planNode) indexes(out []string) []string {
	if n.Index != "" {
		out = append(out, n.Index)
	}
	for _, c := range n.Plans {
		out = c.indexes(out)
	}
	return out
}

// indexRoots maps each of the named indexes of the current schema that
// is part of a partitioned table's index to that index.
func indexRoots(ctx context.Context, pool *pgxpool.Pool, names []string) (map[string]string, error) {
	rows, err := pool.Query(ctx, `SELECT c.relname, r.relname FROM pg_class c
JOIN pg_class r ON r.oid = pg_partition_root(c.oid)
WHERE c.relname = ANY($1) AND c.relnamespace = current_schema()::regnamespace`, names)
	if err != nil {
		return nil, fmt.Errorf("index roots: %w", err)
	}
	roots := map[string]string{}
	for rows.Next() {
		var name, root string
		if err := rows.Scan(&name, &root); err != nil {
			return nil, fmt.Errorf("index roots: %w", err)
		}
		roots[name] = root
	}
	return roots, rows.Err()
}

// ReadsIndex checks, with Plans, that sql reads index and not
// deliveries_unfinished_idx from its generic plan and from a custom one,
// and, when maxPages > 0, that each reads fewer than maxPages pages.
func ReadsIndex(t testing.TB, pool *pgxpool.Pool, index string, maxPages int, sql string, args ...string) {
	t.Helper()
	plans, pages := Plans(t, pool, sql, args...)
	for i, plan := range plans {
		if !strings.Contains(plan, index) || strings.Contains(plan, "deliveries_unfinished_idx") {
			t.Errorf("want %s and not deliveries_unfinished_idx in the plan of %s\n%s", index, sql, plan)
		}
		if maxPages > 0 && pages[i] >= maxPages {
			t.Errorf("%d pages read, want fewer than %d, by %s\n%s", pages[i], maxPages, sql, plan)
		}
	}
}
