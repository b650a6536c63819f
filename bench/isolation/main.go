// Command isolation measures how well healthy endpoints keep their
// throughput and latency while some endpoints hang: N webhooks, each on
// its own local receiver, a fraction of which never answer (so each attempt
// to them runs into its timeout), against a run where every endpoint is
// healthy. Workers run with their circuit breakers and per-host limits.
//
//	go run ./bench/isolation -webhooks 100 -hanging 20 -rate 8 -duration 20s
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
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hookline/hookline/bench/internal/report"
	"github.com/hookline/hookline/bench/internal/system"
)

func main() {
	hooks := flag.Int("webhooks", 100, "webhooks, each on its own receiver")
	hanging := flag.Int("hanging", 20, "how many of them hang until the attempt times out")
	rate := flag.Int("rate", 8, "events per second; each fans out to every webhook")
	duration := flag.Duration("duration", 20*time.Second, "publishing time per run")
	timeout := flag.Int("timeout-ms", 1000, "the webhooks' attempt timeout")
	concurrency := flag.Int("concurrency", 256, "deliveries in flight per worker")
	record := flag.String("record", "", "also append the table, with the machine, date and command, to this file (default: print only)")
	flag.Parse()
	report.FlushWrites()

	table := report.Table{
		Title:   "Isolation: healthy endpoints while others hang",
		Command: "go run ./bench/isolation " + strings.Join(os.Args[1:], " "),
		Notes: []string{
			fmt.Sprintf("%d webhooks, each on its own local receiver; %d events/s, each fanned out to every webhook, for %s; attempt timeout %d ms, 2 attempts; one worker with %d deliveries in flight (and as many prefetched), 5 per endpoint host, circuit breakers on (defaults: 20 calls, 60 %%, 30 s sleep).",
				*hooks, *rate, *duration, *timeout, *concurrency),
			fmt.Sprintf("Healthy = the %d webhooks that answer 200 in both runs; throughput counts their receipts during the publishing time plus 5 s. An unmeasured 5 s warm-up run comes first.", *hooks-*hanging),
		},
		Header: []string{"run", "hanging", "healthy receipts/s", "healthy p50", "healthy p99", "healthy p99.9"},
	}
	// A short unmeasured run first, so that neither measured run pays for
	// cold caches.
	run(*hooks, 0, *hanging, *rate, 5*time.Second, *timeout, *concurrency)
	var base float64
	var baseP99 time.Duration
	for _, h := range []int{0, *hanging} {
		res := run(*hooks, h, *hanging, *rate, *duration, *timeout, *concurrency)
		lat := report.Sort(res.lat)
		p99 := report.Percentile(lat, 99)
		name := "all healthy"
		if h > 0 {
			name = fmt.Sprintf("%d hanging", h)
		}
		table.Rows = append(table.Rows, []string{name, strconv.Itoa(h), fmt.Sprintf("%.0f", res.rate),
			report.Ms(report.Percentile(lat, 50)), report.Ms(p99), report.Ms(report.Percentile(lat, 99.9))})
		if h == 0 {
			base, baseP99 = res.rate, p99
		} else if base > 0 && baseP99 > 0 {
			table.Notes = append(table.Notes, fmt.Sprintf("With %d hanging: healthy throughput %.0f %% of the all-healthy run (goal >= 90 %%), healthy p99 %.2fx (goal <= 2x).",
				h, 100*res.rate/base, float64(p99)/float64(baseP99)))
		}
	}
	if err := report.Emit(table, *record); err != nil {
		log.Fatal(err)
	}
}

type result struct {
	rate float64
	lat  []time.Duration
}

// run measures one configuration: the first hang of the webhooks hang; the
// healthy set is always webhooks [measured, hooks) so both runs compare the
// same endpoints.
func run(hooks, hang, measured, rate int, d time.Duration, timeoutMS, concurrency int) result {
	sys, err := system.Start(context.Background(), system.Options{Workers: 1, WorkerConcurrency: concurrency, Prefetch: concurrency, Guard: true})
	if err != nil {
		log.Fatal(err)
	}
	defer sys.Close()
	rc := &recorder{}
	var urls []string
	var servers []*http.Server
	for i := range hooks {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			log.Fatal(err)
		}
		var h http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			<-r.Context().Done()
		})
		if i >= hang {
			h = rc.handler(i >= measured)
		}
		srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
		servers = append(servers, srv)
		go func() { _ = srv.Serve(ln) }()
		urls = append(urls, "http://"+ln.Addr().String()+"/hook")
	}
	defer func() {
		for _, s := range servers {
			_ = s.Close()
		}
	}()
	key, err := sys.Tenant(fmt.Sprintf(`"retry_config": {"timeout_ms": %d, "max_attempts": 2, "base_delay_ms": 1000}`, timeoutMS), urls...)
	if err != nil {
		log.Fatal(err)
	}
	// Keep-alive: enough idle connections that no publish dials a new one.
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	interval := time.Second / time.Duration(rate)
	start := time.Now()
	for i := 0; time.Since(start) < d; i++ {
		scheduled := start.Add(time.Duration(i) * interval)
		time.Sleep(time.Until(scheduled))
		body := fmt.Sprintf(`{"event_type": "bench.isolation", "data": {"sent_ns": %d}}`, scheduled.UnixNano())
		req, _ := http.NewRequest("POST", sys.URL+"/v1/events", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := client.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
	time.Sleep(5 * time.Second)
	lat := rc.take()
	return result{rate: float64(len(lat)) / (d + 5*time.Second).Seconds(), lat: lat}
}

// recorder collects receipt latencies of the measured webhooks.
type recorder struct {
	mu  sync.Mutex
	lat []time.Duration
}

func (rc *recorder) handler(measure bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		now := time.Now()
		if lat, ok := report.SentLatency(body, now); ok && measure {
			rc.mu.Lock()
			rc.lat = append(rc.lat, lat)
			rc.mu.Unlock()
		}
		w.WriteHeader(http.StatusOK)
	})
}

func (rc *recorder) take() []time.Duration {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]time.Duration(nil), rc.lat...)
}
