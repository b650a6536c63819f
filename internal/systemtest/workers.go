package systemtest

import (
	"time"

	"github.com/hookline/hookline/internal/autodisable"
	"github.com/hookline/hookline/internal/breaker"
	"github.com/hookline/hookline/internal/config"
	"github.com/hookline/hookline/internal/delivery"
	"github.com/hookline/hookline/internal/dlq"
	"github.com/hookline/hookline/internal/netguard"
	"github.com/hookline/hookline/internal/outbox"
	"github.com/hookline/hookline/internal/queue"
	"github.com/hookline/hookline/internal/ratelimit"
	"github.com/hookline/hookline/internal/schedule"
	"github.com/hookline/hookline/internal/supervisor"
)

// workerParts are the worker process's parts: the delivery worker and its
// consumer of the work queues, with the api's publisher.
func (s *System) workerParts(conn *queue.Conn, o Options) []supervisor.Part {
	rdb := s.Redis
	if o.WorkerRedis != "" {
		rdb = redisClient(s.t, o.WorkerRedis)
	}
	sender := delivery.NewSender(delivery.SenderConfig{ConnectTimeout: 2 * time.Second, MaxConnsPerHost: 5, UserAgent: delivery.UserAgent,
		Tracer: o.Tracer}, netguard.Policy{AllowPrivate: !o.BlockPrivate})
	guard := delivery.NewGuard(breaker.New(rdb, s.RedisPrefix), ratelimit.New(rdb, s.RedisPrefix), s.WorkerPool, o.Log)
	pub := s.Stack.Publisher
	worker := delivery.NewWorker(s.WorkerPool, sender, guard, pub, o.Log).WithTracer(o.Tracer)
	handlers := o.Workers
	if o.SharedSlots {
		worker.WithGate(schedule.NewGate(schedule.GateConfig{Slots: o.Workers, Wait: 50 * time.Millisecond}))
		handlers = schedule.Handlers(o.Workers)
	}
	consumer := queue.NewConsumer(conn, s.Topology, pub, queue.ConsumerConfig{Prefetch: 16, Concurrency: handlers, Grace: time.Second},
		worker.Handle)
	return worker.Parts(consumer.Run)
}

// dlqParts are the dlq process's parts that tests need: the dead-letter
// recorder, the batch runner and the auto-disabler; with Options.Roles,
// with an outbox dispatcher of their own on their role's pool.
func (s *System) dlqParts(conn *queue.Conn, o Options) []supervisor.Part {
	log, tracer := o.Log, o.Tracer
	var parts []supervisor.Part
	dispatcher := s.Stack.Dispatcher
	if s.DLQPool != s.APIPool {
		dispatcher = outbox.NewDispatcher(s.DLQPool, s.Stack.Publisher, log)
		parts = append(parts, supervisor.Part{Name: "dlq outbox dispatcher", Run: dispatcher.Run})
	}
	recorder := queue.NewConsumer(conn, s.Topology, s.Stack.Publisher, queue.ConsumerConfig{Queues: []string{s.Topology.DeadQueue()},
		Prefetch: 8, Concurrency: 2, Grace: time.Second}, dlq.NewRecorder(s.DLQPool, dispatcher, log).WithTracer(tracer).Handle)
	batches := dlq.NewRunner(s.DLQPool, dispatcher, log, 2, 2*time.Second)
	batches.Poll, batches.Tracer = 100*time.Millisecond, tracer
	reopens := o.CircuitReopens
	if reopens == 0 {
		reopens = config.Default().DLQ.AutoDisable.CircuitReopens
	}
	disabler := autodisable.New(s.DLQPool, dispatcher, log, 100*time.Millisecond, reopens)
	return append(parts,
		supervisor.Part{Name: "dead-letter consumer", Run: recorder.Run},
		supervisor.Part{Name: "batch runner", Run: batches.Run},
		supervisor.Part{Name: "auto-disabler", Run: disabler.Run})
}
