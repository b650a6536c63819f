// Command e2e measures hookline end to end: events published through the
// api at a fixed rate, delivered by workers as signed POSTs to a local
// receiver that answers 200 at once, each attempt durable in Postgres. It
// reports sustained deliveries/s, publish latency, publish-to-receipt
// latency, losses and duplicates.
//
//	go run ./bench/e2e -rates 500,1000,2000 -duration 15s
//
// With -tracing it compares tracing configurations side by side, each on a
// system of its own, -rounds times interleaved (the machine is shared:
// compare within a round): off, or on with a share of new traces sampled,
// exporting over OTLP/HTTP to -otlp (run go run ./bench/otlpsink first). It
// adds the spans the sink received and the CPU per delivery.
//
//	go run ./bench/e2e -rates 1000 -duration 15s -tracing off,1,0.01 -rounds 2
//
// With -commit-window it compares the api's commit windows the same way
// (api.commit_window: how long a publish waits for others to share its
// commit), adding Postgres's and the machine's CPU per delivery.
//
//	go run ./bench/e2e -rates 500,1000 -duration 20s -commit-window 0,2ms,5ms,10ms -rounds 2
//
// With -pause AT:FOR the receiver stops answering for FOR, AT into each
// rate's publishing: every request it reads meanwhile is answered when the
// pause ends, as an endpoint answers through a garbage-collection pause or
// a restart behind its load balancer. It measures how quickly deliveries
// to a fast host that hiccups return to their usual latency.
//
//	go run ./bench/e2e -rates 1000 -duration 15s -pause 5s:1s
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	dto "github.com/prometheus/client_model/go"

	"github.com/hookline/hookline/bench/internal/report"
	"github.com/hookline/hookline/bench/internal/system"
	"github.com/hookline/hookline/internal/config"
	"github.com/hookline/hookline/internal/metrics"
	"github.com/hookline/hookline/internal/tracing"
)

func main() {
	rates := flag.String("rates", "500,1000,2000", "comma-separated publish rates (events/s)")
	duration := flag.Duration("duration", 15*time.Second, "publishing time per rate")
	hooks := flag.Int("webhooks", 1, "subscribed webhooks (all on the local receiver)")
	workers := flag.Int("workers", 1, "in-process worker instances")
	concurrency := flag.Int("concurrency", 256, "deliveries in flight per worker")
	prefetch := flag.Int("prefetch", 512, "unacknowledged messages per priority queue per worker")
	perHost := flag.Int("max-conns-per-host", 5, "per-endpoint-host limit of each worker")
	guard := flag.Bool("guard", true, "workers check the circuit breaker and token buckets in Redis before each attempt, as deployed")
	payload := flag.Int("payload", 1024, "approximate event data size in bytes")
	record := flag.String("record", "", "also append the table, with the machine, date and command, to this file (default: print only)")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the whole run here")
	memprofile := flag.String("memprofile", "", "write a heap profile (with every allocation of the run, alloc_space) here at the end")
	orderings := flag.String("ordering", "none", "comma-separated ordering_guarantee values to compare (none, per_event_type, strict); each gets its own tenant and webhooks")
	tracings := flag.String("tracing", "", "comma-separated tracing configurations to compare: off, or the share of new traces sampled (1 for 100 %, 0.01 for 1 %); empty: off, not reported")
	windows := flag.String("commit-window", "", "comma-separated commit windows of the api to compare (api.commit_window, such as 0,5ms,10ms); empty: the default, not reported")
	rounds := flag.Int("rounds", 1, "with -tracing or -commit-window: how many times to run every configuration, interleaved")
	otlp := flag.String("otlp", "http://127.0.0.1:4318", "with -tracing: the OTLP/HTTP receiver spans are exported to (go run ./bench/otlpsink)")
	idleWait := flag.Duration("idle-wait", 0, "before each rate, wait at most this long for the machine to be less than 0.3 cores busy (other work on a shared machine); 0: do not wait")
	pauseSpec := flag.String("pause", "", "AT:FOR: the receiver answers nothing for FOR, from AT into each rate's publishing (for example 5s:1s); empty: no pause")
	flag.Parse()
	report.FlushWrites()
	hiccup, err := parsePause(*pauseSpec)
	if err != nil {
		log.Fatal(err)
	}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			log.Fatal(err)
		}
		_ = pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	if *memprofile != "" {
		defer writeHeapProfile(*memprofile)
	}

	rc := newReceiver()
	rc.hiccup = hiccup
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	srv := &http.Server{Handler: rc, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()

	addr := "http://" + ln.Addr().String() + "/hook"
	opts := system.Options{Workers: *workers, WorkerConcurrency: *concurrency, Prefetch: *prefetch, MaxConnsPerHost: *perHost, Guard: *guard}
	guardNote := "Circuit breakers and token buckets (Redis) checked before each attempt, as deployed."
	if !*guard {
		guardNote = "Circuit breakers and token buckets off (-guard=false)."
	}
	table := report.Table{
		Title:   "End to end: publish -> signed POST received -> attempt durable",
		Command: "go run ./bench/e2e " + strings.Join(os.Args[1:], " "),
		Notes: []string{
			fmt.Sprintf("One process holds the api, %d worker(s) (%d deliveries in flight each, prefetch %d, %d per endpoint host), a receiver answering 200 at once, and the load generator; Postgres, Redis and RabbitMQ are the local services. %d webhook(s), %d-byte payloads, %s per rate.",
				*workers, *concurrency, *prefetch, *perHost, *hooks, *payload, *duration),
			guardNote,
			"CPU cores used: average over the run (publishing and draining) of each process group, from /proc: hookline (this process: api, worker, receiver and load generator), postgres (all its processes), rabbitmq (beam.smp), redis.",
			"Deliveries/s: successful attempts recorded in Postgres per second from the first publish to the last recorded success. Publish-to-receipt: from the publish request's scheduled send time to the receiver reading the POST.",
		},
		Header: []string{"ordering", "rate/s", "published", "deliveries/s", "publish p50", "publish p99", "receipt p50", "receipt p99", "receipt p99.9", "lost", "duplicates", "postponed for a busy host", "CPU cores used"},
	}
	if hiccup.length > 0 {
		table.Notes = append(table.Notes, fmt.Sprintf("The receiver answers nothing for %s from %s into each rate's publishing; the requests it reads meanwhile are answered, and their receipt timed, when the pause ends.", hiccup.length, hiccup.at))
	}
	tracingConfigs, windowConfigs := []string{""}, []string{""}
	if *tracings != "" {
		tracingConfigs = strings.Split(*tracings, ",")
		table.Notes = append(table.Notes, fmt.Sprintf("Tracing: off, or on with the share of new traces given kept (sampler parentbased_traceidratio; the publishes carry no traceparent, so each starts a trace), spans batched and exported over OTLP/HTTP to a sink in another process (%s, bench/otlpsink) that decodes and discards them. Each configuration runs on a system of its own, the configurations one after the other within a round. CPU per delivery: the CPU time of the hookline process (api, worker, receiver and load generator; the exporting included), and the busy time of the whole machine (everyone's work on it, the sink's included), divided by deliveries.", *otlp))
	}
	if *windows != "" {
		windowConfigs = strings.Split(*windows, ",")
		table.Notes = append(table.Notes, "Commit window: api.commit_window, how long a publish waits for others to share its commit. Each window runs on a system of its own, one after the other within a round. CPU per delivery: the CPU time of Postgres (all its processes) and the busy time of the whole machine, divided by deliveries.")
	}
	compared := *tracings != "" || *windows != ""
	if compared {
		var lead []string
		lead = append(lead, "round")
		if *tracings != "" {
			lead = append(lead, "tracing")
		}
		if *windows != "" {
			lead = append(lead, "commit window")
		}
		table.Header = append(lead, table.Header...)
		if *tracings != "" {
			table.Header = append(table.Header, "spans exported", "CPU per delivery: hookline")
		}
		if *windows != "" {
			table.Header = append(table.Header, "CPU per delivery: Postgres")
		}
		table.Header = append(table.Header, "CPU per delivery: machine")
	}
	for round := range max(*rounds, 1) {
		for _, tc := range tracingConfigs {
			for _, wc := range windowConfigs {
				o := opts
				if wc = strings.TrimSpace(wc); wc != "" {
					w, err := time.ParseDuration(wc)
					if err != nil {
						log.Fatalf("commit window %q: %v", wc, err)
					}
					o.CommitWindow = &w
				}
				tc = strings.TrimSpace(tc)
				rows, err := measure(o, tc, *otlp, addr, *orderings, *rates, *duration, *payload, *hooks, *idleWait, rc)
				if err != nil {
					log.Fatal(err)
				}
				for _, r := range rows {
					row := r.cells
					if compared {
						lead := []string{strconv.Itoa(round + 1)}
						if *tracings != "" {
							lead = append(lead, tracingLabel(tc))
						}
						if *windows != "" {
							lead = append(lead, wc)
						}
						row = append(lead, row...)
						if *tracings != "" {
							row = append(row, r.spans, r.hookline)
						}
						if *windows != "" {
							row = append(row, r.postgres)
						}
						row = append(row, r.machine)
					}
					table.Rows = append(table.Rows, row)
				}
			}
		}
	}
	if err := report.Emit(table, *record); err != nil {
		log.Fatal(err)
	}
}

// measured is one row of measure: the table's cells, and the figures a
// comparison adds.
type measured struct {
	cells                              []string
	spans, hookline, postgres, machine string
}

// measure runs every ordering and rate on a system of its own, traced as
// tc says ("" or "off": not traced; else the share of traces sampled),
// and returns the table's rows.
func measure(opts system.Options, tc, otlp, url, orderings, rates string, d time.Duration, payload, hooks int, idle time.Duration, rc *receiver) ([]measured, error) {
	provider, err := tracerProvider(tc, otlp)
	if err != nil {
		return nil, err
	}
	opts.Tracer = provider.Tracer()
	sys, err := system.Start(context.Background(), opts)
	if err != nil {
		return nil, err
	}
	defer sys.Close()
	urls := make([]string, hooks)
	for i := range urls {
		urls[i] = url
	}
	var rows []measured
	for _, ordering := range strings.Split(orderings, ",") {
		ordering = strings.TrimSpace(ordering)
		key, err := sys.Tenant(fmt.Sprintf(`"ordering_guarantee": %q`, ordering), urls...)
		if err != nil {
			return nil, err
		}
		for _, r := range strings.Split(rates, ",") {
			rate, err := strconv.Atoi(strings.TrimSpace(r))
			if err != nil || rate <= 0 {
				return nil, fmt.Errorf("bad rate %q", r)
			}
			waitQuiet(idle)
			before, busyBefore, spansBefore, machine := report.SampleCPU(), hostBusy(), sinkCount(otlp, tc), report.MachineTicks()
			res := run(sys, rc, key, rate, d, payload, hooks)
			// What the batches still hold is exported, and counted, before
			// the CPU is read.
			if err := provider.ForceFlush(context.Background()); err != nil {
				return nil, err
			}
			after, machine := report.SampleCPU(), report.MachineTicks()-machine
			busy := fmt.Sprintf("%.0f", hostBusy()-busyBefore)
			rows = append(rows, measured{
				cells:    append(append([]string{ordering}, res.row(rate)...), busy, report.CPUUse(before, after)),
				spans:    strconv.FormatInt(sinkCount(otlp, tc)-spansBefore, 10),
				hookline: perDelivery(after.Ticks["hookline"]-before.Ticks["hookline"], res.deliveries),
				postgres: perDelivery(after.Ticks["postgres"]-before.Ticks["postgres"], res.deliveries),
				machine:  perDelivery(machine, res.deliveries),
			})
		}
	}
	return rows, provider.Shutdown(context.Background())
}

// waitQuiet waits, at most limit, until the machine is less than 0.3
// cores busy over a second.
func waitQuiet(limit time.Duration) {
	for deadline := time.Now().Add(limit); time.Now().Before(deadline); {
		t0 := report.MachineTicks()
		time.Sleep(time.Second)
		if float64(report.MachineTicks()-t0)/100 < 0.3 {
			return
		}
	}
}

// tracerProvider is the tracing of configuration tc, exporting to otlp as
// a process with tracing on does.
func tracerProvider(tc, otlp string) (*tracing.Provider, error) {
	cfg := config.Default().Tracing
	if tc != "" && tc != "off" {
		ratio, err := strconv.ParseFloat(tc, 64)
		if err != nil || ratio <= 0 || ratio > 1 {
			return nil, fmt.Errorf("tracing configuration %q: off, or a share of traces from 0 to 1", tc)
		}
		cfg.Enabled, cfg.Endpoint, cfg.Sampler, cfg.SamplerArg = true, otlp, "parentbased_traceidratio", ratio
	}
	return tracing.Setup(context.Background(), cfg, "bench", slog.New(slog.NewTextHandler(os.Stderr, nil)))
}

func tracingLabel(tc string) string {
	tc = strings.TrimSpace(tc)
	if tc == "off" {
		return "off"
	}
	ratio, err := strconv.ParseFloat(tc, 64)
	if err != nil {
		return tc
	}
	return fmt.Sprintf("on, %g %% sampled", ratio*100)
}

// sinkCount asks the OTLP sink how many spans it has received; 0 when
// tracing is off or the sink does not answer.
func sinkCount(otlp, tc string) int64 {
	if tc == "" || tc == "off" {
		return 0
	}
	resp, err := http.Get(strings.TrimSuffix(otlp, "/") + "/count")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	var n int64
	_, _ = fmt.Fscan(resp.Body, &n)
	return n
}

// perDelivery formats clock ticks (10 ms each) per delivery in ms.
func perDelivery(ticks, deliveries int64) string {
	if deliveries <= 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.3f ms", float64(ticks)*10/float64(deliveries))
}

// hostBusy reads the in-process workers' count of deliveries put off
// because their endpoint host had no free connection.
func hostBusy() float64 {
	var m dto.Metric
	if err := metrics.DeliveriesPostponed.WithLabelValues("host_busy").Write(&m); err != nil {
		return 0
	}
	return m.GetCounter().GetValue()
}

type result struct {
	published       int
	publishLat      []time.Duration
	receiptLat      []time.Duration
	deliveries      int64
	span            time.Duration
	lost, duplicate int64
}

func (r result) row(rate int) []string {
	pl, rl := report.Sort(r.publishLat), report.Sort(r.receiptLat)
	return []string{strconv.Itoa(rate), strconv.Itoa(r.published),
		fmt.Sprintf("%.0f", float64(r.deliveries)/r.span.Seconds()),
		report.Ms(report.Percentile(pl, 50)), report.Ms(report.Percentile(pl, 99)),
		report.Ms(report.Percentile(rl, 50)), report.Ms(report.Percentile(rl, 99)), report.Ms(report.Percentile(rl, 99.9)),
		strconv.FormatInt(r.lost, 10), strconv.FormatInt(r.duplicate, 10)}
}

func run(sys *system.System, rc *receiver, key string, rate int, d time.Duration, size, hooks int) result {
	rc.reset()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 512}}
	base := succeeded(sys)
	filler := strings.Repeat("x", max(size-80, 1))
	interval := time.Second / time.Duration(rate)
	total := int(d / interval)
	var mu sync.Mutex
	var res result
	var wg sync.WaitGroup
	slots := make(chan struct{}, 512)
	start := time.Now()
	rc.begin(start)
	for i := range total {
		scheduled := start.Add(time.Duration(i) * interval)
		time.Sleep(time.Until(scheduled))
		slots <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-slots; wg.Done() }()
			body := fmt.Sprintf(`{"event_type": "bench.e2e", "data": {"sent_ns": %d, "filler": %q}}`, scheduled.UnixNano(), filler)
			req, _ := http.NewRequest("POST", sys.URL+"/v1/events", strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+key)
			resp, err := client.Do(req)
			lat := time.Since(scheduled)
			if err != nil {
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusAccepted {
				mu.Lock()
				res.published++
				res.publishLat = append(res.publishLat, lat)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	want := int64(res.published * hooks)
	// Wait for every delivery while they keep coming: a backlog (ordered
	// webhooks drain one at a time) is slow, not lost. Deliveries missing
	// after 30 s without progress are counted lost.
	deadline := time.Now().Add(30 * time.Second)
	var last time.Time
	for time.Now().Before(deadline) {
		n := succeeded(sys) - base
		if n != res.deliveries {
			res.deliveries, last = n, time.Now()
			deadline = last.Add(30 * time.Second)
		}
		if n >= want {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	res.span = last.Sub(start)
	res.lost = want - res.deliveries
	res.receiptLat, res.duplicate = rc.collect()
	return res
}

func succeeded(sys *system.System) int64 {
	conn, err := pgx.Connect(context.Background(), sys.DBURL)
	if err != nil {
		return 0
	}
	defer conn.Close(context.Background())
	var n int64
	_ = conn.QueryRow(context.Background(), `SELECT count(*) FROM deliveries WHERE status = 'succeeded'`).Scan(&n)
	return n
}

// receiver answers 200 at once and records, per request, the time since
// the event's scheduled publish and the delivery id (for duplicates).
type receiver struct {
	mu   sync.Mutex
	lat  []time.Duration
	seen map[string]int
	n    atomic.Int64
	// hiccup is the pause of every run; pauseFrom and pauseUntil (unix
	// nanoseconds) place it in the current one.
	hiccup                pause
	pauseFrom, pauseUntil atomic.Int64
}

// pause is -pause: the receiver answers nothing for length, from at into
// a run.
type pause struct{ at, length time.Duration }

func parsePause(spec string) (pause, error) {
	if spec == "" {
		return pause{}, nil
	}
	at, length, ok := strings.Cut(spec, ":")
	var p pause
	var errAt, errLength error
	p.at, errAt = time.ParseDuration(at)
	p.length, errLength = time.ParseDuration(length)
	if !ok || errAt != nil || errLength != nil || p.at < 0 || p.length <= 0 {
		return pause{}, fmt.Errorf("-pause %q: want AT:FOR, two durations such as 5s:1s", spec)
	}
	return p, nil
}

// begin places the pause in the run that starts at start.
func (rc *receiver) begin(start time.Time) {
	if rc.hiccup.length <= 0 {
		return
	}
	from := start.Add(rc.hiccup.at)
	rc.pauseFrom.Store(from.UnixNano())
	rc.pauseUntil.Store(from.Add(rc.hiccup.length).UnixNano())
}

func newReceiver() *receiver { return &receiver{seen: map[string]int{}} }

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	now := time.Now()
	if from, until := rc.pauseFrom.Load(), rc.pauseUntil.Load(); now.UnixNano() >= from && now.UnixNano() < until {
		time.Sleep(time.Until(time.Unix(0, until)))
		now = time.Now()
	}
	rc.n.Add(1)
	lat, _ := report.SentLatency(body, now)
	id := r.Header.Get("X-Webhook-Delivery")
	rc.mu.Lock()
	rc.lat = append(rc.lat, lat)
	rc.seen[id]++
	rc.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

func (rc *receiver) reset() {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.lat, rc.seen = nil, map[string]int{}
}

// collect returns the latencies and the number of deliveries received more
// than once.
func (rc *receiver) collect() ([]time.Duration, int64) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	var dup int64
	for _, n := range rc.seen {
		if n > 1 {
			dup += int64(n - 1)
		}
	}
	return append([]time.Duration(nil), rc.lat...), dup
}

// writeHeapProfile writes the heap profile to path: what the run allocated
// (alloc_space, alloc_objects) and what it still holds.
func writeHeapProfile(path string) {
	f, err := os.Create(path)
	if err != nil {
		log.Print(err)
		return
	}
	defer f.Close()
	runtime.GC()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		log.Print(err)
	}
}
