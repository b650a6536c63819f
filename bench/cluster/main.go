// Command cluster measures what losing a broker node costs a fleet: it
// starts a three-node RabbitMQ cluster and a Redis Cluster (three masters,
// one replica each) beside the machine's own services, two apis, two
// workers and a dlq built from the working tree and configured for both
// clusters (amqp.url a list of the nodes, -shards work queues per
// priority, redis.mode cluster), and publishes -rate events/s through both
// apis in turn, open-loop with keep-alive clients, to one webhook on a
// local receiver. At -rabbitmq-kill-at it kills (SIGKILL) the RabbitMQ
// node that leads the most queues, and at -redis-kill-at the Redis master
// holding the most keys; neither comes back. After publishing it waits
// until every accepted event has arrived (or none has for a minute) and
// 15 s more for late duplicates, then reports:
//
//   - lost: accepted (202) and never received; duplicates: arrivals of an
//     event already received;
//   - for each kill, how long until the first event published after it
//     arrived (delivery resumed), and the longest time without any arrival
//     from the kill on;
//   - receipt latency from each event's scheduled publish time, for the
//     events scheduled before the first kill, between the kills and after;
//   - the CPU the apis, the workers, the dlq, the RabbitMQ nodes, the
//     Redis nodes and Postgres used until the first kill, in cores and
//     per delivery.
//
// It must run as root (the RabbitMQ nodes run as the rabbitmq user, with
// its Erlang cookie), from the repository's root, and removes the nodes,
// the processes, the database and their directories when it ends:
//
//	go run ./bench/cluster -rate 300 -duration 90s
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/hookline/hookline/bench/internal/deploy"
	"github.com/hookline/hookline/bench/internal/localcluster"
	"github.com/hookline/hookline/bench/internal/report"
	"github.com/hookline/hookline/bench/internal/seqload"
)

type options struct {
	rate                   int
	duration               time.Duration
	rabbitKillAt, redisKat time.Duration
	shards                 int
	rabbitPort, redisPort  int
	logDir, record         string
}

func main() {
	log.SetFlags(log.Ltime)
	log.SetPrefix("cluster: ")
	var o options
	flag.IntVar(&o.rate, "rate", 300, "events published per second, through the two apis in turn")
	flag.DurationVar(&o.duration, "duration", 90*time.Second, "publishing time")
	flag.DurationVar(&o.rabbitKillAt, "rabbitmq-kill-at", 30*time.Second, "when the RabbitMQ node leading the most queues is killed, from the first publish (0: never)")
	flag.DurationVar(&o.redisKat, "redis-kill-at", 60*time.Second, "when the Redis master holding the most keys is killed, from the first publish (0: never)")
	flag.IntVar(&o.shards, "shards", 3, "work queue shards per priority (AMQP_SHARDS)")
	flag.IntVar(&o.rabbitPort, "rabbitmq-port", 5810, "the RabbitMQ nodes listen for AMQP on the three ports after this one")
	flag.IntVar(&o.redisPort, "redis-port", 7511, "port of the first Redis Cluster node; the other five take the next ones")
	flag.StringVar(&o.logDir, "logs", "", "keep the processes' output in this directory (default: removed with the system)")
	flag.StringVar(&o.record, "record", "", "also append the tables, with the machine, date and command, to this file (default: print only)")
	flag.Parse()
	if o.rate <= 0 || o.rate > 5000 || o.duration <= 0 || o.duration > time.Hour || o.shards < 1 || o.shards > 64 {
		log.Fatal("want 0 < -rate <= 5000, 0 < -duration <= 1h, 1 <= -shards <= 64")
	}
	// Until the clean-up is done, Ctrl-C and SIGTERM only cancel ctx.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, o)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "cluster:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) (err error) {
	report.FlushWrites()
	log.Print("building ./cmd/api ./cmd/worker ./cmd/dlq")
	bin, err := deploy.Build(ctx, ".")
	if err != nil {
		return err
	}
	defer func() { _ = bin.Remove() }()

	log.Print("starting a Redis Cluster of three masters and three replicas")
	rdb, err := localcluster.StartRedis(ctx, 3, 1, o.redisPort)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, rdb.Close()) }()
	log.Print("starting a RabbitMQ cluster of three nodes")
	began := time.Now()
	mq, err := localcluster.StartRabbitMQ(ctx, "hookline-bench", o.rabbitPort)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, mq.Close()) }()
	log.Printf("RabbitMQ nodes %s up in %s", strings.Join(mq.Nodes, ", "), time.Since(began).Round(time.Second))

	log.Print("starting two apis, two workers and a dlq")
	sys, err := deploy.Start(ctx, deploy.Options{
		Binaries: bin, Name: "cluster", LogDir: o.logDir, APIs: 2, Workers: 2, AMQPURL: mq.URL(),
		Env: []string{"REDIS_MODE=cluster", "REDIS_URL=" + rdb.URL(), fmt.Sprintf("AMQP_SHARDS=%d", o.shards)},
	})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, sys.Close()) }()

	rc, client, key, stopReceiver, err := seqload.Setup(ctx, sys.APIURL, sys.AdminToken, "cluster")
	if err != nil {
		return err
	}
	defer stopReceiver()
	groups := cpuGroups{"redis": rdb.Pids()}
	if groups["rabbitmq"], err = mq.Pids(ctx); err != nil {
		return err
	}
	for _, name := range sys.Names() {
		kind, _, _ := strings.Cut(name, "-")
		groups[kind] = append(groups[kind], sys.Pid(name))
	}
	report.FlushWrites()
	log.Printf("publishing %d events/s for %s", o.rate, o.duration)
	start := time.Now()
	// CPU is measured until the first kill: the fleet whole.
	cpuUntil := o.duration
	for _, at := range []time.Duration{o.rabbitKillAt, o.redisKat} {
		if at > 0 && at < cpuUntil {
			cpuUntil = at
		}
	}
	cpuBefore := groups.sample()
	cpuAfter := make(chan cpuSample, 1)
	time.AfterFunc(cpuUntil-100*time.Millisecond, func() { cpuAfter <- groups.sample() })
	kills := make(chan []kill, 1)
	go func() { kills <- killNodes(ctx, o, start, mq, rdb) }()
	pub := seqload.Publish(ctx, client, sys.APIURLs, key, "bench.cluster", o.rate, o.duration, start)
	done := <-kills
	for _, k := range done {
		if k.err != nil {
			return fmt.Errorf("kill the %s node: %w", k.what, k.err)
		}
	}
	log.Print("waiting for every accepted event")
	rc.Drain(ctx, pub.Accepted)
	after := <-cpuAfter
	_, all := rc.Arrivals()
	return emit(o, pub, rc, done, start, cpuNote(cpuBefore, after, arrivedBetween(all, cpuBefore.at, after.at)))
}

// kill is one node killed during the run.
type kill struct {
	what, node string
	held       string // what it led or held
	at         time.Time
	err        error
}

// killNodes kills the RabbitMQ node leading the most queues and the Redis
// master holding the most keys, each at its time.
func killNodes(ctx context.Context, o options, start time.Time, mq *localcluster.RabbitMQ, rdb *localcluster.Redis) []kill {
	var out []kill
	type step struct {
		at time.Duration
		do func() kill
	}
	steps := []step{
		{o.rabbitKillAt, func() kill {
			k := kill{what: "RabbitMQ"}
			leaders, err := mq.Leaders(ctx)
			if err != nil {
				k.err = err
				return k
			}
			k.node = busiest(leaders)
			k.held = fmt.Sprintf("led %d of %d queues", leaders[k.node], sum(leaders))
			k.at, k.err = time.Now(), mq.Kill(ctx, k.node)
			return k
		}},
		{o.redisKat, func() kill {
			k := kill{what: "Redis"}
			masters, err := rdb.Masters(ctx)
			if err != nil {
				k.err = err
				return k
			}
			k.node = busiest(masters)
			k.held = fmt.Sprintf("held %d of %d keys", masters[k.node], sum(masters))
			k.at, k.err = time.Now(), rdb.Kill(k.node)
			return k
		}},
	}
	for _, s := range steps {
		if s.at <= 0 || s.at >= o.duration {
			continue
		}
		select {
		case <-ctx.Done():
			return out
		case <-time.After(time.Until(start.Add(s.at))):
		}
		k := s.do()
		log.Printf("killed the %s node %s (%s)", k.what, k.node, k.held)
		out = append(out, k)
	}
	return out
}

// busiest returns the key with the largest count (the first by name on a
// tie, so that a run can be repeated).
func busiest(counts map[string]int) string {
	best := ""
	for k, n := range counts {
		if best == "" || n > counts[best] || (n == counts[best] && k < best) {
			best = k
		}
	}
	return best
}

func sum(counts map[string]int) int {
	n := 0
	for _, c := range counts {
		n += c
	}
	return n
}
