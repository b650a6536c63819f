package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// publishing is what a tenant publishes: n events at rate per second.
type publishing struct {
	eventType string
	priority  string // "" for the default (normal)
	rate      float64
	n         int
}

func newPublishing(eventType, priority string, rate float64, d time.Duration) publishing {
	return publishing{eventType: eventType, priority: priority, rate: rate, n: int(rate * d.Seconds())}
}

// stream is one tenant's open-loop publishing, or in e that of many
// tenants taking turns: event i is scheduled at start + i/rate, whatever
// happened to the events before it, and published with keys[i mod
// len(keys)].
type stream struct {
	publishing
	keys []string // the tenants' API keys

	accepted atomic.Int64
	failed   atomic.Int64
	firstErr atomic.Pointer[string]
}

func (s *stream) body(seq int, at time.Time) string {
	prio := ""
	if s.priority != "" {
		prio = fmt.Sprintf(`"priority":%q,`, s.priority)
	}
	if len(s.keys) == 1 {
		return fmt.Sprintf(`{"event_type":%q,%s"data":{"seq":%d,"ts":%d}}`, s.eventType, prio, seq, at.UnixNano())
	}
	// Many tenants: the receiver checks the publisher against the webhook
	// the request came through.
	return fmt.Sprintf(`{"event_type":%q,%s"data":{"seq":%d,"ts":%d,"tenant_index":%d}}`, s.eventType, prio, seq, at.UnixNano(), seq%len(s.keys))
}

// key is the API key that publishes event seq.
func (s *stream) key(seq int) string { return s.keys[seq%len(s.keys)] }

func (s *stream) fail(msg string) {
	s.failed.Add(1)
	s.firstErr.CompareAndSwap(nil, &msg)
}

// err is the first publishing error, or "none".
func (s *stream) err() string {
	if e := s.firstErr.Load(); e != nil {
		return *e
	}
	return "none"
}

type job struct {
	s   *stream
	seq int
	at  time.Time
}

// senders is how many publishing requests may be in flight at once; the
// client keeps as many connections alive.
const senders = 256

// publish runs every stream from start until each has scheduled its n
// events, and returns once every request has been answered (or has failed:
// each is bounded by the client's timeout).
func publish(ctx context.Context, apiURL string, streams []*stream, start time.Time) {
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		MaxIdleConns: senders, MaxIdleConnsPerHost: senders, IdleConnTimeout: time.Minute,
	}}
	defer client.CloseIdleConnections()
	jobs := make(chan job, 4096)
	var send sync.WaitGroup
	for range senders {
		send.Add(1)
		go func() {
			defer send.Done()
			for j := range jobs {
				post(ctx, client, apiURL, j)
			}
		}()
	}
	var schedule sync.WaitGroup
	for _, s := range streams {
		schedule.Add(1)
		go func() {
			defer schedule.Done()
			scheduleStream(ctx, s, start, jobs)
		}()
	}
	schedule.Wait()
	close(jobs)
	send.Wait()
}

// scheduleStream hands event i to the senders at start + i/rate. If they
// are all busy the hand-over waits, and the wait counts in the event's
// latency, which is measured from its scheduled time.
func scheduleStream(ctx context.Context, s *stream, start time.Time, jobs chan<- job) {
	interval := time.Duration(float64(time.Second) / s.rate)
	timer := time.NewTimer(0)
	defer timer.Stop()
	for i := range s.n {
		at := start.Add(time.Duration(i) * interval)
		timer.Reset(time.Until(at))
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		select {
		case <-ctx.Done():
			return
		case jobs <- job{s: s, seq: i, at: at}:
		}
	}
}

func post(ctx context.Context, client *http.Client, apiURL string, j job) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, apiURL+"/v1/events", strings.NewReader(j.s.body(j.seq, j.at)))
	if err != nil {
		j.s.fail(err.Error())
		return
	}
	req.Header.Set("Authorization", "Bearer "+j.s.key(j.seq))
	req.Header.Set("Content-Type", "application/json")
	res, err := client.Do(req)
	if err != nil {
		j.s.fail(err.Error())
		return
	}
	raw, _ := io.ReadAll(io.LimitReader(res.Body, 4096))
	res.Body.Close()
	if res.StatusCode != http.StatusAccepted {
		j.s.fail(fmt.Sprintf("%d %s", res.StatusCode, raw))
		return
	}
	j.s.accepted.Add(1)
}
