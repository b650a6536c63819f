// Package seqload publishes numbered events to hookline at a fixed rate
// and receives them, for the load programs that count what a failure
// costs (bench/crash, bench/cluster) or what a long run changes
// (bench/soak): every event carries its sequence number, so that the
// receiver can tell which accepted events never arrived and which arrived
// more than once.
package seqload

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Receiver is a webhook endpoint answering 200 to everything; it records
// the first arrival of each sequence number and counts the arrivals after
// it.
type Receiver struct {
	mu         sync.Mutex
	first      map[int64]time.Time
	arrivals   []time.Time // every arrival, in order
	duplicates int64
	last       atomic.Int64 // unix ns of the latest first arrival
	observe    func(Arrival)
}

// Arrival is one event a Receiver read.
type Arrival struct {
	Seq   int64
	At    time.Time // when its body had been read
	Again bool      // the sequence number had arrived before
}

// NewReceiver returns an empty Receiver.
func NewReceiver() *Receiver { return &Receiver{first: map[int64]time.Time{}} }

// NewObservedReceiver returns an empty Receiver that also tells observe of
// every arrival, as it happens, from the request's goroutine: for a
// program that sums arrivals as it goes instead of reading them all at the
// end.
func NewObservedReceiver(observe func(Arrival)) *Receiver {
	r := NewReceiver()
	r.observe = observe
	return r
}

// ServeHTTP records one arrival.
func (r *Receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	now := time.Now()
	var env struct {
		Data struct {
			Seq int64 `json:"seq"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &env); err == nil {
		r.mu.Lock()
		r.arrivals = append(r.arrivals, now)
		_, seen := r.first[env.Data.Seq]
		if seen {
			r.duplicates++
		} else {
			r.first[env.Data.Seq] = now
			r.last.Store(now.UnixNano())
		}
		r.mu.Unlock()
		if r.observe != nil {
			r.observe(Arrival{Seq: env.Data.Seq, At: now, Again: seen})
		}
	}
	w.WriteHeader(http.StatusOK)
}

// Drain waits until every accepted event has arrived, or none has for a
// minute, then 15 s more: a redelivery (a relay's resend, or a message
// given back after a node's loss) can come seconds after the first
// arrival.
func (r *Receiver) Drain(ctx context.Context, accepted map[int64]bool) {
	for ctx.Err() == nil {
		r.mu.Lock()
		missing := 0
		for seq := range accepted {
			if _, ok := r.first[seq]; !ok {
				missing++
			}
		}
		r.mu.Unlock()
		if missing == 0 || time.Since(time.Unix(0, r.last.Load())) > time.Minute {
			break
		}
		time.Sleep(time.Second)
	}
	select {
	case <-ctx.Done():
	case <-time.After(15 * time.Second):
	}
}

// Arrivals returns when each sequence number first arrived, and every
// arrival's time, in order.
func (r *Receiver) Arrivals() (first map[int64]time.Time, all []time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.first), slices.Clone(r.arrivals)
}

// Duplicates returns how many arrivals repeated an earlier one.
func (r *Receiver) Duplicates() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.duplicates
}

// Published is what the apis answered.
type Published struct {
	Accepted map[int64]bool // 202: the event is hookline's to deliver
	Refused  int64          // no connection, or an answer other than 202
	Unknown  int64          // sent, but the connection broke before an answer
	Interval time.Duration  // between scheduled publishes
	Total    int64          // published
}

// Scheduled returns when event seq was due to be published.
func (p Published) Scheduled(start time.Time, seq int64) time.Time {
	return start.Add(time.Duration(seq) * p.Interval)
}

// Publish publishes rate events/s for duration, event seq at its
// scheduled time through apis[seq % len(apis)], from 256 keep-alive
// clients; a publish that cannot start at its time waits for a free
// client, and its latency still counts from its scheduled time.
func Publish(ctx context.Context, client *http.Client, apis []string, key, eventType string, rate int, duration time.Duration, start time.Time) Published {
	return PublishObserved(ctx, client, apis, key, eventType, rate, duration, start, nil)
}

// Answer is what became of one publish.
type Answer struct {
	Seq      int64
	Accepted bool          // answered 202
	Latency  time.Duration // from its scheduled time to the answer (or the error)
}

// PublishObserved publishes as Publish does, and tells observe, unless
// nil, of every publish as its answer arrives, from the client's
// goroutine.
func PublishObserved(ctx context.Context, client *http.Client, apis []string, key, eventType string, rate int, duration time.Duration, start time.Time, observe func(Answer)) Published {
	res := Published{Accepted: map[int64]bool{}, Interval: time.Second / time.Duration(rate)}
	// plan gives the scheduled times without reading res, which the
	// clients write meanwhile.
	plan := Published{Interval: res.Interval}
	var mu sync.Mutex
	jobs := make(chan int64, rate)
	var wg sync.WaitGroup
	for range 256 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := range jobs {
				verdict := publishOne(ctx, client, apis[seq%int64(len(apis))], key, eventType, seq)
				if observe != nil {
					observe(Answer{Seq: seq, Accepted: verdict == "accepted", Latency: time.Since(plan.Scheduled(start, seq))})
				}
				mu.Lock()
				switch verdict {
				case "accepted":
					res.Accepted[seq] = true
				case "unknown":
					res.Unknown++
				default:
					res.Refused++
				}
				mu.Unlock()
			}
		}()
	}
	var seq int64
	for ; time.Since(start) < duration && ctx.Err() == nil; seq++ {
		time.Sleep(time.Until(plan.Scheduled(start, seq)))
		jobs <- seq
	}
	close(jobs)
	wg.Wait()
	res.Total = seq
	return res
}

// Setup starts a Receiver on a loopback port and, through the api at
// apiURL with the admin token, a tenant named name with its webhook on
// that receiver (Provision). It returns the receiver, the keep-alive
// client to publish with, the tenant's API key and a function that stops
// the receiver.
func Setup(ctx context.Context, apiURL, adminToken, name string) (*Receiver, *http.Client, string, func(), error) {
	rc := NewReceiver()
	url, stop, err := Serve(rc)
	if err != nil {
		return nil, nil, "", nil, err
	}
	client := NewClient()
	key, err := Provision(ctx, client, apiURL, adminToken, name, url)
	if err != nil {
		stop()
		return nil, nil, "", nil, err
	}
	return rc, client, key, stop, nil
}

// Serve serves rc on a loopback port and returns its webhook URL and a
// function that stops it.
func Serve(rc *Receiver) (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: rc, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return "http://" + ln.Addr().String() + "/hook", func() { _ = srv.Close() }, nil
}

// NewClient returns the keep-alive client Setup publishes with.
func NewClient() *http.Client {
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 512}}
}

// Provision creates a tenant named name, with limits that never bind, and
// its webhook at url for every event type (AddWebhook), through the api at
// apiURL with the admin token, and returns the tenant's API key.
func Provision(ctx context.Context, client *http.Client, apiURL, adminToken, name, url string) (string, error) {
	var tenant struct {
		APIKey string `json:"api_key"`
	}
	if err := Post(ctx, client, apiURL+"/v1/tenants", adminToken, fmt.Sprintf(`{"name": %q,
		"rate_limit": {"requests_per_minute": 10000000, "burst": 1000000},
		"publish_rate_limit": {"requests_per_second": 1000000, "burst": 1000000}}`, name), &tenant); err != nil {
		return "", err
	}
	return tenant.APIKey, AddWebhook(ctx, client, apiURL, tenant.APIKey, url)
}

// AddWebhook gives the tenant whose API key is key a webhook at url for
// every event type, with a rate limit that never binds.
func AddWebhook(ctx context.Context, client *http.Client, apiURL, key, url string) error {
	hook := fmt.Sprintf(`{"url": %q, "events": ["*"], "rate_limit": {"requests_per_minute": 1000000, "burst": 100000}}`, url)
	return Post(ctx, client, apiURL+"/v1/webhooks", key, hook, nil)
}

// publishOne sends event seq, of about 1 KiB, and says what became of it:
// accepted, refused or unknown.
func publishOne(ctx context.Context, client *http.Client, apiURL, key, eventType string, seq int64) string {
	body := fmt.Sprintf(`{"event_type": %q, "data": {"seq": %d, "pad": %q}}`, eventType, seq, strings.Repeat("x", 900))
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

// Post sends body to url with token as its bearer token, fails on an
// answer other than 2xx, and decodes the answer into out unless nil.
func Post(ctx context.Context, client *http.Client, url, token, body string, out any) error {
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
