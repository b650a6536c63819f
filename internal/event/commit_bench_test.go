package event

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookline/hookline/internal/db/dbtest"
	"github.com/hookline/hookline/internal/history"
)

// BenchmarkPublishCommit is what one group commit costs Postgres: the
// publish statement and its commit for 1, 5 and 25 events of 1 KiB, each
// with one delivery, on one connection. It reports the CPU time of that
// connection's Postgres process (user and system, from /proc: Postgres
// must run on this machine) per commit and per event. What does not grow
// with the events is the part a commit window shares out
// (api.commit_window, docs/BENCHMARKS.md).
//
//	go test -run '^$' -bench PublishCommit ./internal/event/
func BenchmarkPublishCommit(b *testing.B) {
	cb := newCommitBench(b)
	commit := func(events int) {
		if err := cb.publish(events, false); err != nil {
			b.Fatal(err)
		}
	}
	for _, events := range []int{1, 5, 25} {
		b.Run(fmt.Sprintf("events=%d", events), func(b *testing.B) {
			for range 100 {
				commit(events) // the plans cached, as on a running api
			}
			before, _ := backendCPU(cb.pid)
			for b.Loop() {
				commit(events)
			}
			after, _ := backendCPU(cb.pid)
			us := float64((after - before).Microseconds())
			b.ReportMetric(us/float64(b.N), "pg-us/commit")
			b.ReportMetric(us/float64(b.N*events), "pg-us/event")
		})
	}
}

// commitBench is a tenant with one webhook subscribed to every event, and
// a connection of its own to publish on, whose Postgres process's CPU is
// read from /proc.
type commitBench struct {
	ctx    context.Context
	pool   *pgxpool.Pool
	tenant uuid.UUID
	conn   *pgxpool.Conn
	pid    int
	c      *committer
	data   json.RawMessage
}

// newCommitBench makes a commitBench on a database of its own; it skips b
// when Postgres's processes are not readable here.
func newCommitBench(b *testing.B) *commitBench {
	ctx := context.Background()
	pool := dbtest.New(b)
	cb := &commitBench{ctx: ctx, pool: pool, tenant: uuid.New(),
		data: json.RawMessage(`{"pad":"` + strings.Repeat("x", 1000) + `"}`)}
	if _, err := pool.Exec(ctx, `INSERT INTO tenants (id, name, rate_limit_rpm, rate_limit_burst, publish_rps, publish_burst)
		VALUES ($1, 'bench', 1000, 100, 1000, 100)`, cb.tenant); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO webhooks (id, tenant_id, url, events, secret, retry_config, circuit_breaker_config, rate_limit)
		VALUES ($1, $2, 'https://example.com/hook', '{*}', 'unused', '{}', '{}', '{}')`, uuid.New(), cb.tenant); err != nil {
		b.Fatal(err)
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(conn.Release)
	cb.conn = conn
	if err := conn.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&cb.pid); err != nil {
		b.Fatal(err)
	}
	if _, err := backendCPU(cb.pid); err != nil {
		b.Skipf("Postgres's process is not readable here: %v", err)
	}
	log := slog.New(slog.DiscardHandler)
	cb.c = &committer{pool: pool, hot: pool, tally: history.NewTally(pool, log), log: log}
	return cb
}

// publish commits n events of 1 KiB on the connection, each with a
// producer's key when keyed.
func (cb *commitBench) publish(n int, keyed bool) error {
	view := &filterView{tenantID: cb.tenant}
	batch := make([]*pending, n)
	for i := range batch {
		r := Request{EventType: "bench.created", Data: cb.data, Priority: "normal"}
		if keyed {
			r.IdempotencyKey = uuid.NewString()
		}
		batch[i] = newPending(cb.tenant, r, make([]byte, 32), time.Now())
		batch[i].view = view
	}
	return cb.c.exec(cb.ctx, cb.conn.Conn(), batch)
}

// BenchmarkPublishCommitParts splits what a group commit costs Postgres
// by measuring, on one connection and interleaved (each iteration runs
// every part once, so that the machine's drift falls on all alike), for
// 1, 3 and 6 events of 1 KiB:
//
//   - floor: as many rows written to a table with a primary key only, and
//     the commit: what any durable write costs;
//   - events: the event log's rows alone (events: partitioned, five
//     indexes, a foreign key);
//   - events+narrow: those and one row per delivery in a narrow table of
//     two indexes, no constraint and no trigger: what the publish would
//     write if deliveries kept their unfinished state apart from their
//     history;
//   - events+deliveries: those and the rows of deliveries, by a bare
//     statement;
//   - publish: the publish statement (filter views, the fan-out's rows
//     returned) for events published without a key;
//   - publish-keyed: the same for events each with a producer's key,
//     which the statement stores and checks (event_keys).
//
// Each is reported in microseconds of the Postgres process's CPU per
// commit (a metric per part).
//
//	go test -run '^$' -bench PublishCommitParts ./internal/event/
func BenchmarkPublishCommitParts(b *testing.B) {
	cb := newCommitBench(b)
	ctx, conn := cb.ctx, cb.conn
	if _, err := cb.pool.Exec(ctx, `CREATE TABLE bench_floor (id uuid PRIMARY KEY, data text);
		CREATE TABLE bench_narrow (id uuid PRIMARY KEY, tenant_id uuid NOT NULL, event_id uuid NOT NULL, webhook_id uuid NOT NULL,
			priority text NOT NULL, status text NOT NULL DEFAULT 'pending', attempt_count int NOT NULL DEFAULT 0,
			next_attempt_at timestamptz, enqueued_at timestamptz, created_at timestamptz NOT NULL DEFAULT now());
		CREATE INDEX ON bench_narrow (webhook_id, id);
		CREATE INDEX ON bench_narrow (coalesce(next_attempt_at, created_at)) WHERE enqueued_at IS NULL`); err != nil {
		b.Fatal(err)
	}
	// As the publish's batch does (history.MarkTallied), and planned once:
	// the parts' row counts are parameters.
	if _, err := conn.Exec(ctx, `SET hookline.rollups = 'process'; SET plan_cache_mode = force_generic_plan`); err != nil {
		b.Fatal(err)
	}
	const events = `INSERT INTO events (id, tenant_id, event_type, source, idempotency_key, request_hash, priority, data, correlation_id)
    SELECT uuidv7(), $1, 'bench.created', 'bench', gen_random_uuid()::text, '\x00', 'normal', $2::json, 'c' FROM generate_series(1, $3)`
	parts := []struct{ name, sql string }{
		{"floor", `INSERT INTO bench_floor SELECT gen_random_uuid(), $2 || $1::text FROM generate_series(1, $3)`},
		{"events", events},
		{"events+narrow", `WITH e AS (` + events + ` RETURNING id, tenant_id, priority)
    INSERT INTO bench_narrow (id, tenant_id, event_id, webhook_id, priority)
    SELECT uuidv7(), e.tenant_id, e.id, w.id, e.priority FROM e JOIN webhooks w ON w.tenant_id = e.tenant_id`},
		{"events+deliveries", `WITH e AS (` + events + ` RETURNING id, tenant_id, priority)
    INSERT INTO deliveries (id, tenant_id, event_id, webhook_id, priority)
    SELECT uuidv7(), e.tenant_id, e.id, w.id, e.priority FROM e JOIN webhooks w ON w.tenant_id = e.tenant_id`},
	}
	// timed runs f and adds the CPU it cost the connection's process to
	// *total.
	timed := func(total *time.Duration, f func() error) {
		before, _ := backendCPU(cb.pid)
		if err := f(); err != nil {
			b.Fatal(err)
		}
		after, _ := backendCPU(cb.pid)
		*total += after - before
	}
	for _, n := range []int{1, 3, 6} {
		b.Run(fmt.Sprintf("events=%d", n), func(b *testing.B) {
			totals := make([]time.Duration, len(parts)+2)
			round := func() {
				for i, p := range parts {
					timed(&totals[i], func() error { _, err := conn.Exec(ctx, p.sql, cb.tenant, string(cb.data), n); return err })
				}
				timed(&totals[len(parts)], func() error { return cb.publish(n, false) })
				timed(&totals[len(parts)+1], func() error { return cb.publish(n, true) })
			}
			for range 100 {
				round() // the plans cached, as on a running api
			}
			clear(totals)
			for b.Loop() {
				round()
			}
			for i, p := range parts {
				b.ReportMetric(float64(totals[i].Microseconds())/float64(b.N), p.name+"-us/commit")
			}
			b.ReportMetric(float64(totals[len(parts)].Microseconds())/float64(b.N), "publish-us/commit")
			b.ReportMetric(float64(totals[len(parts)+1].Microseconds())/float64(b.N), "publish-keyed-us/commit")
		})
	}
}

// backendCPU is the CPU time process pid has used, in nanoseconds: the
// first field of /proc/<pid>/schedstat (the time it ran on a CPU, user
// and system; /proc/<pid>/stat counts it in ticks of 10 ms).
func backendCPU(pid int) (time.Duration, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/schedstat", pid))
	if err != nil {
		return 0, err
	}
	fields := strings.Fields(string(raw))
	if len(fields) < 1 {
		return 0, fmt.Errorf("/proc/%d/schedstat: empty", pid)
	}
	ns, err := strconv.ParseInt(fields[0], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("/proc/%d/schedstat: %w", pid, err)
	}
	return time.Duration(ns), nil
}
