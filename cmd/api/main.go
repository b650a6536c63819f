// Command api serves the hookline REST API. "api migrate" applies the
// database migrations and exits; "api rotate-secret-key" seals every stored
// secret under the current secret key; "api rotate-console-key" replaces
// the key that signs console and portal sessions; "api" (or "api serve")
// migrates when configured to and serves until SIGTERM or SIGINT.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/hookline/hookline/internal/config"
	"github.com/hookline/hookline/internal/console"
	"github.com/hookline/hookline/internal/db"
	"github.com/hookline/hookline/internal/delivery"
	"github.com/hookline/hookline/internal/httpapi"
	"github.com/hookline/hookline/internal/intake"
	"github.com/hookline/hookline/internal/metrics"
	"github.com/hookline/hookline/internal/process"
	"github.com/hookline/hookline/internal/queue"
	"github.com/hookline/hookline/internal/supervisor"
	"github.com/hookline/hookline/internal/webhook"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "api:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	cfg, rest, err := process.LoadConfig("api", args, os.Getenv)
	if err != nil {
		return err
	}
	log := process.NewLogger(cfg, os.Stderr, "api")
	cmd := "serve"
	if len(rest) > 0 {
		cmd = rest[0]
	}
	switch cmd {
	case "migrate":
		return migrate(ctx, cfg.Database.URL, log)
	case "rotate-secret-key":
		if err := webhook.RotateSecretKeyCommand(ctx, cfg.Database.URL, cfg.Security.SecretKeys, log); err != nil {
			return err
		}
		return console.ResealSigningKeysCommand(ctx, cfg.Database.URL, cfg.Security.SecretKeys, log)
	case "rotate-console-key":
		return console.RotateSigningKeyCommand(ctx, cfg.Database.URL, cfg.Security.SecretKeys, log)
	case "serve":
	default:
		return fmt.Errorf("unknown command %q (want serve, migrate, rotate-secret-key or rotate-console-key)", cmd)
	}

	// Every statement of the serving api is bounded; "api migrate", "api
	// rotate-secret-key" and "api rotate-console-key" above are not.
	if cfg.Database.URL, err = db.WithStatementTimeout(cfg.Database.URL, cfg.API.StatementTimeout.D()); err != nil {
		return err
	}
	deps, err := process.Connect(ctx, cfg, "api", log)
	if err != nil {
		return err
	}
	defer deps.Close()
	if cfg.API.MigrateOnStart {
		v, err := db.Migrate(ctx, deps.PG)
		if err != nil {
			return err
		}
		log.Info("schema up to date", "version", v)
	}
	if err := db.EnsurePartitions(ctx, deps.PG, 14); err != nil {
		log.Warn("partitions not ensured", "error", err)
	}
	api, err := httpapi.NewStack(cfg, deps.PG, deps.Redis, deps.AMQP, log)
	if err != nil {
		return err
	}
	api.WithTracer(deps.Tracing.Tracer())
	parts := supervisor.New(log)
	checks := deps.Checks()
	checks["rabbitmq"] = api.Publisher.Check
	checks["process"] = parts.Check
	// /readyz names what is down; why goes to the log.
	checks = checks.LogFailures(log)
	metrics.Init(metrics.Process{Name: "api", Checks: checks})
	api.Deps.Checks = checks
	srv, err := httpapi.New(api.Deps)
	if err != nil {
		return err
	}

	throttle, err := httpapi.NewAuthThrottle(cfg.API, log)
	if err != nil {
		return err
	}
	httpSrv := newHTTPServer(cfg.API, throttle.Wrap(srv.Handler()))

	// The parts stop in reverse: the HTTP server first, so that events
	// accepted during its drain still reach the group commit and the outbox;
	// the broker connection last.
	parts.Go("rabbitmq", deps.AMQP.Run)
	parts.Go("partitioner", func(ctx context.Context) error { return db.RunPartitioner(ctx, deps.PG, log) })
	// An ordered key whose release was lost with its worker.
	parts.Go("ordered-key rescue", func(ctx context.Context) error {
		return delivery.RescueStalledKeys(ctx, deps.PG, log, 5*time.Second, 10*time.Second)
	})
	for _, p := range api.Parts() {
		parts.Go(p.Name, p.Run)
	}
	// After the group commit, so that it stops before: its publishes in
	// flight are committed and acknowledged.
	if cfg.API.PublishQueuePrefetch > 0 {
		src := intake.New(intake.Config{Prefetch: cfg.API.PublishQueuePrefetch, MaxPayloadBytes: cfg.API.MaxPayloadBytes,
			Grace: cfg.ShutdownGrace.D()}, deps.AMQP, queue.Topology{Prefix: cfg.AMQP.Prefix, Shards: cfg.AMQP.Shards}, api.Publisher, srv, api.Events,
			api.Deps.Limits, log)
		parts.Go("publish queue", src.Run)
	}
	parts.Go("http", func(ctx context.Context) error { return process.Serve(ctx, httpSrv, cfg.ShutdownGrace.D()) })
	log.Info("api listening", "addr", cfg.API.Addr, "database", process.RedactURL(cfg.Database.URL))
	err = parts.Run(ctx, process.StopWithin(cfg))
	log.Info("api stopped")
	return err
}

// newHTTPServer returns the api's HTTP server on cfg.Addr. Every phase of
// a connection is bounded (api.read_header_timeout, read_timeout,
// idle_timeout), so that clients that send slowly or go quiet cannot hold
// connections and their goroutines. Writes are not bounded: an answer may
// wait for an endpoint verification (verify.Timeout) or a slow query, which
// api.statement_timeout bounds.
func newHTTPServer(cfg config.API, h http.Handler) *http.Server {
	return &http.Server{Addr: cfg.Addr, Handler: h, ReadHeaderTimeout: cfg.ReadHeaderTimeout.D(),
		ReadTimeout: cfg.ReadTimeout.D(), IdleTimeout: cfg.IdleTimeout.D()}
}

func migrate(ctx context.Context, url string, log *slog.Logger) error {
	pool, err := db.Open(ctx, url, 2)
	if err != nil {
		return err
	}
	defer pool.Close()
	v, err := db.Migrate(ctx, pool)
	if err != nil {
		return err
	}
	if err := db.EnsurePartitions(ctx, pool, 14); err != nil {
		return err
	}
	log.Info("schema up to date", "version", v)
	return nil
}
