// Command backlog measures a backlog drain with real processes: the api
// (built from cmd/api) accepts N events while no worker runs, so that N
// deliveries wait on RabbitMQ; then one worker (cmd/worker) starts and
// drains them to a local receiver. It reports the publish rate, the drain
// rate, the peak resident memory of the worker and of the api, and the
// Postgres space per delivery.
//
//	go run ./bench/backlog -events 1000000
package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/hookline/hookline/bench/internal/report"
	"github.com/hookline/hookline/bench/internal/seqload"
	"github.com/hookline/hookline/internal/db/dbtest"
	"github.com/hookline/hookline/internal/queue/queuetest"
)

const adminToken = "bench-admin-token-0123456789"

func main() {
	events := flag.Int("events", 1_000_000, "events published (one delivery each) before the worker starts")
	clients := flag.Int("clients", 64, "concurrent publishing clients")
	size := flag.Int("payload", 1024, "approximate event data size in bytes")
	record := flag.String("record", "", "also append the table, with the machine, date and command, to this file (default: print only)")
	flag.Parse()
	ctx := context.Background()

	bin, err := os.MkdirTemp("", "hookline-backlog-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(bin)
	if out, err := exec.Command("go", "build", "-o", bin+"/", "./cmd/api", "./cmd/worker").CombinedOutput(); err != nil {
		log.Fatalf("build: %v\n%s", err, out)
	}
	report.FlushWrites()
	dbURL, drop, err := dbtest.Create(false)
	if err != nil {
		log.Fatal(err)
	}
	defer drop()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	prefix := "backlog-" + hex.EncodeToString(b)
	defer deleteQueues(prefix)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	var received atomic.Int64
	go func() {
		srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			received.Add(1)
		})}
		_ = srv.Serve(ln)
	}()

	apiAddr := freeAddr()
	env := []string{"HOOKLINE_CONFIG=", "ADMIN_TOKEN=" + adminToken, "DATABASE_URL=" + dbURL, "AMQP_PREFIX=" + prefix,
		"REDIS_PREFIX=" + prefix + ":", "ALLOW_PRIVATE_NETWORKS=true", "LOG_LEVEL=warn"}
	api := start(filepath.Join(bin, "api"), append(env, "API_ADDR="+apiAddr))
	defer stop(api)
	base := "http://" + apiAddr
	waitOK(base + "/readyz")

	var tenant struct {
		APIKey string `json:"api_key"`
	}
	must(post(base+"/v1/tenants", adminToken, `{"name": "backlog", "rate_limit": {"requests_per_minute": 10000000, "burst": 1000000},
		"publish_rate_limit": {"requests_per_second": 1000000, "burst": 1000000}}`, &tenant))
	must(post(base+"/v1/webhooks", tenant.APIKey, fmt.Sprintf(`{"url": "http://%s/hook", "events": ["*"],
		"rate_limit": {"requests_per_minute": 1000000, "burst": 100000}}`, ln.Addr()), nil))

	body := fmt.Sprintf(`{"event_type": "bench.backlog", "data": {"filler": %q}}`, strings.Repeat("x", max(0, *size-40)))
	var next, failed atomic.Int64
	var wg sync.WaitGroup
	pubStart := time.Now()
	for range *clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(*events) {
				if post(base+"/v1/events", tenant.APIKey, body, nil) != nil {
					failed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	pubRate := float64(*events) / time.Since(pubStart).Seconds()
	if failed.Load() > 0 {
		log.Fatalf("%d publishes failed", failed.Load())
	}
	log.Printf("published %d events at %.0f/s; waiting for the outbox to enqueue them", *events, pubRate)
	for depth(prefix) < *events {
		time.Sleep(time.Second)
	}
	apiPeak := peakRSS(api.Process.Pid)

	worker := start(filepath.Join(bin, "worker"), append(env, "METRICS_ADDR="+freeAddr()))
	defer stop(worker)
	drainStart := time.Now()
	var workerPeak int64
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close(ctx)
	// Progress is followed at the receiver, so that the measurement adds no
	// query over the whole table; once every request has arrived, the
	// drain ends when Postgres holds every delivery as succeeded (counted
	// every 2 s).
	var seen int64
	last := time.Now()
	for deadline := time.Now().Add(time.Minute); seen < int64(*events) && time.Now().Before(deadline); {
		time.Sleep(500 * time.Millisecond)
		workerPeak = max(workerPeak, currentRSS(worker.Process.Pid))
		if got := received.Load(); got != seen {
			seen = got
			deadline = time.Now().Add(time.Minute)
		}
	}
	var done int64
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(2 * time.Second) {
		workerPeak = max(workerPeak, currentRSS(worker.Process.Pid))
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM deliveries WHERE status = 'succeeded'`).Scan(&done); err != nil {
			log.Fatal(err)
		}
		last = time.Now()
		if done >= int64(*events) {
			break
		}
	}
	if done < int64(*events) {
		log.Fatalf("only %d of %d deliveries succeeded", done, *events)
	}
	drainRate := float64(done) / last.Sub(drainStart).Seconds()
	workerPeak = max(workerPeak, peakRSS(worker.Process.Pid))
	var dbBytes, tableBytes int64
	must(conn.QueryRow(ctx, `SELECT pg_database_size(current_database()),
		pg_total_relation_size('events') + pg_total_relation_size('deliveries') +
		(SELECT coalesce(sum(pg_total_relation_size(inhrelid)), 0) FROM pg_inherits WHERE inhparent = 'delivery_attempts'::regclass)`).Scan(&dbBytes, &tableBytes))

	table := report.Table{
		Title:   "Backlog and memory: a queued backlog drained by one worker process",
		Command: "go run ./bench/backlog " + strings.Join(os.Args[1:], " "),
		Notes: []string{
			fmt.Sprintf("The api and worker binaries as deployed (default settings: worker concurrency and prefetch 256, 5 connections per endpoint host), Postgres, Redis and RabbitMQ local; %d events with %d-byte payloads to one webhook, published by %d clients while no worker ran; then one worker drains them to a local receiver answering 200.", *events, *size, *clients),
			"Worker RSS: the highest resident set seen (sampled every 0.5 s, and VmHWM at the end). Postgres per delivery: events, deliveries and attempts with their indexes, divided by the deliveries.",
		},
		Header: []string{"measure", "value"},
		Rows: [][]string{
			{"publish rate (backlog build-up)", fmt.Sprintf("%.0f events/s", pubRate)},
			{"drain rate (worker start to last success)", fmt.Sprintf("%.0f deliveries/s", drainRate)},
			{"drain time", last.Sub(drainStart).Round(time.Second).String()},
			{"worker RSS peak", fmt.Sprintf("%.0f MB", float64(workerPeak)/1e6)},
			{"api RSS peak", fmt.Sprintf("%.0f MB", float64(apiPeak)/1e6)},
			{"Postgres per delivery (event, delivery, attempt)", fmt.Sprintf("%.0f bytes", float64(tableBytes)/float64(done))},
			{"Postgres database size", fmt.Sprintf("%.0f MB", float64(dbBytes)/1e6)},
			{"requests received", fmt.Sprint(received.Load())},
		},
	}
	must(report.Emit(table, *record))
}

func start(path string, env []string) *exec.Cmd {
	cmd := exec.Command(path)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	must(cmd.Start())
	return cmd
}

func stop(cmd *exec.Cmd) {
	_ = cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
	}
}

// currentRSS and peakRSS read VmRSS and VmHWM of pid, in bytes.
func currentRSS(pid int) int64 { return statusKB(pid, "VmRSS:") * 1024 }
func peakRSS(pid int) int64    { return statusKB(pid, "VmHWM:") * 1024 }

func statusKB(pid int, field string) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), field); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb
		}
	}
	return 0
}

func depth(prefix string) int {
	conn, err := amqp.Dial(queuetest.URL())
	if err != nil {
		return 0
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return 0
	}
	n := 0
	for _, p := range []string{"high", "normal", "low"} {
		if q, err := ch.QueueDeclarePassive(prefix+".work."+p, true, false, false, false, nil); err == nil {
			n += q.Messages
		}
	}
	return n
}

func deleteQueues(prefix string) {
	conn, err := amqp.Dial(queuetest.URL())
	if err != nil {
		return
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return
	}
	for _, p := range []string{"high", "normal", "low"} {
		_, _ = ch.QueueDelete(prefix+".work."+p, false, false, false)
	}
	_, _ = ch.QueueDelete(prefix+".dead", false, false, false)
	for i := range 21 {
		_, _ = ch.QueueDelete(fmt.Sprintf("%s.delay.%dms", prefix, (100*time.Millisecond<<i).Milliseconds()), false, false, false)
	}
	for _, x := range []string{".work", ".delay", ".requeue", ".dead"} {
		_ = ch.ExchangeDelete(prefix+x, false, false)
	}
}

func freeAddr() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(err)
	defer l.Close()
	return l.Addr().String()
}

func waitOK(url string) {
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if res, err := http.Get(url); err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return
			}
		}
	}
	log.Fatalf("%s not ready within 60s", url)
}

// client keeps an idle connection for each publishing client (at most
// 1024), so that publishes do not dial new ones.
var client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1024}}

// post sends a request of the load program's own client.
func post(url, token, body string, out any) error {
	return seqload.Post(context.Background(), client, url, token, body, out)
}

func must(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
