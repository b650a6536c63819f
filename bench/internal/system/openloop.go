package system

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// OpenLoop registers a tenant with one webhook to a local receiver that
// answers 200 at once, publishes n events with size-byte payloads from
// clients goroutines as fast as they go, waits until every delivery has
// succeeded (or none succeeds for 30 s), and returns successful deliveries
// per second from the first publish to the last success.
func (s *System) OpenLoop(ctx context.Context, n, size, clients int) (float64, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	rc := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
	}), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = rc.Serve(ln) }()
	defer rc.Close()
	key, err := s.Tenant("", "http://"+ln.Addr().String()+"/hook")
	if err != nil {
		return 0, err
	}
	body := fmt.Sprintf(`{"event_type": "bench.e2e", "data": {"filler": %q}}`, strings.Repeat("x", max(0, size-40)))
	var next atomic.Int64
	var failed atomic.Int64
	var wg sync.WaitGroup
	// One idle connection kept per client: every publish reuses one.
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients}}
	defer client.CloseIdleConnections()
	start := time.Now()
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) {
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.URL+"/v1/events", bytes.NewReader([]byte(body)))
				req.Header.Set("Authorization", "Bearer "+key)
				res, err := client.Do(req)
				if err != nil {
					failed.Add(1)
					continue
				}
				_, _ = io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if res.StatusCode != http.StatusAccepted {
					failed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if f := failed.Load(); f > 0 {
		return 0, fmt.Errorf("%d of %d publishes failed", f, n)
	}
	conn, err := pgx.Connect(ctx, s.DBURL)
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.Background())
	var done int64
	var last time.Time
	for deadline := time.Now().Add(30 * time.Second); done < int64(n) && time.Now().Before(deadline); {
		var got int64
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM deliveries WHERE status = 'succeeded'`).Scan(&got); err != nil {
			return 0, err
		}
		if got != done {
			done, last = got, time.Now()
			deadline = last.Add(30 * time.Second)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if done < int64(n) {
		return 0, fmt.Errorf("only %d of %d deliveries succeeded", done, n)
	}
	return float64(done) / last.Sub(start).Seconds(), nil
}
