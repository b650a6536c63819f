// Command publish measures the publish path: events POSTed to an
// in-process api (HTTP over loopback, tenant auth, validation, idempotency,
// one-statement fan-out commit, post-commit publish with confirms) at fixed
// rates and at the open-loop maximum, with 1 KiB payloads.
//
//	go run ./bench/publish -rates 500,1000,2000,max -webhooks 1,100 -duration 10s
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookline/hookline/bench/internal/report"
	"github.com/hookline/hookline/bench/internal/system"
)

func main() {
	rates := flag.String("rates", "500,1000,2000,5000,max", "comma-separated events/s; max = closed loop with -concurrency clients")
	hooks := flag.String("webhooks", "1,100", "comma-separated numbers of subscribed webhooks")
	duration := flag.Duration("duration", 10*time.Second, "length of each run")
	concurrency := flag.Int("concurrency", 64, "clients in max mode, and the cap on requests in flight at fixed rates")
	payload := flag.Int("payload", 1024, "approximate size of each event's data in bytes")
	out := flag.String("out", "docs/BENCHMARKS.md", "append the results here (empty: print only)")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the whole run (api and load generator) here")
	flag.Parse()
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			log.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			log.Fatal(err)
		}
		defer pprof.StopCPUProfile()
	}

	ctx := context.Background()
	sys, err := system.Start(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer sys.Close()

	table := report.Table{
		Title:   "Publish path: POST /v1/events",
		Command: "go run ./bench/publish " + strings.Join(os.Args[1:], " "),
		Notes: []string{
			fmt.Sprintf("In-process api on loopback with its own database and queues; %s runs, %d-byte payloads; no workers (deliveries wait on the queues, purged between runs).", *duration, *payload),
			"Latency is measured from each request's scheduled send time (fixed rates) or send time (max), so queueing in the client counts.",
			"Enqueued/s: deliveries confirmed by RabbitMQ and marked in Postgres, over the run plus up to 10 s of drain.",
		},
		Header: []string{"webhooks", "target/s", "accepted/s", "errors", "deliveries/s", "enqueued/s", "p50", "p99", "p99.9", "max"},
	}
	for _, h := range splitInts(*hooks) {
		urls := make([]string, h)
		for i := range urls {
			urls[i] = fmt.Sprintf("http://127.0.0.1:9/hook-%d", i)
		}
		key, err := sys.Tenant("", urls...)
		if err != nil {
			log.Fatal(err)
		}
		for _, r := range strings.Split(*rates, ",") {
			res := run(sys, key, strings.TrimSpace(r), *duration, *concurrency, *payload)
			lat := report.Sort(res.latencies)
			table.Rows = append(table.Rows, []string{
				strconv.Itoa(h), r,
				fmt.Sprintf("%.0f", float64(len(lat))/res.elapsed.Seconds()),
				strconv.FormatInt(res.errors, 10),
				fmt.Sprintf("%.0f", float64(res.deliveries)/res.elapsed.Seconds()),
				fmt.Sprintf("%.0f", res.enqueuedRate),
				report.Ms(report.Percentile(lat, 50)), report.Ms(report.Percentile(lat, 99)),
				report.Ms(report.Percentile(lat, 99.9)), report.Ms(report.Percentile(lat, 100)),
			})
			if err := sys.Purge(); err != nil {
				log.Printf("purge: %v", err)
			}
		}
	}
	if err := report.Emit(table, *out); err != nil {
		log.Fatal(err)
	}
}

type result struct {
	latencies    []time.Duration
	errors       int64
	deliveries   int64
	elapsed      time.Duration
	enqueuedRate float64
}

func run(sys *system.System, key, rate string, d time.Duration, concurrency, size int) result {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: concurrency * 2, MaxConnsPerHost: concurrency * 2}}
	body := makeBody(size)
	var mu sync.Mutex
	var res result
	var seq atomic.Int64
	send := func(scheduled time.Time) {
		n := seq.Add(1)
		b := bytes.Replace(body, []byte("SEQ"), []byte(strconv.FormatInt(n, 10)), 1)
		req, _ := http.NewRequest("POST", sys.URL+"/v1/events", bytes.NewReader(b))
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := client.Do(req)
		lat := time.Since(scheduled)
		ok := err == nil && resp.StatusCode == http.StatusAccepted
		var deliveries int64
		if err == nil {
			var out struct{ Deliveries int64 }
			_ = json.NewDecoder(resp.Body).Decode(&out)
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			deliveries = out.Deliveries
		}
		mu.Lock()
		if ok {
			res.latencies = append(res.latencies, lat)
			res.deliveries += deliveries
		} else {
			res.errors++
		}
		mu.Unlock()
	}

	startCount := enqueued(sys)
	start := time.Now()
	if rate == "max" {
		var wg sync.WaitGroup
		for range concurrency {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Since(start) < d {
					send(time.Now())
				}
			}()
		}
		wg.Wait()
	} else {
		perSec, err := strconv.Atoi(rate)
		if err != nil || perSec <= 0 {
			log.Fatalf("bad rate %q", rate)
		}
		interval := time.Second / time.Duration(perSec)
		total := int(d / interval)
		slots := make(chan struct{}, concurrency*4)
		var wg sync.WaitGroup
		for i := range total {
			scheduled := start.Add(time.Duration(i) * interval)
			time.Sleep(time.Until(scheduled))
			slots <- struct{}{}
			wg.Add(1)
			go func() {
				defer func() { <-slots; wg.Done() }()
				send(scheduled)
			}()
		}
		wg.Wait()
	}
	res.elapsed = time.Since(start)
	// Wait (up to 10 s) for every accepted delivery to be confirmed.
	deadline := time.Now().Add(10 * time.Second)
	for enqueued(sys)-startCount < res.deliveries && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	res.enqueuedRate = float64(enqueued(sys)-startCount) / time.Since(start).Seconds()
	return res
}

// enqueued counts deliveries confirmed by the broker.
func enqueued(sys *system.System) int64 {
	conn, err := pgx.Connect(context.Background(), sys.DBURL)
	if err != nil {
		return 0
	}
	defer conn.Close(context.Background())
	var n int64
	_ = conn.QueryRow(context.Background(), `SELECT count(*) FROM deliveries WHERE enqueued_at IS NOT NULL`).Scan(&n)
	return n
}

// makeBody returns an event whose data is about size bytes, with SEQ to be
// replaced by a sequence number so every event is distinct.
func makeBody(size int) []byte {
	filler := strings.Repeat("x", max(size-60, 1))
	return []byte(fmt.Sprintf(`{"event_type": "bench.created", "data": {"seq": SEQ, "filler": %q}}`, filler))
}

func splitInts(s string) []int {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			log.Fatalf("bad number %q", f)
		}
		out = append(out, n)
	}
	return out
}
