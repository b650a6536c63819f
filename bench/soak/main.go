// Command soak measures whether hookline stays the same over a long run,
// on a Postgres whose autovacuum is off (as on the development machine):
// it starts the api, worker and dlq as deployed (bench/internal/deploy:
// separate processes, default settings, the local Postgres, Redis and
// RabbitMQ), one tenant with -webhooks webhooks, each on a receiver of its
// own in this process answering 200 at once, and publishes -rate events/s
// for -duration, open-loop with keep-alive clients (seqload). For each
// -window it reports:
//
//   - events published and accepted, deliveries received, duplicates, and
//     the events never received (lost, counted at the end);
//   - publish latency, and publish-to-receipt latency, both from each
//     event's scheduled send time (receipt: until the receiver has read
//     the POST);
//   - the CPU time per delivery of the api, the worker, the dlq, Postgres,
//     RabbitMQ, Redis, this program and the whole machine, from /proc;
//   - Postgres's CPU time per delivery by process, each named by
//     pg_stat_activity: hookline's processes by the application_name of
//     their connections, the background ones by type;
//   - when the server loads pg_stat_statements (shared_preload_libraries),
//     the statements that took the most execution time, each window's
//     time per delivery and shared buffers per call: a statement whose
//     buffers per call rise reads more as the history grows;
//   - the size of every table of hookline's database, its heap and its
//     indexes, with its live and dead rows, at the start and the end of
//     the window, and how many bytes it grew per delivery since the start
//     and within the window: flat figures mean the tables grow with the
//     history only, rising ones that they grow faster (dead rows that
//     nothing vacuums, say).
//
// It ends with a verdict: the last window's receipt p99 and CPU per
// delivery, the machine's and that of hookline with its services, against
// the first's, and whether each is within 10 %.
// Run it from the repository's root on an otherwise quiet machine; it
// removes the processes, the database, the vhost and the Redis keys when
// it ends, Ctrl-C included (an interrupted run reports nothing):
//
//	go run ./bench/soak -rate 900 -duration 1h -window 10m
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/hookline/hookline/bench/internal/deploy"
	"github.com/hookline/hookline/bench/internal/report"
	"github.com/hookline/hookline/bench/internal/seqload"
)

type options struct {
	rate             int
	duration, window time.Duration
	webhooks         int
	logDir, record   string
	dbParams         string
}

func main() {
	log.SetFlags(log.Ltime)
	log.SetPrefix("soak: ")
	var o options
	flag.IntVar(&o.rate, "rate", 900, "events published per second")
	flag.DurationVar(&o.duration, "duration", time.Hour, "publishing time")
	flag.DurationVar(&o.window, "window", 10*time.Minute, "length of each reported window")
	flag.IntVar(&o.webhooks, "webhooks", 1, "webhooks of the tenant, each on a receiver of its own; every event goes to each")
	flag.StringVar(&o.logDir, "logs", "", "keep the processes' output in this directory (default: removed with the system)")
	flag.StringVar(&o.dbParams, "db-params", "", "query parameters added to the processes' DATABASE_URL, as pgx reads them (pool_max_conn_lifetime=2m, say)")
	flag.StringVar(&o.record, "record", "", "also append the tables, with the machine, date and command, to this file (default: print only)")
	flag.Parse()
	if o.rate <= 0 || o.rate > 5000 || o.duration <= 0 || o.window <= 0 || o.window > o.duration || o.webhooks < 1 || o.webhooks > 16 {
		log.Fatal("want 0 < -rate <= 5000, 0 < -window <= -duration, 1 <= -webhooks <= 16")
	}
	// Until the clean-up is done, Ctrl-C and SIGTERM only cancel ctx.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, o)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) (err error) {
	log.Print("building ./cmd/api ./cmd/worker ./cmd/dlq")
	bin, err := deploy.Build(ctx, ".")
	if err != nil {
		return err
	}
	defer func() { _ = bin.Remove() }()
	sys, err := deploy.Start(ctx, deploy.Options{Binaries: bin, Name: "soak", LogDir: o.logDir, DBParams: o.dbParams})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, sys.Close()) }()
	vacuum, err := autovacuum(ctx, sys.DBURL)
	if err != nil {
		return err
	}

	pg, err := newPGReader(ctx, sys.DBURL)
	if err != nil {
		return err
	}
	ws := newWindows(o.duration, o.window, o.rate)
	receivers, client, key, stopReceivers, err := setup(ctx, sys, o.webhooks, ws)
	if err != nil {
		return err
	}
	defer stopReceivers()
	pids := map[string]int{}
	for _, name := range sys.Names() {
		pids[name] = sys.Pid(name)
	}
	log.Printf("publishing %d events/s for %s to %d webhook(s), autovacuum %s", o.rate, o.duration, o.webhooks, vacuum)
	r, err := publish(ctx, o, sys.DBURL, pg, ws, pids, func(ctx context.Context, start time.Time) seqload.Published {
		return seqload.PublishObserved(ctx, client, []string{sys.APIURL}, key, "bench.soak", o.rate, o.duration, start, ws.answer)
	})
	if err != nil {
		return err
	}
	log.Print("waiting for every accepted event")
	countLost(ctx, receivers, r.pub, ws)
	if err := ctx.Err(); err != nil {
		return err
	}
	return emit(o, vacuum, pg, r, ws)
}

// setup starts a receiver for each webhook, reporting to ws, and through
// the api a tenant with a webhook on each. It returns the receivers, the
// client to publish with, the tenant's API key and a function that stops
// the receivers.
func setup(ctx context.Context, sys *deploy.System, webhooks int, ws *windows) ([]*seqload.Receiver, *http.Client, string, func(), error) {
	var receivers []*seqload.Receiver
	var urls []string
	var stops []func()
	stopAll := func() {
		for _, stop := range stops {
			stop()
		}
	}
	for range webhooks {
		rc := seqload.NewObservedReceiver(ws.arrival)
		url, stop, err := seqload.Serve(rc)
		if err != nil {
			stopAll()
			return nil, nil, "", nil, err
		}
		receivers, urls, stops = append(receivers, rc), append(urls, url), append(stops, stop)
	}
	client := seqload.NewClient()
	key, err := seqload.Provision(ctx, client, sys.APIURL, sys.AdminToken, "soak", urls[0])
	for _, url := range urls[1:] {
		if err == nil {
			err = seqload.AddWebhook(ctx, client, sys.APIURL, key, url)
		}
	}
	if err != nil {
		stopAll()
		return nil, nil, "", nil, fmt.Errorf("provision the tenant: %w", err)
	}
	return receivers, client, key, stopAll, nil
}

// soakRun is what publish measured: the publishes, and at the start and
// at the end of every window the CPU used so far, every table's size and
// Postgres's processes and statements.
type soakRun struct {
	pub   seqload.Published
	cpu   []cpuSample
	sizes []sizeSnapshot
	pg    []pgSample
}

// publish starts publishing (send, from the time it is given, until the
// end of the run) and samples the CPU and the table sizes at the start and
// at the end of each window. It returns once publishing is over.
func publish(ctx context.Context, o options, dbURL string, pg *pgReader, ws *windows, pids map[string]int, send func(context.Context, time.Time) seqload.Published) (soakRun, error) {
	var r soakRun
	tables, err := readSizes(ctx, dbURL)
	if err != nil {
		return r, err
	}
	r.sizes = append(r.sizes, sizeSnapshot{tables: tables})
	report.FlushWrites()
	first, err := pg.sample(ctx)
	if err != nil {
		return r, err
	}
	r.pg = append(r.pg, first)
	r.cpu = append(r.cpu, sampleCPU(pids))
	start := time.Now()
	ws.begin(start)
	sendCtx, stopSending := context.WithCancel(ctx)
	defer stopSending()
	published := make(chan seqload.Published, 1)
	go func() { published <- send(sendCtx, start) }()
	for i := range ws.count() {
		if err = sampleWindow(ctx, o, dbURL, pg, ws, pids, start, i, &r); err != nil {
			stopSending() // on error only: otherwise the publishes in flight end as they would
			break
		}
	}
	r.pub = <-published
	return r, err
}

// sampleWindow waits for the end of window i and samples the CPU, the
// table sizes and Postgres's processes and statements into r.
func sampleWindow(ctx context.Context, o options, dbURL string, pg *pgReader, ws *windows, pids map[string]int, start time.Time, i int, r *soakRun) error {
	from, to := ws.bounds(i, o.duration)
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Until(start.Add(to))):
	}
	sample, err := pg.sample(ctx)
	if err != nil {
		return err
	}
	r.pg = append(r.pg, sample)
	r.cpu = append(r.cpu, sampleCPU(pids))
	delivered := ws.deliveredSoFar()
	tables, err := readSizes(ctx, dbURL)
	if err != nil {
		return err
	}
	snap := sizeSnapshot{at: to, delivered: delivered, tables: tables}
	r.sizes = append(r.sizes, snap)
	s := ws.stats(i)
	use := cpuBetween(r.cpu[i], r.cpu[i+1], delivered-r.sizes[i].delivered)
	log.Printf("window %d/%d (%s-%s): published %d, received %d, receipt p99 %s, machine %.2f cores, %.0f us per delivery; tables %s",
		i+1, ws.count(), short(from), short(to), s.published, s.received, report.Ms(s.receiptP99),
		use.cores("machine"), use.perDelivery("machine"), bytesText(sizeOf(snap, allTables).total))
	return nil
}

// countLost waits until every receiver has every accepted event (or
// none arrives for a minute, seqload.Receiver.Drain), then counts in ws
// each accepted event a receiver never got.
func countLost(ctx context.Context, receivers []*seqload.Receiver, pub seqload.Published, ws *windows) {
	done := make(chan struct{}, len(receivers))
	for _, rc := range receivers {
		go func() {
			rc.Drain(ctx, pub.Accepted)
			done <- struct{}{}
		}()
	}
	for range receivers {
		<-done
	}
	for _, rc := range receivers {
		first, _ := rc.Arrivals()
		for seq := range pub.Accepted {
			if _, ok := first[seq]; !ok {
				ws.lose(seq)
			}
		}
	}
}
