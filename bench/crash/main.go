// Command crash measures what a crash costs: the api, worker and dlq run as
// deployed (separate processes, default settings), one tenant publishes at
// a fixed rate with keep-alive clients to one webhook on a local receiver,
// and after -kill-at the named process is killed with SIGKILL and started
// again -down later. Publishing goes on throughout (publishes refused
// while the api is down are counted, not retried). Once every accepted
// event has arrived, or none has for 60 s, it reports how many accepted
// events never arrived (lost) and how many arrived more than once
// (duplicates), by the sequence number in each payload.
//
//	go run ./bench/crash -process api -rate 1000 -duration 20s
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/hookline/hookline/bench/internal/deploy"
	"github.com/hookline/hookline/bench/internal/report"
	"github.com/hookline/hookline/bench/internal/seqload"
)

func main() {
	proc := flag.String("process", "api", "the process to kill: api, worker or dlq")
	rate := flag.Int("rate", 1000, "events published per second")
	duration := flag.Duration("duration", 20*time.Second, "publishing time")
	killAt := flag.Duration("kill-at", 8*time.Second, "when the process is killed, from the first publish")
	down := flag.Duration("down", time.Second, "how long it stays down before it is started again")
	record := flag.String("record", "", "also append the table, with the machine, date and command, to this file (default: print only)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *proc, *rate, *duration, *killAt, *down, *record); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, proc string, rate int, duration, killAt, down time.Duration, record string) error {
	bin, err := deploy.Build(ctx, ".")
	if err != nil {
		return err
	}
	defer func() { _ = bin.Remove() }()
	sys, err := deploy.Start(ctx, deploy.Options{Binaries: bin, Name: "crash"})
	if err != nil {
		return err
	}
	defer func() {
		if err := sys.Close(); err != nil {
			log.Print(err)
		}
	}()

	rc, client, key, stopReceiver, err := seqload.Setup(ctx, sys.APIURL, sys.AdminToken, "crash")
	if err != nil {
		return err
	}
	defer stopReceiver()

	killed := make(chan error, 1)
	start := time.Now()
	go func() {
		select {
		case <-ctx.Done():
			killed <- ctx.Err()
			return
		case <-time.After(killAt):
		}
		if err := sys.Kill(proc); err != nil {
			killed <- err
			return
		}
		time.Sleep(down)
		killed <- sys.Restart(ctx, proc)
	}()
	res := seqload.Publish(ctx, client, []string{sys.APIURL}, key, "bench.crash", rate, duration, start)
	if err := <-killed; err != nil {
		return fmt.Errorf("kill and restart %s: %w", proc, err)
	}

	rc.Drain(ctx, res.Accepted)
	first, _ := rc.Arrivals()
	lost := 0
	extra := 0 // arrived though the publish's outcome was unknown or refused
	for seq := range first {
		if !res.Accepted[seq] {
			extra++
		}
	}
	for seq := range res.Accepted {
		if _, ok := first[seq]; !ok {
			lost++
		}
	}
	dups := rc.Duplicates()

	return report.Emit(report.Table{
		Title:   "Crash: SIGKILL of the " + proc + " under load",
		Command: "go run ./bench/crash " + strings.Join(os.Args[1:], " "),
		Notes: []string{
			fmt.Sprintf("The api, worker and dlq binaries as deployed (default settings), local services; one tenant publishing %d events/s for %s to one webhook on a local receiver answering 200; the %s killed with SIGKILL %s after the first publish and started again %s later.", rate, duration, proc, killAt, down),
			"Accepted: publishes answered 202. Refused: no connection or another answer (the api down). Unknown: sent, but the connection broke before the answer. Lost: accepted and never received. Duplicates: arrivals of an event already received. Arrived unacknowledged: received though the publish's answer was unknown or refused (committed before the crash).",
		},
		Header: []string{"killed", "published", "accepted", "refused", "unknown", "lost", "duplicates", "arrived unacknowledged"},
		Rows: [][]string{{proc, fmt.Sprint(res.Total), fmt.Sprint(len(res.Accepted)),
			fmt.Sprint(res.Refused), fmt.Sprint(res.Unknown), fmt.Sprint(lost), fmt.Sprint(dups), fmt.Sprint(extra)}},
	}, record)
}
