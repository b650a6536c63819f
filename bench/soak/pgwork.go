package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookline/hookline/bench/internal/report"
)

// Where Postgres's CPU goes: each Postgres process is read from /proc and
// named by what pg_stat_activity says it is, a client of the run's
// database by its application_name (hookline-api, hookline-worker,
// hookline-dlq), a background process by its type; and, when the server
// loads pg_stat_statements, what each statement of the run's database
// took.

// pgActivitySQL names every Postgres process of the server: a client of
// this database by its application name, another client as such, a
// background process by its type.
const pgActivitySQL = `
SELECT pid,
       CASE WHEN backend_type <> 'client backend' THEN backend_type
            WHEN datname = current_database() AND application_name LIKE 'hookline-%' THEN application_name
            WHEN datname = current_database() THEN 'other clients of the database'
            ELSE 'clients of other databases' END
FROM pg_stat_activity`

// pgServerSQL reads the server's checkpoints and WAL so far, whoever
// caused them.
const pgServerSQL = `SELECT b.checkpoints_timed, b.checkpoints_req, w.wal_bytes::bigint FROM pg_stat_bgwriter b, pg_stat_wal w`

// pgStatementsSQL reads what each statement of this database took so far.
const pgStatementsSQL = `
SELECT s.queryid, sum(s.calls)::bigint, sum(s.total_exec_time), sum(s.shared_blks_hit + s.shared_blks_read)::bigint,
       sum(s.shared_blks_read)::bigint, min(s.query)
FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
WHERE d.datname = current_database() AND s.toplevel
GROUP BY s.queryid`

// statementUse is a statement's counters at a moment.
type statementUse struct {
	calls  int64
	execMs float64
	blocks int64 // shared buffers hit or read
	reads  int64 // shared buffers read (from the OS)
	text   string
}

// pgSample is a moment's reading: the CPU ticks of each Postgres process
// with its part, and (nil unless the server loads pg_stat_statements) the
// statements' counters.
type pgSample struct {
	procs      map[int]pgProc
	statements map[int64]statementUse
	server     pgServer
}

// pgServer is the server's checkpoints (timed, and requested: by the
// WAL's size, or by a command such as CREATE DATABASE) and WAL bytes
// written, counted since the statistics were reset.
type pgServer struct {
	timed, requested, walBytes int64
}

// serverBetween returns the checkpoints between a and b, timed and
// requested, and the WAL bytes written per delivery of the n that arrived
// meanwhile (0 for none).
func serverBetween(a, b pgSample, n int64) (timed, requested int64, walPerDelivery float64) {
	timed, requested = b.server.timed-a.server.timed, b.server.requested-a.server.requested
	if n > 0 {
		walPerDelivery = float64(b.server.walBytes-a.server.walBytes) / float64(n)
	}
	return timed, requested, walPerDelivery
}

type pgProc struct {
	part  string
	ticks int64
}

// pgReader reads pgSamples from the run's database.
type pgReader struct {
	url string
	// statements is whether pg_stat_statements answers in the database.
	statements bool
	why        string // why not, when it does not
}

// newPGReader makes the extension's view in the database when the server
// loads pg_stat_statements (shared_preload_libraries), and resets its
// counters; without it the statements are not read.
func newPGReader(ctx context.Context, url string) (*pgReader, error) {
	r := &pgReader{url: url}
	conn, err := connect(ctx, url)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.Background())
	var loaded bool
	if err := conn.QueryRow(ctx, `SELECT 'pg_stat_statements' = ANY (string_to_array(current_setting('shared_preload_libraries'), ', '))`).Scan(&loaded); err != nil {
		return nil, fmt.Errorf("read shared_preload_libraries: %w", err)
	}
	if !loaded {
		r.why = "the server does not load pg_stat_statements (shared_preload_libraries)"
		return r, nil
	}
	if _, err := conn.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`); err != nil {
		r.why = "CREATE EXTENSION pg_stat_statements: " + err.Error()
		return r, nil
	}
	if _, err := conn.Exec(ctx, `SELECT pg_stat_statements_reset(0, (SELECT oid FROM pg_database WHERE datname = current_database()), 0)`); err != nil {
		return nil, fmt.Errorf("reset pg_stat_statements: %w", err)
	}
	r.statements = true
	return r, nil
}

func connect(ctx context.Context, url string) (*pgx.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("connect to postgres: %w", err)
	}
	return conn, nil
}

// sample reads every Postgres process's part and CPU time, and the
// statements' counters.
func (r *pgReader) sample(ctx context.Context) (pgSample, error) {
	s := pgSample{procs: map[int]pgProc{}}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	conn, err := connect(ctx, r.url)
	if err != nil {
		return s, err
	}
	defer conn.Close(context.Background())
	var pid int
	var part string
	rows, _ := conn.Query(ctx, pgActivitySQL)
	if _, err := pgx.ForEachRow(rows, []any{&pid, &part}, func() error {
		s.procs[pid] = pgProc{part: part, ticks: report.ProcTicks(pid)}
		return nil
	}); err != nil {
		return s, fmt.Errorf("read pg_stat_activity: %w", err)
	}
	if err := conn.QueryRow(ctx, pgServerSQL).Scan(&s.server.timed, &s.server.requested, &s.server.walBytes); err != nil {
		return s, fmt.Errorf("read pg_stat_bgwriter and pg_stat_wal: %w", err)
	}
	if !r.statements {
		return s, nil
	}
	s.statements = map[int64]statementUse{}
	var id int64
	var u statementUse
	rows, _ = conn.Query(ctx, pgStatementsSQL)
	if _, err := pgx.ForEachRow(rows, []any{&id, &u.calls, &u.execMs, &u.blocks, &u.reads, &u.text}, func() error {
		s.statements[id] = u
		return nil
	}); err != nil {
		return s, fmt.Errorf("read pg_stat_statements: %w", err)
	}
	return s, nil
}

// pgUnattributed is the part of Postgres's CPU no process read in both
// samples accounts for: the postmaster, and processes that ended.
const pgUnattributed = "postmaster and ended processes"

// pgParts returns the CPU time each part used between a and b: a process
// in both, what it used meanwhile; one that started meanwhile, all it
// used. total is every Postgres process's time meanwhile (report's
// postgres group, which counts ended processes in the postmaster's
// children's time); what no process accounts for is pgUnattributed.
func pgParts(a, b pgSample, total time.Duration) map[string]time.Duration {
	parts := map[string]time.Duration{}
	var sum time.Duration
	for pid, p := range b.procs {
		used := p.ticks
		if before, ok := a.procs[pid]; ok && before.part == p.part {
			used -= before.ticks
		}
		d := report.TicksDuration(max(used, 0))
		parts[p.part] += d
		sum += d
	}
	parts[pgUnattributed] = max(total-sum, 0)
	return parts
}

// statementDelta is what a statement took between two samples.
type statementDelta struct {
	id     int64
	calls  int64
	execMs float64
	blocks int64
	reads  int64
	text   string
}

// statementsBetween returns what each statement took between a and b.
func statementsBetween(a, b pgSample) map[int64]statementDelta {
	out := map[int64]statementDelta{}
	for id, u := range b.statements {
		before := a.statements[id]
		d := statementDelta{id: id, calls: u.calls - before.calls, execMs: u.execMs - before.execMs,
			blocks: u.blocks - before.blocks, reads: u.reads - before.reads, text: u.text}
		if d.calls > 0 {
			out[id] = d
		}
	}
	return out
}

// topStatements returns the ids of the n statements that took the most
// execution time over all windows together, most first.
func topStatements(windows []map[int64]statementDelta, n int) []int64 {
	total := map[int64]float64{}
	for _, w := range windows {
		for id, d := range w {
			total[id] += d.execMs
		}
	}
	ids := slices.Collect(maps.Keys(total))
	slices.SortFunc(ids, func(x, y int64) int {
		if c := compareFloat(total[y], total[x]); c != 0 {
			return c
		}
		return compareInt(x, y)
	})
	return ids[:min(n, len(ids))]
}

func compareFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func compareInt(a, b int64) int { return compareFloat(float64(a), float64(b)) }

// statementText is a statement's text on one line, cut to n characters,
// its pipes escaped for a Markdown table's cell.
func statementText(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		s = string(r[:n]) + "..."
	}
	return strings.ReplaceAll(s, "|", `\|`)
}
