// Command dlq owns hookline's dead-letter side: it consumes the dead-letter
// queue and records exhausted deliveries and poison messages (announcing
// them to their owners), sweeps up exhausted deliveries whose dead letter
// was lost, disables endpoints that keep failing, runs batch retries and
// recoveries and data retention, and exports the queue
// depth, DLQ size and batch gauges. It serves /metrics, /healthz and
// /readyz on METRICS_ADDR and stops gracefully on SIGTERM. With a command
// (dlq help) it is instead the operator's client for the DLQ routes.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/hookline/hookline/internal/autodisable"
	"github.com/hookline/hookline/internal/config"
	"github.com/hookline/hookline/internal/db"
	"github.com/hookline/hookline/internal/dlq"
	"github.com/hookline/hookline/internal/dlqcli"
	"github.com/hookline/hookline/internal/health"
	"github.com/hookline/hookline/internal/outbox"
	"github.com/hookline/hookline/internal/process"
	"github.com/hookline/hookline/internal/queue"
	"github.com/hookline/hookline/internal/retention"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	args := os.Args[1:]
	switch {
	case len(args) > 0 && args[0] == "serve":
		args = args[1:]
	case len(args) > 0 && (dlqcli.IsCommand(args[0]) || !strings.HasPrefix(args[0], "-")):
		// An operator command; an unknown word is refused there rather
		// than starting the service.
		code := dlqcli.Run(ctx, args, os.Stdout, os.Stderr, os.Getenv)
		stop()
		os.Exit(code)
	}
	if err := process.RunService(ctx, "dlq", args, build); err != nil {
		fmt.Fprintln(os.Stderr, "dlq:", err)
		os.Exit(1)
	}
}

func build(cfg config.Config, deps *process.Deps, log *slog.Logger, checks health.Checks) ([]process.Part, error) {
	topo := queue.Topology{Prefix: cfg.AMQP.Prefix, Shards: cfg.AMQP.Shards}
	pub := queue.NewPublisher(deps.AMQP, topo, 1)
	checks["rabbitmq"] = pub.Check
	// Batch retries and owner notifications create deliveries; the
	// dispatcher enqueues them after their commit (the api's outbox relay
	// covers a crash in between).
	dispatcher := outbox.NewDispatcher(deps.PG, pub, log)
	tracer := deps.Tracing.Tracer()
	recorder := dlq.NewRecorder(deps.PG, dispatcher, log).WithTracer(tracer)
	consumer := queue.NewConsumer(deps.AMQP, topo, pub, queue.ConsumerConfig{
		Queues:      []string{topo.DeadQueue()},
		Prefetch:    32,
		Concurrency: 4,
		Grace:       cfg.ShutdownGrace.D(),
	}, recorder.Handle)
	gauges := dlq.NewGauges(deps.PG, deps.AMQP, topo, log)
	partitions := func(ctx context.Context) error { return db.RunPartitioner(ctx, deps.PG, log) }
	batches := dlq.NewRunner(deps.PG, dispatcher, log, cfg.DLQ.BatchConcurrency, cfg.DLQ.BatchClaimTimeout.D())
	batches.ConcurrencyPerTenant = cfg.DLQ.BatchConcurrencyPerTenant
	batches.Tracer = tracer
	disabler := autodisable.New(deps.PG, dispatcher, log, cfg.DLQ.AutoDisable.Interval.D(), cfg.DLQ.AutoDisable.CircuitReopens)
	// The dispatcher stops after everything that creates deliveries.
	return []process.Part{
		{Name: "outbox dispatcher", Run: dispatcher.Run},
		{Name: "dead-letter consumer", Run: consumer.Run},
		{Name: "lost-delivery sweeper", Run: dlq.NewSweeper(deps.PG, dispatcher, log).Run},
		{Name: "batch runner", Run: batches.Run},
		{Name: "auto-disabler", Run: disabler.Run},
		{Name: "gauges", Run: gauges.Run},
		{Name: "partitioner", Run: partitions},
		{Name: "retention", Run: retention.New(deps.PG, cfg.Retention, log).Run},
	}, nil
}
