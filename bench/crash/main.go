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
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hookline/hookline/bench/internal/deploy"
	"github.com/hookline/hookline/bench/internal/report"
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

// receiver records the first arrival of each sequence number and counts
// the arrivals after it.
type receiver struct {
	mu         sync.Mutex
	seen       map[int64]bool
	duplicates int64
	last       atomic.Int64 // unix ns of the latest first arrival
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	var env struct {
		Data struct {
			Seq int64 `json:"seq"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &env); err == nil {
		r.mu.Lock()
		if r.seen[env.Data.Seq] {
			r.duplicates++
		} else {
			r.seen[env.Data.Seq] = true
			r.last.Store(time.Now().UnixNano())
		}
		r.mu.Unlock()
	}
	w.WriteHeader(http.StatusOK)
}

// publishOutcome counts what the api answered.
type publishOutcome struct {
	accepted map[int64]bool // 202: the event is the api's to deliver
	refused  int64          // no connection, or an answer other than 202
	unknown  int64          // sent, but the connection broke before an answer
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

	rc := &receiver{seen: map[int64]bool{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	recvSrv := &http.Server{Handler: rc, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = recvSrv.Serve(ln) }()
	defer recvSrv.Close()

	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 512}}
	key, err := provision(ctx, client, sys, "http://"+ln.Addr().String()+"/hook")
	if err != nil {
		return err
	}

	var mu sync.Mutex
	res := publishOutcome{accepted: map[int64]bool{}}
	jobs := make(chan int64, rate)
	var wg sync.WaitGroup
	for range 256 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := range jobs {
				verdict := publish(ctx, client, sys.APIURL, key, seq)
				mu.Lock()
				switch verdict {
				case "accepted":
					res.accepted[seq] = true
				case "unknown":
					res.unknown++
				default:
					res.refused++
				}
				mu.Unlock()
			}
		}()
	}

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
	interval := time.Second / time.Duration(rate)
	for seq := int64(0); time.Since(start) < duration && ctx.Err() == nil; seq++ {
		time.Sleep(time.Until(start.Add(time.Duration(seq) * interval)))
		jobs <- seq
	}
	close(jobs)
	wg.Wait()
	if err := <-killed; err != nil {
		return fmt.Errorf("kill and restart %s: %w", proc, err)
	}

	// Drain: until every accepted event arrived, or none arrived for 60 s.
	for ctx.Err() == nil {
		rc.mu.Lock()
		missing := 0
		for seq := range res.accepted {
			if !rc.seen[seq] {
				missing++
			}
		}
		rc.mu.Unlock()
		idle := time.Since(time.Unix(0, rc.last.Load()))
		if missing == 0 || idle > 60*time.Second {
			break
		}
		time.Sleep(time.Second)
	}
	// Late duplicates (a relay's resend comes a few seconds after its due
	// time) are counted for 15 s more.
	time.Sleep(15 * time.Second)

	rc.mu.Lock()
	lost := 0
	extra := 0 // arrived though the publish's outcome was unknown or refused
	for seq := range rc.seen {
		if !res.accepted[seq] {
			extra++
		}
	}
	for seq := range res.accepted {
		if !rc.seen[seq] {
			lost++
		}
	}
	dups := rc.duplicates
	rc.mu.Unlock()

	return report.Emit(report.Table{
		Title:   "Crash: SIGKILL of the " + proc + " under load",
		Command: "go run ./bench/crash " + strings.Join(os.Args[1:], " "),
		Notes: []string{
			fmt.Sprintf("The api, worker and dlq binaries as deployed (default settings), local services; one tenant publishing %d events/s for %s to one webhook on a local receiver answering 200; the %s killed with SIGKILL %s after the first publish and started again %s later.", rate, duration, proc, killAt, down),
			"Accepted: publishes answered 202. Refused: no connection or another answer (the api down). Unknown: sent, but the connection broke before the answer. Lost: accepted and never received. Duplicates: arrivals of an event already received. Arrived unacknowledged: received though the publish's answer was unknown or refused (committed before the crash).",
		},
		Header: []string{"killed", "published", "accepted", "refused", "unknown", "lost", "duplicates", "arrived unacknowledged"},
		Rows: [][]string{{proc, fmt.Sprint(len(res.accepted) + int(res.refused+res.unknown)), fmt.Sprint(len(res.accepted)),
			fmt.Sprint(res.refused), fmt.Sprint(res.unknown), fmt.Sprint(lost), fmt.Sprint(dups), fmt.Sprint(extra)}},
	}, record)
}

// provision creates a tenant with limits that never bind and its webhook,
// and returns the tenant's API key.
func provision(ctx context.Context, client *http.Client, sys *deploy.System, url string) (string, error) {
	var tenant struct {
		APIKey string `json:"api_key"`
	}
	if err := post(ctx, client, sys.APIURL+"/v1/tenants", sys.AdminToken, `{"name": "crash",
		"rate_limit": {"requests_per_minute": 10000000, "burst": 1000000},
		"publish_rate_limit": {"requests_per_second": 1000000, "burst": 1000000}}`, &tenant); err != nil {
		return "", err
	}
	hook := fmt.Sprintf(`{"url": %q, "events": ["*"], "rate_limit": {"requests_per_minute": 1000000, "burst": 100000}}`, url)
	return tenant.APIKey, post(ctx, client, sys.APIURL+"/v1/webhooks", tenant.APIKey, hook, nil)
}

// publish sends event seq and says what became of it: accepted, refused
// or unknown.
func publish(ctx context.Context, client *http.Client, apiURL, key string, seq int64) string {
	body := fmt.Sprintf(`{"event_type": "bench.crash", "data": {"seq": %d, "pad": %q}}`, seq, strings.Repeat("x", 900))
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, apiURL+"/v1/events", strings.NewReader(body))
	if err != nil {
		return "refused"
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	res, err := client.Do(req)
	if err != nil {
		var opErr *net.OpError
		if errors.As(err, &opErr) && opErr.Op == "dial" {
			return "refused"
		}
		return "unknown"
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode == http.StatusAccepted {
		return "accepted"
	}
	return "refused"
}

func post(ctx context.Context, client *http.Client, url, token, body string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader([]byte(body)))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	res, err := client.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	if res.StatusCode/100 != 2 {
		return fmt.Errorf("POST %s: %d %s", url, res.StatusCode, raw)
	}
	if out != nil {
		return json.Unmarshal(raw, out)
	}
	return nil
}
