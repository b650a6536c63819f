// Command ceilings measures, in one run, the bare throughput of the parts
// hookline stands on, on this machine: RabbitMQ publish-with-confirms plus
// consume on a quorum queue, Postgres single-row commits from 32
// connections, and keep-alive HTTP POSTs of 1 KiB to a local receiver.
// With -e2e it then measures hookline end to end at its open-loop maximum
// and reports it as a share of the RabbitMQ figure of the same run.
//
//	go run ./bench/ceilings -e2e
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"strings"
	"time"

	"github.com/hookline/hookline/bench/internal/ceiling"
	"github.com/hookline/hookline/bench/internal/report"
	"github.com/hookline/hookline/bench/internal/system"
	"github.com/hookline/hookline/internal/db/dbtest"
	"github.com/hookline/hookline/internal/queue/queuetest"
)

func main() {
	messages := flag.Int("messages", 50_000, "messages through RabbitMQ")
	duration := flag.Duration("duration", 10*time.Second, "length of the Postgres and HTTP runs")
	conns := flag.Int("pg-conns", 32, "Postgres connections")
	clients := flag.Int("http-clients", 64, "concurrent HTTP clients")
	size := flag.Int("size", 1024, "message and body size in bytes")
	e2e := flag.Bool("e2e", false, "also measure hookline end to end (open loop) and report it against the RabbitMQ ceiling")
	e2eEvents := flag.Int("e2e-events", 20_000, "events published for the end-to-end figure")
	record := flag.String("record", "", "also append the table, with the machine, date and command, to this file (default: print only)")
	flag.Parse()
	report.FlushWrites()
	ctx := context.Background()

	rabbit, err := ceiling.RabbitMQ(ctx, queuetest.URL(), *messages, *size, 256)
	if err != nil {
		log.Fatal(err)
	}
	dbURL, drop, err := dbtest.Create(false)
	if err != nil {
		log.Fatal(err)
	}
	pg, err := ceiling.Postgres(ctx, dbURL, *conns, *duration)
	drop()
	if err != nil {
		log.Fatal(err)
	}
	web, err := ceiling.HTTP(ctx, *clients, *size, *duration)
	if err != nil {
		log.Fatal(err)
	}
	table := report.Table{
		Title:   "Ceilings: the parts alone, in one run",
		Command: "go run ./bench/ceilings " + strings.Join(flagArgs(), " "),
		Notes: []string{
			fmt.Sprintf("RabbitMQ: %d persistent %d-byte messages through one durable quorum queue, publisher confirms with 256 unconfirmed at most, one consumer with manual acks and prefetch 256; first publish to last ack.", *messages, *size),
			fmt.Sprintf("Postgres: single-row INSERT, one per transaction (synchronous commit), %d connections, %s.", *conns, *duration),
			fmt.Sprintf("HTTP: %d-byte POSTs over keep-alive connections from %d clients to a local server answering 200 at once, %s.", *size, *clients, *duration),
		},
		Header: []string{"part", "per second"},
		Rows: [][]string{
			{"RabbitMQ publish-with-confirms + consume (quorum)", fmt.Sprintf("%.0f msg", rabbit)},
			{fmt.Sprintf("Postgres single-row commits, %d connections", *conns), fmt.Sprintf("%.0f commits", pg)},
			{"HTTP keep-alive POSTs, 1 KiB", fmt.Sprintf("%.0f requests", web)},
		},
	}
	if *e2e {
		rate, err := endToEnd(ctx, *e2eEvents, *size)
		if err != nil {
			log.Fatal(err)
		}
		table.Notes = append(table.Notes, fmt.Sprintf("hookline end to end: %d events published as fast as 64 clients can (one webhook, one in-process worker with 256 in flight and up to 256 requests to the receiver's host, circuit breaker and token buckets checked as deployed, the local services), deliveries recorded succeeded per second from the first publish to the last success.", *e2eEvents))
		table.Rows = append(table.Rows, []string{"hookline end to end (deliveries)", fmt.Sprintf("%.0f deliveries (%.1f%% of RabbitMQ)", rate, 100*rate/rabbit)})
	}
	if err := report.Emit(table, *record); err != nil {
		log.Fatal(err)
	}
}

// endToEnd publishes n events as fast as 64 clients can to an in-process
// api with one worker and one webhook, and returns deliveries per second.
func endToEnd(ctx context.Context, n, size int) (float64, error) {
	sys, err := system.Start(ctx, system.Options{Workers: 1, WorkerConcurrency: 256, Prefetch: 256, MaxConnsPerHost: 256, Guard: true})
	if err != nil {
		return 0, err
	}
	defer sys.Close()
	return sys.OpenLoop(ctx, n, size, 64)
}

func flagArgs() []string {
	var out []string
	flag.Visit(func(f *flag.Flag) { out = append(out, "-"+f.Name+"="+f.Value.String()) })
	return out
}
