// Command e2e measures hookline end to end: events published through the
// api at a fixed rate, delivered by workers as signed POSTs to a local
// receiver that answers 200 at once, each attempt durable in Postgres. It
// reports sustained deliveries/s, publish latency, publish-to-receipt
// latency, losses and duplicates.
//
//	go run ./bench/e2e -rates 500,1000,2000 -duration 15s
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
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
	"github.com/hookline/hookline/internal/metrics"
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
	out := flag.String("out", "docs/BENCHMARKS.md", "append the results here (empty: print only)")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the whole run here")
	orderings := flag.String("ordering", "none", "comma-separated ordering_guarantee values to compare (none, per_event_type, strict); each gets its own tenant and webhooks")
	flag.Parse()
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			log.Fatal(err)
		}
		_ = pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}

	rc := newReceiver()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	srv := &http.Server{Handler: rc, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()

	sys, err := system.Start(context.Background(), system.Options{Workers: *workers, WorkerConcurrency: *concurrency, Prefetch: *prefetch, MaxConnsPerHost: *perHost, Guard: *guard})
	if err != nil {
		log.Fatal(err)
	}
	defer sys.Close()
	urls := make([]string, *hooks)
	for i := range urls {
		urls[i] = "http://" + ln.Addr().String() + "/hook"
	}

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
	for _, ordering := range strings.Split(*orderings, ",") {
		ordering = strings.TrimSpace(ordering)
		key, err := sys.Tenant(fmt.Sprintf(`"ordering_guarantee": %q`, ordering), urls...)
		if err != nil {
			log.Fatal(err)
		}
		for _, r := range strings.Split(*rates, ",") {
			rate, err := strconv.Atoi(strings.TrimSpace(r))
			if err != nil || rate <= 0 {
				log.Fatalf("bad rate %q", r)
			}
			before, busyBefore := report.SampleCPU(), hostBusy()
			res := run(sys, rc, key, rate, *duration, *payload, *hooks)
			cpu := report.CPUUse(before, report.SampleCPU())
			busy := fmt.Sprintf("%.0f", hostBusy()-busyBefore)
			table.Rows = append(table.Rows, append(append([]string{ordering}, res.row(rate)...), busy, cpu))
		}
	}
	if err := report.Emit(table, *out); err != nil {
		log.Fatal(err)
	}
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
}

func newReceiver() *receiver { return &receiver{seen: map[string]int{}} }

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	now := time.Now()
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
