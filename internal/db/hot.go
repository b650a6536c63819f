package db

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// HotPool describes a second pool on a pool's database, for the few
// statements of a hot path (the api's publish commit, the worker's load
// and record of its deliveries).
//
// A new connection costs Postgres a process, and its first execution of
// each statement loads the catalog entries the statement names and plans
// it: 7 ms for the publish statement on an idle machine, 50 to 100 ms
// each while the machine is busy. A pool that opens its connections when
// load arrives pays that for several connections at once, while requests
// wait for them: in the first half second of a load at 500 events/s, on a
// fresh start or after a quiet period, publishes waited up to 150-420 ms
// and deliveries up to 200-480 ms. A hot pool opens Ready connections as
// it is created, in the background, keeps them open, and has every new
// connection run Prepare before its first use.
type HotPool struct {
	// MaxConns bounds the pool.
	MaxConns int32
	// Ready is how many connections the pool opens at once and keeps.
	Ready int32
	// Prepare runs each of the hot path's statements once on a new
	// connection, with nothing to read or write (empty arrays of keys).
	// Its failure is logged, and the connection used all the same: the
	// statements are then prepared at their first use, as in any pool.
	Prepare func(context.Context, *pgx.Conn) error
	// GenericPlans makes the pool's prepared statements always run from
	// their generic plan (plan_cache_mode = force_generic_plan): planned
	// once per connection, and again only after the tables' statistics
	// change (see RunAnalyzer). It is for statements that find their rows
	// by primary key, whose plans do not depend on their parameters; left
	// to choose, Postgres plans those again at every execution because a
	// plan for a short array of keys looks cheaper than the generic one.
	//
	// Such connections also plan without sequential scans wherever an
	// index serves (enable_seqscan = off). A generic plan made while a
	// table is young (a new deployment, a new partition) would otherwise
	// scan the table whole, rightly for its few rows then, and keep doing
	// so while the table grows until the next analysis replaces it: in a
	// benchmark from an empty database, the first seconds' worker load
	// cost 0.4 to 1.7 ms per statement instead of 0.05 to 0.15 ms. A
	// lookup by primary key is never slower through its index by more
	// than a few microseconds, so these plans are right at every table
	// size.
	GenericPlans bool
	// IndexScans makes the pool's connections plan without sequential
	// scans wherever an index serves (enable_seqscan = off), as
	// GenericPlans does, without forcing generic plans on the pool's own
	// statements. Postgres plans the foreign-key checks of the rows a
	// statement inserts once per connection, like a prepared statement,
	// and keeps that plan until the referenced table is next analyzed: one
	// made while the table was young scans it whole while it grows. In a
	// benchmark from an empty database at 500 events/s, the check of each
	// new delivery's event cost 112 to 153 us on average instead of about
	// 10.
	IndexScans bool
}

// OpenHot returns the pool h describes on pool's database, with pool's
// connection settings otherwise. Close it before pool.
func OpenHot(pool *pgxpool.Pool, h HotPool, log *slog.Logger) (*pgxpool.Pool, error) {
	cfg := pool.Config()
	cfg.MaxConns = h.MaxConns
	cfg.MinConns = min(h.Ready, h.MaxConns)
	if h.GenericPlans {
		cfg.ConnConfig.RuntimeParams["plan_cache_mode"] = "force_generic_plan"
	}
	if h.GenericPlans || h.IndexScans {
		cfg.ConnConfig.RuntimeParams["enable_seqscan"] = "off"
	}
	if h.Prepare != nil {
		after := cfg.AfterConnect
		cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
			if after != nil {
				if err := after(ctx, c); err != nil {
					return err
				}
			}
			err := h.Prepare(ctx, c)
			if err != nil && c.IsClosed() {
				return fmt.Errorf("prepare hot-path statements: %w", err)
			}
			if err != nil && log != nil {
				log.Warn("hot-path statements not prepared on a new connection", "error", err)
			}
			return nil
		}
	}
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		return nil, fmt.Errorf("hot pool: %w", err)
	}
	return p, nil
}

// Querier runs a statement that returns rows: a pool, a connection or a
// transaction. The hot paths' statements take one, so that a hot pool can
// run them on each new connection (HotPool.Prepare).
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}
