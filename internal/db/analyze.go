package db

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookline/hookline/internal/supervisor"
)

// The delivery path runs its statements as prepared statements, which
// Postgres plans once per connection from the statistics of the moment
// (a generic plan) instead of at every execution. A plan made while a
// table was small may scan it whole; it is replaced when the table's
// statistics change, that is when the table is analyzed. Postgres's
// autovacuum does that, but a deployment may run without it (and a
// benchmark or test database starts empty and grows fast), so hookline
// analyzes its own tables:
//
//   - those never analyzed (a new database, a new partition), as soon as
//     they hold rows: not while they are empty. Postgres plans a table
//     never analyzed as if it had ten pages, and one analyzed empty as
//     empty, where every join order and index costs the same: the worker's
//     load, planned on an empty database as the worker starts, then read
//     the whole deliveries table for each key (1,595 buffers to load one
//     delivery of 2,000 in its test, instead of 16) until the next
//     analysis;
//   - those changed by more than analyzeBase rows plus their size since
//     their last analysis (a young table that doubled), at once, so that
//     no plan is made for a table a fraction of its size;
//   - those changed by more than analyzeBase rows plus analyzeScale of
//     their size (autovacuum's default thresholds), once their last
//     analysis is analyzeAfter old (autovacuum's default cycle), so
//     that a table is not analyzed again every few seconds while it grows.
//
// An analysis reads up to 30,000 rows (300 times the statistics target),
// through a small ring of buffers: for a table of wide rows, most of its
// pages, at each analysis. Every 10 % of growth, a young table growing
// hundreds of rows a second would be read ten times over, in bursts that
// take a core for tens to hundreds of milliseconds from the deliveries.
//
// A partitioned table (the event log, its idempotency keys, the attempt
// log) has statistics of its own beside its partitions': the planner reads
// them for a join or a condition on the table as a whole (an event's type
// in a webhook's deliveries, say), and neither the partitions' analyses
// nor autovacuum make them. Its rows are counted in its partitions, so it
// is stale when their live rows differ from the count of its last analysis
// by the same thresholds; and since analyzing it analyzes every partition
// again (Postgres 15 has no ANALYZE ONLY), the wait for the ten-percent
// one is analyzeParentAfter. Stale partitioned tables go first, so that
// the partitions their analyses cover are not analyzed twice.
const (
	analyzeBase  = 50
	analyzeScale = 0.1
	analyzeAfter = time.Minute
	// analyzeParentAfter is analyzeAfter for a partitioned table.
	analyzeParentAfter = 30 * analyzeAfter
	// AnalyzeEvery is how often RunAnalyzer looks for stale statistics.
	AnalyzeEvery = 5 * time.Second
)

// analyzeLock keeps two processes from analyzing at the same time: one
// is enough, and the other finds nothing stale afterwards.
const analyzeLock = 0x686c_616e_6c7a // "hlanlz"

const staleTablesSQL = `SELECT quote_ident(s.schemaname) || '.' || quote_ident(s.relname)
FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid
WHERE s.schemaname = current_schema() AND c.relkind = 'r'
  AND ((c.reltuples < 0 AND s.n_live_tup > 0)
       OR s.n_mod_since_analyze > $1 + c.reltuples
       OR (s.n_mod_since_analyze > $1 + $2 * c.reltuples
           AND coalesce(greatest(s.last_analyze, s.last_autoanalyze), '-infinity') < now() - make_interval(secs => $3)))
ORDER BY s.n_mod_since_analyze DESC`

// staleParentsSQL is staleTablesSQL for the partitioned tables of the
// current schema, whose changes are the difference between their
// partitions' live rows and their own count.
const staleParentsSQL = `SELECT quote_ident(n.nspname) || '.' || quote_ident(p.relname)
FROM pg_class p JOIN pg_namespace n ON n.oid = p.relnamespace
LEFT JOIN pg_stat_user_tables s ON s.relid = p.oid
CROSS JOIN LATERAL (
    SELECT coalesce(sum(ps.n_live_tup), 0) AS live
    FROM pg_inherits i JOIN pg_stat_user_tables ps ON ps.relid = i.inhrelid
    WHERE i.inhparent = p.oid
) c
WHERE n.nspname = current_schema() AND p.relkind = 'p'
  AND ((p.reltuples < 0 AND c.live > 0)
       OR (p.reltuples >= 0 AND abs(c.live - p.reltuples) > $1 + p.reltuples)
       OR (p.reltuples >= 0 AND abs(c.live - p.reltuples) > $1 + $2 * p.reltuples
           AND coalesce(greatest(s.last_analyze, s.last_autoanalyze), '-infinity') < now() - make_interval(secs => $3)))
ORDER BY abs(c.live - greatest(p.reltuples, 0)) DESC`

// analyzeSQL analyzes one table as the schema's owner: ANALYZE needs the
// table's owner, which no process role is (docs/SECURITY.md); run by a
// role directly, Postgres skips the table with a warning and no error.
const analyzeSQL = `SELECT analyze_table($1::regclass)`

// AnalyzeStale analyzes the tables of the current schema whose statistics
// are missing or stale (see analyzeAfter), partitioned tables first, and
// returns their names. When
// another process is analyzing it returns at once with none.
func AnalyzeStale(ctx context.Context, pool *pgxpool.Pool) ([]string, error) {
	return analyzeStale(ctx, pool, analyzeAfter)
}

// analyzeStale is AnalyzeStale with tables changed by more than
// analyzeScale analyzed again after, instead of analyzeAfter (and
// partitioned tables after as many times more as analyzeParentAfter is).
func analyzeStale(ctx context.Context, pool *pgxpool.Pool, after time.Duration) ([]string, error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("analyze: %w", err)
	}
	defer conn.Release()
	var locked bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, int64(analyzeLock)).Scan(&locked); err != nil {
		return nil, fmt.Errorf("analyze lock: %w", err)
	}
	if !locked {
		return nil, nil
	}
	defer func() {
		// A connection whose unlock failed is closed, and its lock with it.
		if _, err := conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, int64(analyzeLock)); err != nil {
			_ = conn.Conn().Close(context.WithoutCancel(ctx))
		}
	}()
	parentAfter := after * (analyzeParentAfter / analyzeAfter)
	var done []string
	for _, q := range []struct {
		sql   string
		after time.Duration
	}{{staleParentsSQL, parentAfter}, {staleTablesSQL, after}} {
		rows, err := conn.Query(ctx, q.sql, analyzeBase, analyzeScale, q.after.Seconds())
		if err != nil {
			return done, fmt.Errorf("find stale statistics: %w", err)
		}
		tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return done, fmt.Errorf("find stale statistics: %w", err)
		}
		for _, t := range tables {
			if _, err := conn.Exec(ctx, analyzeSQL, t); err != nil {
				return done, fmt.Errorf("analyze %s: %w", t, err)
			}
			done = append(done, t)
		}
	}
	return done, nil
}

// RunAnalyzer calls AnalyzeStale at once and then every AnalyzeEvery until
// ctx ends.
func RunAnalyzer(ctx context.Context, pool *pgxpool.Pool, log *slog.Logger) error {
	return supervisor.Every(ctx, 0, AnalyzeEvery, func(ctx context.Context) {
		tables, err := AnalyzeStale(ctx, pool)
		switch {
		case err != nil && ctx.Err() == nil:
			log.Warn("table statistics not refreshed", "error", err)
		case len(tables) > 0:
			log.Debug("table statistics refreshed", "tables", tables)
		}
	})
}
