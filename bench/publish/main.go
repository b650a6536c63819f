// Command publish measures the publish path: events POSTed to an
// in-process api (HTTP over loopback, tenant auth, validation, idempotency,
// one-statement fan-out commit, post-commit publish with confirms) at fixed
// rates and at the open-loop maximum, with 1 KiB payloads.
//
//	go run ./bench/publish -rates 500,1000,2000,max -webhooks 1,100 -duration 10s
//
// With -modes it compares the ways of publishing instead, on the api,
// worker and dlq binaries as deployed: single events, batches and the
// RabbitMQ exchange, each at saturation (events/s, the api's CPU per
// event) and at a fixed rate (publish-to-receipt), see compare.go:
//
//	go run ./bench/publish -modes single,batch,queue -rate 1000 -batch 100 -duration 10s
//
// With -filters it compares webhooks with and without payload filters:
// one tenant per configuration, the configurations run in turn, -rounds
// times, each row giving its throughput against the unfiltered run of the
// same round.
//
//	go run ./bench/publish -rates max -webhooks 100 -filters none,same,distinct -rounds 2 -duration 20s
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
	record := flag.String("record", "", "also append the table, with the machine, date and command, to this file (default: print only)")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the whole run (api and load generator) here")
	filters := flag.String("filters", "", "payload filter configurations to compare, run in turn: none, same (every webhook `data.amount > 100`), distinct (webhook i `data.amount > i`); every event matches them all")
	rounds := flag.Int("rounds", 1, "with -filters, how many times the configurations run in turn")
	modes := flag.String("modes", "", "compare ways of publishing on the deployed binaries instead: single, batch, queue (comma-separated)")
	rate := flag.Int("rate", 1000, "with -modes, the events/s of the publish-to-receipt runs")
	batch := flag.Int("batch", 100, "with -modes, the events of each batch request")
	flag.Parse()
	report.FlushWrites()
	if *modes != "" {
		o := compareOptions{rate: *rate, duration: *duration, concurrency: *concurrency, batch: *batch, size: *payload, out: *record}
		for _, m := range strings.Split(*modes, ",") {
			if m = strings.TrimSpace(m); m != modeSingle && m != modeBatch && m != modeQueue {
				log.Fatalf("unknown mode %q (single, batch, queue)", m)
			}
			o.modes = append(o.modes, strings.TrimSpace(m))
		}
		if err := compare(context.Background(), o); err != nil {
			log.Fatal(err)
		}
		return
	}
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
	configs := filterConfigs(*filters)
	if *filters != "" {
		table.Title = "Publish path with payload filters: POST /v1/events"
		table.Notes = append(table.Notes,
			"Filters: none (no filter), same (every webhook `data.amount > 100`), distinct (webhook i `data.amount > i`, as many expressions as webhooks). Every event has `\"amount\": 150`, so every filter matches and every configuration makes the same deliveries. One tenant per configuration; in each round the configurations run one after the other, each from empty event tables, round n starting with the n-th configuration. vs none: accepted/s against the run without filters of the same round.")
		table.Header = append([]string{"round", "filters"}, append(table.Header, "vs none")...)
	}
	for _, h := range splitInts(*hooks) {
		urls := make([]string, h)
		for i := range urls {
			urls[i] = fmt.Sprintf("http://127.0.0.1:9/hook-%d", i)
		}
		keys := make([]string, len(configs))
		for i, c := range configs {
			key, err := sys.TenantEach(c.extra, urls...)
			if err != nil {
				log.Fatal(err)
			}
			keys[i] = key
		}
		for round := 1; round <= max(1, *rounds); round++ {
			table.Rows = append(table.Rows, runRound(sys, configs, keys, round, h, *rates, *filters != "", func(key, rate string) result {
				return run(sys, key, rate, *duration, *concurrency, *payload)
			})...)
		}
	}
	if err := report.Emit(table, *record); err != nil {
		log.Fatal(err)
	}
}

// runRound runs every configuration at every rate and returns their rows.
// Comparing filters, round n starts with configuration n-1 (in turn), so
// that none always runs first, and each run starts from empty event
// tables; each row ends with its throughput against the run without
// filters at the same rate.
func runRound(sys *system.System, configs []filterConfig, keys []string, round, hooks int, rates string, compare bool,
	run func(key, rate string) result) [][]string {
	var rows [][]string
	base := map[string]float64{}
	accepted := map[int]float64{}
	for k := range configs {
		i := k
		if compare {
			i = (k + round - 1) % len(configs)
		}
		for _, r := range strings.Split(rates, ",") {
			r = strings.TrimSpace(r)
			if compare {
				if err := sys.ClearEvents(); err != nil {
					log.Fatalf("clear events: %v", err)
				}
			}
			row, a := resultRow(hooks, r, run(keys[i], r))
			if compare {
				if configs[i].name == "none" {
					base[r] = a
				}
				accepted[len(rows)] = a
				row = append([]string{strconv.Itoa(round), configs[i].name}, row...)
			}
			rows = append(rows, row)
			if err := sys.Purge(); err != nil {
				log.Printf("purge: %v", err)
			}
		}
	}
	if compare {
		for n, row := range rows {
			rows[n] = append(row, ratio(accepted[n], base[row[3]]))
		}
	}
	return rows
}

// resultRow is a run's row of the table and its accepted events per second.
func resultRow(hooks int, rate string, res result) ([]string, float64) {
	lat := report.Sort(res.latencies)
	accepted := float64(len(lat)) / res.elapsed.Seconds()
	return []string{
		strconv.Itoa(hooks), rate,
		fmt.Sprintf("%.0f", accepted),
		strconv.FormatInt(res.errors, 10),
		fmt.Sprintf("%.0f", float64(res.deliveries)/res.elapsed.Seconds()),
		fmt.Sprintf("%.0f", res.enqueuedRate),
		report.Ms(report.Percentile(lat, 50)), report.Ms(report.Percentile(lat, 99)),
		report.Ms(report.Percentile(lat, 99.9)), report.Ms(report.Percentile(lat, 100)),
	}, accepted
}

func ratio(v, base float64) string {
	if base == 0 {
		return "–"
	}
	return fmt.Sprintf("%.3f", v/base)
}

// filterConfig is a way of registering a tenant's webhooks: extra(i) holds
// the extra JSON fields of webhook i.
type filterConfig struct {
	name  string
	extra func(i int) string
}

// filterConfigs parses -filters; empty is one configuration without
// filters.
func filterConfigs(list string) []filterConfig {
	if list == "" {
		return []filterConfig{{name: "none", extra: func(int) string { return "" }}}
	}
	var out []filterConfig
	for _, name := range strings.Split(list, ",") {
		c := filterConfig{name: strings.TrimSpace(name)}
		switch c.name {
		case "none":
			c.extra = func(int) string { return "" }
		case "same":
			c.extra = func(int) string { return `"filter": "data.amount > 100"` }
		case "distinct":
			c.extra = func(i int) string { return fmt.Sprintf(`"filter": "data.amount > %d"`, i) }
		default:
			log.Fatalf("unknown filter configuration %q (none, same, distinct)", name)
		}
		out = append(out, c)
	}
	return out
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
	filler := strings.Repeat("x", max(size-75, 1))
	return []byte(fmt.Sprintf(`{"event_type": "bench.created", "data": {"seq": SEQ, "amount": 150, "filler": %q}}`, filler))
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
