// Command fairness measures fairness between tenants: while a noisy tenant
// misbehaves, do quiet tenants still get their deliveries, and quickly?
//
// It runs hookline as an operator would: the api, worker and dlq binaries
// built from the working tree (so it measures whatever code is there), one
// of each, as separate processes with default settings, on a database,
// RabbitMQ vhost and Redis key prefix of their own, fresh for every
// scenario and removed after it (also on error or Ctrl-C). Quiet tenants
// publish to healthy local receivers; each scenario adds noisy tenants:
//
//	solo  one quiet tenant alone (the baseline)
//	a     + a tenant publishing 10 events/s to 60 webhooks that never answer
//	        (each on its own port; 10 s attempt timeout, no circuit breaker)
//	b     + a tenant publishing 200 events/s at high priority to one healthy
//	        webhook limited to 60 requests a minute
//	c     + both of those noisy tenants
//	d     ten quiet tenants sharing the quiet rate, + both noisy tenants
//	e     -tenants quiet tenants (10,000), + both noisy tenants; run only
//	        when named: go run ./bench/fairness -scenarios solo,e
//
// The worker's gate keeps state for each tenant with work at the moment,
// while the broker topology does not grow with tenants; e checks that the
// design holds with many tenants. Its tenants are created through the api
// before the measured window, createParallel at a time (the table gives
// how long that took), each with one webhook at a path of its own on one
// shared receiver, so that a request carrying one tenant's event on
// another's webhook is seen. They publish in turn at -quiet-rate together,
// solo's rate, so that solo is e's baseline; e publishes for
// max(-duration, -tenants / -quiet-rate) instead, 100 s by default, so
// that every tenant publishes at least once. Keeping the 15 s and raising
// the rate to 700/s would publish as many events, but this two-core
// machine is saturated from about 500 events/s (docs/BENCHMARKS.md) and
// c's noisy tenants alone keep it busy: e would then measure the
// saturation, not the sharing. The noisy tenants publish for the same
// longer time.
//
// For the quiet tenants together it reports the share of events received
// within 30 s of their scheduled publish time, receipt latency from that
// time, both against solo, and, for everyone, the worker's re-publishes
// and the postponements per delivery, and CPU per delivery; then whether
// each noisy scenario meets the goals (quiet share >= 95 % of solo, quiet
// p99 <= 2x solo or < 250 ms, re-publishes per delivery <= 2). Run it from
// the repository's root; a full run takes three to six minutes (more while
// other work keeps the machine busy: each scenario first waits, at most
// -idle-wait, for it to calm down); e takes about two minutes more, of
// which creating its 10,000 tenants about ten seconds.
//
//	go run ./bench/fairness -scenarios solo,a,b,c,d -duration 15s -quiet-rate 100 -drain 30s -tenants 10000
//
// -workers N runs N worker processes instead of one: each keeps the fair
// share for the work it holds (docs/SCHEDULING.md), and c with two checks
// that this holds across a fleet (the table's worker RSS is then the
// largest):
//
//	go run ./bench/fairness -scenarios solo,c -workers 2
//
// The table is printed; -record FILE also appends it to FILE (none by
// default: docs/BENCHMARKS.md states the current figures, git keeps the runs);
// -src DIR measures another source tree (for example a "git archive" of an
// older commit); -logs DIR keeps the processes' output.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/hookline/hookline/bench/internal/deploy"
	"github.com/hookline/hookline/bench/internal/report"
)

func main() {
	log.SetFlags(log.Ltime)
	log.SetPrefix("fairness: ")
	// Until the clean-up is done, Ctrl-C and SIGTERM only cancel ctx.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "fairness:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	names := flag.String("scenarios", "solo,a,b,c,d", "comma-separated scenarios to run (solo, a, b, c, d, e); they run in that order")
	duration := flag.Duration("duration", 15*time.Second, "publishing time per scenario")
	quietRate := flag.Float64("quiet-rate", 100, "events/s of the quiet tenants together (in d, each of the ten publishes a tenth; in e, they take turns)")
	tenants := flag.Int("tenants", 10_000, fmt.Sprintf("quiet tenants in e (at most %d); e publishes long enough for each to publish once", maxTenants))
	drainFor := flag.Duration("drain", 30*time.Second, "after publishing, wait at most this long for the quiet events still missing")
	idleWait := flag.Duration("idle-wait", 2*time.Minute, "before publishing, wait at most this long for the machine to be under 0.3 cores busy")
	src := flag.String("src", ".", "build the binaries from the module in this directory (default: the working tree here)")
	logDir := flag.String("logs", "", "keep the processes' output in this directory (default: removed with the system)")
	record := flag.String("record", "", "also append the table, with the machine, date and command, to this file (default: print only)")
	workers := flag.Int("workers", 1, "worker processes (the fair share is kept by each worker: two check it holds across a fleet)")
	flag.Parse()
	chosen, err := choose(*names)
	if err != nil {
		return err
	}
	if *duration <= 0 || *duration > time.Hour || *drainFor < 0 || *drainFor > time.Hour || *quietRate <= 0 || *quietRate > 10_000 {
		return fmt.Errorf("want 0 < -duration <= 1h, 0 <= -drain <= 1h, 0 < -quiet-rate <= 10000")
	}
	if *workers < 1 || *workers > 8 {
		return fmt.Errorf("want 1 <= -workers <= 8")
	}
	o := options{duration: *duration, drain: *drainFor, quietRate: *quietRate, tenants: *tenants, logDir: *logDir, idleWait: *idleWait, workers: *workers}
	if *tenants < 2 || *tenants > maxTenants || o.publishFor(scenario{many: true}) > time.Hour {
		return fmt.Errorf("want 2 <= -tenants <= %d, and -tenants / -quiet-rate <= 1h", maxTenants)
	}
	code := codeVersion(ctx, *src)
	log.Printf("building ./cmd/api ./cmd/worker ./cmd/dlq (%s)", code)
	bin, err := deploy.Build(ctx, *src)
	if err != nil {
		return err
	}
	defer func() { _ = bin.Remove() }()
	known, err := binaryNames(filepath.Join(bin.Dir, "worker"), strings.TrimPrefix(metricRepublishes, "hookline_"))
	if err != nil {
		return err
	}
	o.republishesKnown, o.bin = known, bin
	var results []result
	for _, sc := range chosen {
		res, err := runScenario(ctx, o, sc)
		if err != nil {
			return fmt.Errorf("scenario %s: %w", sc.name, err)
		}
		log.Printf("scenario %s: quiet %d/%d received within %s, p99 %s", sc.name, res.quietWithin, res.quietAccepted, shareWindow, latency(res, 99, o.drain))
		results = append(results, res)
	}
	t := table(o, results, code)
	t.Command = "go run ./bench/fairness " + shellArgs(os.Args[1:])
	return report.Emit(t, *record)
}

// shellArgs quotes the arguments that need it, so that the command can be
// pasted back (an empty argument in particular).
func shellArgs(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = a
		if a == "" || strings.ContainsAny(a, " \t'\"$`\\*?") {
			out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(out, " ")
}

// choose returns the named scenarios in their running order.
func choose(list string) ([]scenario, error) {
	var want []string
	for _, n := range strings.Split(list, ",") {
		if n = strings.TrimSpace(n); n != "" {
			want = append(want, n)
		}
	}
	var out []scenario
	for _, sc := range scenarios {
		if slices.Contains(want, sc.name) {
			out = append(out, sc)
		}
	}
	for _, n := range want {
		if !slices.ContainsFunc(scenarios, func(sc scenario) bool { return sc.name == n }) {
			return nil, fmt.Errorf("unknown scenario %q (want solo, a, b, c, d, e)", n)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no scenario chosen")
	}
	return out, nil
}
