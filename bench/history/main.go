// Command history measures every read of the API, the console and the
// portal against a long history (docs/BENCHMARKS.md, "Reads against a long
// history"): it starts hookline as an operator would (bench/internal/deploy),
// creates one large tenant with its webhooks and many small tenants through
// the API, fills the record with months of deliveries and their attempts,
// then times each read route and page, warm, against the goal of 50 ms at
// p99.
//
// The history is written with COPY into the tables the publish path and
// the worker write (events, deliveries, delivery_attempts), so that the
// triggers and indexes that keep the record do their work as they would
// have, row by row; then the tables are analyzed, as the worker's analyzer
// would.
//
//	go run ./bench/history -deliveries 20000000 -days 30 -tenants 10000
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/hookline/hookline/bench/internal/deploy"
)

type options struct {
	deliveries int
	days       int
	tenants    int
	webhooks   int
	samples    int
	parallel   int
	keep       bool
}

func main() {
	var o options
	flag.IntVar(&o.deliveries, "deliveries", 20_000_000, "deliveries of the large tenant, one per event")
	flag.IntVar(&o.days, "days", 30, "days the large tenant's history spans, ending now")
	flag.IntVar(&o.tenants, "tenants", 10_000, "small tenants beside it, each with a webhook and a little history")
	flag.IntVar(&o.webhooks, "webhooks", 50, "webhooks of the large tenant")
	flag.IntVar(&o.samples, "samples", 30, "timed requests per read, after two to warm up")
	flag.IntVar(&o.parallel, "parallel", 2, "connections copying the large tenant's history at once")
	flag.BoolVar(&o.keep, "keep", false, "leave the system running (and its database) after the report, until interrupted")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, o options) error {
	bin, err := deploy.Build(ctx, ".")
	if err != nil {
		return err
	}
	defer func() { _ = bin.Remove() }()
	sys, err := deploy.Start(ctx, deploy.Options{Binaries: bin, Name: "history"})
	if err != nil {
		return err
	}
	defer func() {
		if err := sys.Close(); err != nil {
			log.Print(err)
		}
	}()
	api := newClient(sys.APIURL, sys.AdminToken)

	start := time.Now()
	big, small, err := setUp(ctx, api, o)
	if err != nil {
		return fmt.Errorf("set up tenants: %w", err)
	}
	log.Printf("tenants and webhooks made through the API in %s", time.Since(start).Round(time.Second))

	start = time.Now()
	f, err := newFiller(ctx, sys.DBURL)
	if err != nil {
		return err
	}
	defer f.close()
	sizes, err := f.fill(ctx, o, big, small)
	if err != nil {
		return fmt.Errorf("fill the history: %w", err)
	}
	log.Printf("history written in %s: %s", time.Since(start).Round(time.Second), sizes)

	reads, err := readsOf(ctx, api, big, small)
	if err != nil {
		return err
	}
	results := timeReads(ctx, reads, o.samples)
	printReport(o, sizes, results)
	if o.keep {
		log.Printf("api at %s (admin token %s, database %s); interrupt to stop", sys.APIURL, sys.AdminToken, sys.DBURL)
		<-ctx.Done()
	}
	return nil
}
