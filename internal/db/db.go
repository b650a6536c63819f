// Package db owns the Postgres connection pool and the embedded schema
// migrations of hookline.
package db

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	neturl "net/url"
	"strconv"
	"strings"
	"time"

	"github.com/golang-migrate/migrate/v4"
	pgxmigrate "github.com/golang-migrate/migrate/v4/database/pgx/v5"
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/hookline/hookline/internal/supervisor"
)

//go:embed migrations/*.sql
var migrations embed.FS

// lifetimeJitterShare spreads the ends of a pool's connections: pgx closes
// a connection after its lifetime (an hour unless the URL says otherwise,
// pool_max_conn_lifetime) plus a random share of it up to a fifth, unless
// the URL sets pool_max_conn_lifetime_jitter. Without it every connection
// a process opened as it started ended in the same minute an hour later,
// the hot pools' prepared ones among them, and their replacements, opened
// and prepared at once under load, held deliveries up: in bench/soak at
// 1,700 events/s with a one-minute lifetime, receipt p99 reached 195 and
// 459 ms in the minutes they ended, against 63-87 ms with a spread.
const lifetimeJitterShare = 5

// Open connects a pool to the database at url and checks that it answers.
func Open(ctx context.Context, url string, maxConns int32) (*pgxpool.Pool, error) {
	return OpenAs(ctx, url, maxConns, "")
}

// OpenAs is Open for a pool whose connections name themselves name in
// Postgres (application_name: pg_stat_activity, the server's log) unless
// the URL names them.
func OpenAs(ctx context.Context, url string, maxConns int32, name string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parse database url: %w", err)
	}
	if _, set := cfg.ConnConfig.RuntimeParams["application_name"]; !set && name != "" {
		cfg.ConnConfig.RuntimeParams["application_name"] = name
	}
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	if cfg.MaxConnLifetimeJitter == 0 {
		cfg.MaxConnLifetimeJitter = cfg.MaxConnLifetime / lifetimeJitterShare
	}
	for name, value := range unlessSet {
		if _, set := cfg.ConnConfig.RuntimeParams[name]; !set {
			cfg.ConnConfig.RuntimeParams[name] = value
		}
	}
	cfg.AfterConnect = func(_ context.Context, c *pgx.Conn) error {
		registerUUID(c.TypeMap())
		return nil
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("create pool: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("ping postgres: %w", err)
	}
	return pool, nil
}

// unlessSet are the Postgres settings Open gives every connection unless
// the URL sets them. Every statement of hookline reads a bounded page or
// a few rows, but over the event log's partitions the planner's estimates
// of some of them are large, and it would pay for what only long scans
// repay:
//
//   - max_parallel_workers_per_gather: parallel workers take longer to
//     start than the statement runs (a webhook's deliveries of one event
//     type: 20 ms parallel, 5.6 ms not);
//   - jit: compiling a plan whose estimate passes jit_above_cost took
//     longer than running it, at every execution (the DLQ by failure
//     category at 20 million deliveries: 37 ms compiling, 0.5 ms
//     running).
var unlessSet = map[string]string{"max_parallel_workers_per_gather": "0", "jit": "off"}

// WithStatementTimeout returns url with Postgres's statement_timeout set to
// d on every connection opened from it: a statement running longer is
// cancelled (SQLSTATE 57014) and its connection is free again. pgx sends
// the parameters of a connection string it does not know itself as
// run-time parameters when it connects. url is a postgres:// URL or a
// key=value connection string; a statement_timeout it had is replaced.
func WithStatementTimeout(url string, d time.Duration) (string, error) {
	if d < time.Millisecond {
		return "", fmt.Errorf("statement timeout %s: must be at least 1ms", d)
	}
	ms := strconv.FormatInt(d.Milliseconds(), 10)
	if !strings.HasPrefix(url, "postgres://") && !strings.HasPrefix(url, "postgresql://") {
		return url + " statement_timeout=" + ms, nil
	}
	u, err := neturl.Parse(url)
	if err != nil {
		return "", fmt.Errorf("parse database url: %w", err)
	}
	q := u.Query()
	q.Set("statement_timeout", ms)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// Migrate applies every pending migration. The migration library holds a
// Postgres advisory lock while it works, so concurrent callers (several api
// processes starting at once) are safe: one applies, the others wait and
// find nothing left to do. It returns the schema version reached.
//
// It runs on connections of its own, opened with pool's settings but no
// statement timeout: a migration may take longer than the api allows a
// query (an index on a large table), and waiting for another process's
// migration is one statement (the advisory lock).
func Migrate(ctx context.Context, pool *pgxpool.Pool) (uint, error) {
	cc := pool.Config().ConnConfig.Copy()
	cc.RuntimeParams["statement_timeout"] = "0"
	sqlDB := stdlib.OpenDB(*cc)
	defer sqlDB.Close()
	return migrateDB(ctx, sqlDB)
}

func migrateDB(ctx context.Context, sqlDB *sql.DB) (uint, error) {
	if err := sqlDB.PingContext(ctx); err != nil {
		return 0, fmt.Errorf("migration connection: %w", err)
	}
	// A least-privilege role (hookline_api, ...) cannot migrate; say so
	// instead of letting the migrator fail half-way.
	var canCreate bool
	var user, schema string
	if err := sqlDB.QueryRowContext(ctx, `SELECT has_schema_privilege(current_schema(), 'CREATE'), current_user, current_schema()`).
		Scan(&canCreate, &user, &schema); err != nil {
		return 0, fmt.Errorf("migration privileges: %w", err)
	}
	if !canCreate {
		return 0, fmt.Errorf("database user %s cannot create tables in schema %s: run `api migrate` as the schema owner, and start this api with API_MIGRATE_ON_START=false", user, schema)
	}
	driver, err := pgxmigrate.WithInstance(sqlDB, &pgxmigrate.Config{})
	if err != nil {
		return 0, fmt.Errorf("migration driver: %w", err)
	}
	src, err := iofs.New(migrations, "migrations")
	if err != nil {
		return 0, fmt.Errorf("migration source: %w", err)
	}
	m, err := migrate.NewWithInstance("iofs", src, "pgx5", driver)
	if err != nil {
		return 0, fmt.Errorf("migrator: %w", err)
	}
	defer m.Close()
	if err := m.Up(); err != nil && !errors.Is(err, migrate.ErrNoChange) {
		return 0, fmt.Errorf("apply migrations: %w", err)
	}
	version, dirty, err := m.Version()
	if err != nil {
		return 0, fmt.Errorf("read schema version: %w", err)
	}
	if dirty {
		return version, fmt.Errorf("schema version %d is dirty: a migration failed half-way and needs an operator", version)
	}
	return version, nil
}

// EnsurePartitions creates the partitions of the coming days: the attempt
// log's days, the event log's weeks and event_keys' days; it drops the
// days of event_keys that no repeat can meet any more. Every process calls
// it at start; RunPartitioner keeps it up.
func EnsurePartitions(ctx context.Context, pool *pgxpool.Pool, daysAhead int) error {
	if _, err := pool.Exec(ctx, `SELECT ensure_attempt_partitions($1)`, daysAhead); err != nil {
		return fmt.Errorf("ensure attempt partitions: %w", err)
	}
	if _, err := pool.Exec(ctx, `SELECT ensure_event_partitions($1)`, daysAhead); err != nil {
		return fmt.Errorf("ensure event partitions: %w", err)
	}
	return nil
}

// SchemaFingerprint is a hash of the embedded migrations; test helpers name
// their template databases after it so that a schema change makes a new one.
func SchemaFingerprint() string {
	h := sha256.New()
	entries, _ := migrations.ReadDir("migrations")
	for _, e := range entries {
		b, _ := migrations.ReadFile("migrations/" + e.Name())
		h.Write([]byte(e.Name()))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))[:12]
}

// RunPartitioner calls EnsurePartitions every hour until ctx ends, so that
// a long-running deployment always has partitions two weeks ahead.
func RunPartitioner(ctx context.Context, pool *pgxpool.Pool, log *slog.Logger) error {
	return supervisor.Every(ctx, time.Hour, time.Hour, func(ctx context.Context) {
		if err := EnsurePartitions(ctx, pool, 14); err != nil && ctx.Err() == nil {
			log.Warn("partitions not ensured", "error", err)
		}
	})
}
