package process

import (
	"context"
	"log/slog"
	"net/http"
	"os"
	"time"

	"github.com/hookline/hookline/internal/config"
	"github.com/hookline/hookline/internal/db"
	"github.com/hookline/hookline/internal/health"
	"github.com/hookline/hookline/internal/metrics"
	"github.com/hookline/hookline/internal/supervisor"
)

// Part is a long-running piece of a process: Run returns when ctx ends.
// Parts stop in the reverse of the order Build lists them, so a part comes
// after those it feeds.
type Part = supervisor.Part

// Build makes the parts of a background process from its connections, and
// may replace its readiness checks.
type Build func(cfg config.Config, deps *Deps, log *slog.Logger, checks health.Checks) ([]Part, error)

// RunService runs a background process (worker, dlq): configuration,
// connections, the parts made by build and the operations endpoints on
// METRICS_ADDR, until ctx ends. Then the parts stop taking work and finish
// within their grace period, and the connections close in reverse order.
func RunService(ctx context.Context, name string, args []string, build Build) error {
	cfg, _, err := LoadConfig(name, args, os.Getenv)
	if err != nil {
		return err
	}
	log := NewLogger(cfg, os.Stderr, name)
	deps, err := Connect(ctx, cfg, name, log)
	if err != nil {
		return err
	}
	defer deps.Close()
	if err := db.EnsurePartitions(ctx, deps.PG, 14); err != nil {
		log.Warn("partitions not ensured (has the api migrated the schema?)", "error", err)
	}
	group := supervisor.New(log)
	checks := deps.Checks()
	checks["process"] = group.Check
	parts, err := build(cfg, deps, log, checks)
	if err != nil {
		return err
	}
	metrics.Init(metrics.Process{Name: name, Checks: checks, RetentionInterval: cfg.Retention.Interval.D()})

	// The broker connection starts first and stops last; the operations
	// server starts last and stops first (a process that cannot report its
	// health must not keep working: its failure stops the rest).
	group.Go("rabbitmq", deps.AMQP.Run)
	for _, part := range parts {
		group.Go(part.Name, part.Run)
	}
	// /readyz says only which dependency is down; why goes to the log.
	srv := &http.Server{Addr: cfg.MetricsAddr, Handler: OpsHandler(checks.LogFailures(log)), ReadHeaderTimeout: 10 * time.Second}
	group.Go("operations server", func(ctx context.Context) error { return Serve(ctx, srv, cfg.ShutdownGrace.D()) })
	log.Info("serving operations endpoints", "addr", cfg.MetricsAddr)
	err = group.Run(ctx, StopWithin(cfg))
	log.Info("stopped")
	return err
}

// StopWithin is how long a process's parts have, together, to stop: the
// shutdown grace its handlers and HTTP drains may use, and time to flush
// what they leave in batches.
func StopWithin(cfg config.Config) time.Duration {
	return cfg.ShutdownGrace.D() + 5*time.Second
}
