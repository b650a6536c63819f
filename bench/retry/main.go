// Command retry measures retry precision: deliveries whose endpoint fails
// the first two attempts, with retries scheduled 1 s and 2 s after the
// failures (retry_config.schedule_ms, no jitter), and the distribution of
// each retry's actual start minus its scheduled time.
//
//	go run ./bench/retry -deliveries 1000
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookline/hookline/bench/internal/report"
	"github.com/hookline/hookline/bench/internal/system"
)

func main() {
	n := flag.Int("deliveries", 1000, "deliveries, each failing twice")
	record := flag.String("record", "", "also append the table, with the machine, date and command, to this file (default: print only)")
	flag.Parse()
	report.FlushWrites()
	ctx := context.Background()

	// The receiver fails the first two requests of every delivery.
	var mu sync.Mutex
	seen := map[string]int{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go func() {
		srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			mu.Lock()
			seen[r.Header.Get("X-Webhook-Delivery")]++
			k := seen[r.Header.Get("X-Webhook-Delivery")]
			mu.Unlock()
			if k <= 2 {
				w.WriteHeader(http.StatusServiceUnavailable)
			}
		})}
		_ = srv.Serve(ln)
	}()

	sys, err := system.Start(ctx, system.Options{Workers: 1, WorkerConcurrency: 256, Prefetch: 256, MaxConnsPerHost: 256})
	if err != nil {
		log.Fatal(err)
	}
	defer sys.Close()
	key, err := sys.Tenant(`"retry_config": {"max_attempts": 5, "schedule_ms": [1000, 2000]}`, "http://"+ln.Addr().String()+"/hook")
	if err != nil {
		log.Fatal(err)
	}
	// Keep-alive: enough idle connections that no publish dials a new one.
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	for i := range *n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			req, _ := http.NewRequest(http.MethodPost, sys.URL+"/v1/events",
				strings.NewReader(fmt.Sprintf(`{"event_type": "bench.retry", "data": {"i": %d}}`, i)))
			req.Header.Set("Authorization", "Bearer "+key)
			res, err := client.Do(req)
			if err != nil {
				log.Fatal(err)
			}
			res.Body.Close()
		}()
	}
	wg.Wait()

	conn, err := pgx.Connect(ctx, sys.DBURL)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close(ctx)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var done int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM deliveries WHERE status = 'succeeded'`).Scan(&done); err != nil {
			log.Fatal(err)
		}
		if done == *n {
			break
		}
		if time.Now().After(deadline) {
			log.Fatalf("%d of %d deliveries succeeded within 2 minutes", done, *n)
		}
		time.Sleep(250 * time.Millisecond)
	}
	table := report.Table{
		Title:   "Retry precision: actual minus scheduled start of each retry",
		Command: "go run ./bench/retry -deliveries " + fmt.Sprint(*n),
		Notes: []string{
			fmt.Sprintf("%d deliveries to one local endpoint that answers 503 to the first two attempts of each; retries scheduled 1 s and 2 s after each failure (schedule_ms [1000, 2000]); one in-process worker with 256 in flight; the api and the load generator in the same process; Postgres, Redis and RabbitMQ local.", *n),
			"Scheduled: next_attempt_at recorded with the failed attempt (the failure's answer plus the delay). Actual: the retry's executed_at, taken by the worker when it starts the attempt. Negative would mean early; the delay queues never hand a message out before its time.",
		},
		Header: []string{"retry", "count", "min", "p50", "p90", "p99", "max"},
	}
	for _, attempt := range []int{2, 3} {
		rows, err := conn.Query(ctx, `SELECT (extract(epoch FROM executed_at - scheduled_at) * 1e6)::bigint
			FROM delivery_attempts WHERE attempt_number = $1`, attempt)
		if err != nil {
			log.Fatal(err)
		}
		lates, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (time.Duration, error) {
			var us int64
			err := row.Scan(&us)
			return time.Duration(us) * time.Microsecond, err
		})
		if err != nil {
			log.Fatal(err)
		}
		s := report.Sort(lates)
		table.Rows = append(table.Rows, []string{
			fmt.Sprintf("attempt %d (%d s after a failure)", attempt, attempt-1), fmt.Sprint(len(s)),
			report.Ms(s[0]), report.Ms(report.Percentile(s, 50)), report.Ms(report.Percentile(s, 90)),
			report.Ms(report.Percentile(s, 99)), report.Ms(s[len(s)-1]),
		})
	}
	if err := report.Emit(table, *record); err != nil {
		log.Fatal(err)
	}
}
