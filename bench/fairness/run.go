package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"slices"
	"strings"
	"time"

	"github.com/hookline/hookline/bench/internal/deploy"
)

// quietBusy is the machine load, in cores, under which a scenario starts
// publishing: the idle system itself uses a few hundredths.
const quietBusy = 0.3

// shareWindow is how soon after its scheduled publish a quiet event must
// be received to count as delivered.
const shareWindow = 30 * time.Second

// options are the flags that shape every scenario.
type options struct {
	duration, drain time.Duration
	quietRate       float64
	tenants         int // e's quiet tenants
	bin             deploy.Binaries
	logDir          string
	idleWait        time.Duration // wait at most this long for a quiet machine before publishing
	workers         int           // worker processes
	// republishesKnown: the worker registers the re-publish counter, so
	// its absence from a scrape means none happened.
	republishesKnown bool
}

// result is what one scenario measured.
type result struct {
	sc                         scenario
	quietAccepted, quietFailed int64
	quietLat                   []time.Duration // received quiet events, sorted
	quietWithin                int64           // received within shareWindow
	noisyAccepted, noisyFailed int64
	noisyReached               int64 // requests that reached the noisy tenants' endpoints
	delivered                  int64 // requests answered 200 by the healthy receivers
	stats                      map[string]groupStats
	metrics                    map[string]float64
	cpu                        cpuSample // spent from the first publish to the end of the drain
	window                     time.Duration
	othersTicks                int64   // CPU of processes outside the run in the window
	busyBefore                 float64 // machine cores busy just before publishing
	quietBefore                bool    // under the quiet threshold
	publishErrs                []string
	drained                    time.Duration // from the end of publishing to the end of the drain
	tenants                    int           // created for the scenario (not the warm-up one)
	setup                      time.Duration // creating them and their webhooks
	workerRSS, workerPeak      int64         // kB: the largest worker VmRSS and VmHWM at the end of the drain
	many                       *manyResult   // e only
}

// runScenario starts a fresh system, runs sc on it and removes it again.
func runScenario(ctx context.Context, o options, sc scenario) (res result, err error) {
	log.Printf("scenario %s: starting api, %d worker(s) and dlq", sc.name, o.workers)
	sys, err := deploy.Start(ctx, deploy.Options{Binaries: o.bin, Name: "fairness", LogDir: o.logDir, Workers: o.workers})
	if err != nil {
		return result{}, err
	}
	defer func() {
		log.Printf("scenario %s: stopping and removing the system", sc.name)
		err = errors.Join(err, sys.Close())
	}()
	a := newAPI(sys.APIURL, sys.AdminToken)
	defer a.close()
	if err := warmUp(ctx, a); err != nil {
		return result{}, fmt.Errorf("warm-up: %w", err)
	}
	began := time.Now()
	s, err := newSetup(ctx, a, sc, o)
	defer s.close() // receivers close before the system stops: nothing hangs on shutdown
	if err != nil {
		return result{}, fmt.Errorf("tenants and webhooks: %w", err)
	}
	took := time.Since(began)
	log.Printf("scenario %s: %d tenants and their webhooks created in %s", sc.name, len(s.groupOf), took.Round(time.Millisecond))
	res, err = measure(ctx, o, sc, sys, s)
	res.tenants, res.setup = len(s.groupOf), took
	return res, err
}

// measure publishes, drains and reads every measure of the scenario.
func measure(ctx context.Context, o options, sc scenario, sys *deploy.System, s *setup) (result, error) {
	var pids []int
	for _, name := range sys.Names() {
		pids = append(pids, sys.Pid(name))
	}
	busy, quiet, err := waitQuiet(ctx, quietBusy, o.idleWait)
	if err != nil {
		return result{}, err
	}
	if !quiet {
		log.Printf("scenario %s: the machine is still %.2f cores busy after %s; measuring anyway", sc.name, busy, o.idleWait)
	}
	before, err := sampleCPU(pids)
	if err != nil {
		return result{}, err
	}
	log.Printf("scenario %s: publishing for %s", sc.name, o.publishFor(sc))
	publish(ctx, sys.APIURL, s.streams(), time.Now())
	published := time.Now()
	if err := drain(ctx, s, o.drain); err != nil {
		return result{}, err
	}
	after, err := sampleCPU(pids)
	if err != nil {
		return result{}, err
	}
	res := collect(sc, s)
	for _, name := range sys.Names() {
		if !strings.HasPrefix(name, "worker") {
			continue
		}
		rss, peak, err := residentKB(sys.Pid(name))
		if err != nil {
			return result{}, err
		}
		res.workerRSS, res.workerPeak = max(res.workerRSS, rss), max(res.workerPeak, peak)
	}
	res.drained = after.at.Sub(published)
	res.cpu = cpuSample{busy: after.busy - before.busy, hookline: after.hookline - before.hookline}
	res.window = after.at.Sub(before.at)
	res.othersTicks = othersTicks(before.procs, after.procs, pids, sys.DBName)
	res.busyBefore, res.quietBefore = busy, quiet
	res.metrics = map[string]float64{}
	for _, url := range sys.WorkerMetricsURLs {
		m, err := scrape(ctx, url, metricRepublishes, metricDeliveries, metricPostponed)
		if err != nil {
			return result{}, err
		}
		for k, v := range m {
			res.metrics[k] += v
		}
	}
	if res.stats, err = deliveryStats(ctx, sys.DBURL, s.groupOf); err != nil {
		return result{}, err
	}
	return res, nil
}

// drain waits until every accepted quiet event has been received, or
// limit has passed.
func drain(ctx context.Context, s *setup, limit time.Duration) error {
	err := waitFor(ctx, limit, func() bool {
		for _, t := range s.quiet {
			if int64(t.recv.received()) < t.stream.accepted.Load() {
				return false
			}
		}
		return true
	})
	if ctx.Err() != nil {
		return ctx.Err()
	}
	_ = err // not all received within the limit: that is a measurement
	return nil
}

// collect reads what the receivers and publishers counted.
func collect(sc scenario, s *setup) result {
	res := result{sc: sc}
	for _, t := range s.quiet {
		res.quietAccepted += t.stream.accepted.Load()
		res.quietFailed += t.stream.failed.Load()
		res.delivered += t.recv.requests.Load()
		for _, l := range t.recv.latencies() {
			if l > 0 {
				res.quietLat = append(res.quietLat, l)
				if l <= shareWindow {
					res.quietWithin++
				}
			}
		}
		if t.stream.failed.Load() > 0 {
			res.publishErrs = append(res.publishErrs, "quiet: "+t.stream.err())
		}
		if n := len(t.stream.keys); n > 1 {
			m := tenantsKept(t.recv.latencies(), n)
			m.crossed, m.dups = t.recv.crossed.Load(), t.recv.dups.Load()
			res.many = &m
		}
	}
	slices.Sort(res.quietLat)

	for _, t := range []*tenantLoad{s.hang, s.flood} {
		if t == nil {
			continue
		}
		res.noisyAccepted += t.stream.accepted.Load()
		res.noisyFailed += t.stream.failed.Load()
		if t.stream.failed.Load() > 0 {
			res.publishErrs = append(res.publishErrs, t.stream.eventType+": "+t.stream.err())
		}
		if t.recv != nil {
			res.delivered += t.recv.requests.Load()
			res.noisyReached += t.recv.requests.Load()
		}
		for _, h := range t.hangs {
			res.noisyReached += h.accepted.Load()
		}
	}
	return res
}
