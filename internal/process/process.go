// Package process wires what the api, worker and dlq processes share:
// configuration, the logger, the Postgres pool, the Redis client, the
// RabbitMQ connection, readiness checks and the operations HTTP server.
package process

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/hookline/hookline/internal/config"
	"github.com/hookline/hookline/internal/db"
	"github.com/hookline/hookline/internal/health"
	"github.com/hookline/hookline/internal/queue"
	"github.com/hookline/hookline/internal/redisclient"
	"github.com/hookline/hookline/internal/tracing"
)

// DefaultConfigPath is read when neither -config nor HOOKLINE_CONFIG names a
// file and it exists.
const DefaultConfigPath = "config/hookline.yaml"

// LoadConfig parses the -config flag from args and loads the configuration.
// It returns the remaining arguments.
func LoadConfig(name string, args []string, getenv func(string) string) (config.Config, []string, error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	path := fs.String("config", getenv("HOOKLINE_CONFIG"), "path of the YAML configuration file (env HOOKLINE_CONFIG)")
	if err := fs.Parse(args); err != nil {
		return config.Config{}, nil, err
	}
	if *path == "" {
		if _, err := os.Stat(DefaultConfigPath); err == nil {
			*path = DefaultConfigPath
		}
	}
	cfg, err := config.Load(*path, getenv)
	return cfg, fs.Args(), err
}

// NewLogger returns a JSON logger in production and a text logger
// otherwise. With tracing on, lines logged with a traced context carry
// trace_id and span_id.
func NewLogger(cfg config.Config, w io.Writer, proc string) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.LogLevel))
	opts := &slog.HandlerOptions{Level: level}
	var h slog.Handler
	if cfg.Env == "production" {
		h = slog.NewJSONHandler(w, opts)
	} else {
		h = slog.NewTextHandler(w, opts)
	}
	if cfg.Tracing.Enabled {
		h = tracing.LogHandler(h)
	}
	return slog.New(h).With("process", proc)
}

// Deps are the connections a process holds, and its tracer provider.
type Deps struct {
	PG      *pgxpool.Pool
	Redis   redis.UniversalClient
	AMQP    *queue.Conn
	Tracing *tracing.Provider
}

// Connect opens Postgres and Redis clients, prepares the RabbitMQ
// connection (opened by its Run) and sets up tracing for process. Postgres
// must answer at start; Redis and RabbitMQ may come later, readiness says
// so meanwhile.
func Connect(ctx context.Context, cfg config.Config, process string, log *slog.Logger) (*Deps, error) {
	pg, err := connectPostgres(ctx, cfg.Database, "hookline-"+process, log)
	if err != nil {
		return nil, err
	}
	redisclient.SetLogger(log)
	rdb, err := redisclient.New(cfg.Redis.Mode, cfg.Redis.URL)
	if err != nil {
		pg.Close()
		return nil, fmt.Errorf("redis: %w", err)
	}
	tp, err := tracing.Setup(ctx, cfg.Tracing, process, log)
	if err != nil {
		pg.Close()
		_ = rdb.Close()
		return nil, err
	}
	if tp.On() {
		log.Info("tracing on", "export_url", cfg.Tracing.ExportURL(), "sampler", cfg.Tracing.Sampler)
	}
	return &Deps{PG: pg, Redis: rdb, AMQP: queue.NewConn(cfg.AMQP.URL, log), Tracing: tp}, nil
}

// connectPostgres retries for up to 30 s so that processes started together
// with their database do not fail at once. The connections are named name
// (application_name) unless the URL names them.
func connectPostgres(ctx context.Context, cfg config.Database, name string, log *slog.Logger) (*pgxpool.Pool, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		pg, err := db.OpenAs(ctx, cfg.URL, cfg.MaxConns, name)
		if err == nil {
			return pg, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, fmt.Errorf("connect postgres: %w", err)
		}
		log.Warn("postgres not reachable yet", "error", err)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// Checks are the readiness checks of the three dependencies.
func (d *Deps) Checks() health.Checks {
	return health.Checks{
		"postgres": func(ctx context.Context) error { return d.PG.Ping(ctx) },
		"redis":    func(ctx context.Context) error { return d.Redis.Ping(ctx).Err() },
		"rabbitmq": d.AMQP.Check,
	}
}

// tracingFlush bounds the export of the spans still buffered at Close.
const tracingFlush = 5 * time.Second

// Close releases the clients in reverse order of opening, after exporting
// the spans still buffered.
func (d *Deps) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), tracingFlush)
	defer cancel()
	_ = d.Tracing.Shutdown(ctx)
	_ = d.Redis.Close()
	d.PG.Close()
}

// OpsHandler serves /metrics, /healthz and /readyz for the worker and dlq.
func OpsHandler(checks health.Checks) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.Handler())
	mux.Handle("GET /healthz", health.LiveHandler())
	mux.Handle("GET /readyz", health.ReadyHandler(checks))
	return mux
}

// Serve runs srv until ctx ends, then shuts it down within grace.
func Serve(ctx context.Context, srv *http.Server, grace time.Duration) error {
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve %s: %w", srv.Addr, err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown %s: %w", srv.Addr, err)
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// RedactURL hides the password of a connection URL for logs.
func RedactURL(raw string) string {
	if i := strings.Index(raw, "://"); i >= 0 {
		rest := raw[i+3:]
		if at := strings.LastIndex(rest, "@"); at >= 0 {
			if colon := strings.Index(rest[:at], ":"); colon >= 0 {
				return raw[:i+3] + rest[:colon] + ":***" + rest[at:]
			}
		}
	}
	return raw
}
