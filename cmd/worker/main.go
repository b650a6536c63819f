// Command worker is a hookline delivery worker: it consumes the priority
// work queues, POSTs each delivery to its endpoint, records the attempt and
// schedules what follows. Any number may run at once. It serves /metrics,
// /healthz and /readyz on METRICS_ADDR and stops gracefully on SIGTERM.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/hookline/hookline/internal/breaker"
	"github.com/hookline/hookline/internal/config"
	"github.com/hookline/hookline/internal/delivery"
	"github.com/hookline/hookline/internal/health"
	"github.com/hookline/hookline/internal/metrics"
	"github.com/hookline/hookline/internal/netguard"
	"github.com/hookline/hookline/internal/process"
	"github.com/hookline/hookline/internal/queue"
	"github.com/hookline/hookline/internal/ratelimit"
	"github.com/hookline/hookline/internal/schedule"
	"github.com/hookline/hookline/internal/secret"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := process.RunService(ctx, "worker", os.Args[1:], build); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}

func build(cfg config.Config, deps *process.Deps, log *slog.Logger, checks health.Checks) ([]process.Part, error) {
	policy, err := netguard.NewPolicy(cfg.Network.AllowPrivateNetworks, cfg.Network.AllowCIDRs)
	if err != nil {
		return nil, err
	}
	tracer := deps.Tracing.Tracer()
	sender := delivery.NewSender(delivery.SenderConfig{
		ConnectTimeout:  cfg.Worker.ConnectTimeout.D(),
		MaxConnsPerHost: cfg.Worker.MaxConnsPerHost,
		HostQueueWait:   cfg.Worker.HostQueueWait.D(),
		UserAgent:       delivery.UserAgent,
		Tracer:          tracer,
	}, policy)
	topo := queue.Topology{Prefix: cfg.AMQP.Prefix, Shards: cfg.AMQP.Shards}
	pub := queue.NewPublisher(deps.AMQP, topo, 4)
	checks["rabbitmq"] = pub.Check
	guard := delivery.NewGuard(breaker.New(deps.Redis, cfg.Redis.KeyPrefix), ratelimit.New(deps.Redis, cfg.Redis.KeyPrefix), deps.PG, log)
	keys, err := secret.FromConfig(cfg.Security.SecretKeys)
	if err != nil {
		return nil, err
	}
	gate := schedule.NewGate(schedule.GateConfig{Slots: cfg.Worker.Concurrency})
	w := delivery.NewWorker(deps.PG, sender, guard, pub, log).WithSecretKeys(keys).WithGate(gate).WithTracer(tracer)
	consumer := queue.NewConsumer(deps.AMQP, topo, pub, queue.ConsumerConfig{
		Prefetch: cfg.Worker.Prefetch,
		// Beyond the slots, room for the shares owed to other tenants and
		// to take in (and defer) the messages of tenants over their share.
		Concurrency: schedule.Handlers(cfg.Worker.Concurrency),
		Grace:       cfg.ShutdownGrace.D(),
	}, w.Handle)
	metrics.WorkerCapacity.Set(float64(cfg.Worker.Concurrency))
	checks["consumer"] = consumer.Check
	return w.Parts(consumer.Run), nil
}
