package process

import (
	"context"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/hookline/hookline/internal/config"
	"github.com/hookline/hookline/internal/db"
	"github.com/hookline/hookline/internal/health"
	"github.com/hookline/hookline/internal/metrics"
)

// Part is a long-running piece of a process; it returns when ctx ends.
type Part func(ctx context.Context) error

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
	deps, err := Connect(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer deps.Close()
	if err := db.EnsurePartitions(ctx, deps.PG, 14); err != nil {
		log.Warn("attempt partitions not ensured (has the api migrated the schema?)", "error", err)
	}
	checks := deps.Checks()
	parts, err := build(cfg, deps, log, checks)
	if err != nil {
		return err
	}
	metrics.Init(metrics.Process{Name: name, Checks: checks, RetentionInterval: cfg.Retention.Interval.D()})

	amqpCtx, stopAMQP := context.WithCancel(context.Background())
	amqpDone := make(chan error, 1)
	go func() { amqpDone <- deps.AMQP.Run(amqpCtx) }()
	defer func() { stopAMQP(); <-amqpDone }()

	// The parts stop when ctx ends, or when the operations server fails
	// (a process that cannot report its health must not keep working).
	partsCtx, stopParts := context.WithCancel(ctx)
	defer stopParts()
	var wg sync.WaitGroup
	for _, part := range parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := part(partsCtx); err != nil {
				log.Error("part stopped", "error", err)
			}
		}()
	}
	// /readyz says only which dependency is down; why goes to the log.
	srv := &http.Server{Addr: cfg.MetricsAddr, Handler: OpsHandler(checks.LogFailures(log)), ReadHeaderTimeout: 10 * time.Second}
	log.Info("serving operations endpoints", "addr", cfg.MetricsAddr)
	err = Serve(ctx, srv, cfg.ShutdownGrace.D())
	stopParts()
	wg.Wait()
	log.Info("stopped")
	return err
}
