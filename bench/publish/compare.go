package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/hookline/hookline/bench/internal/deploy"
	"github.com/hookline/hookline/bench/internal/report"
)

// The ways of publishing -modes compares.
const (
	modeSingle = "single" // POST /v1/events, one event per request
	modeBatch  = "batch"  // POST /v1/events/batch, -batch events per request
	modeQueue  = "queue"  // the hookline.publish exchange, with confirms
)

// compareOptions are the flags of a comparison.
type compareOptions struct {
	modes       []string
	rate        int
	duration    time.Duration
	concurrency int
	batch       int
	size        int
	out         string
}

// bench is the deployed system, its receiver and a tenant to publish for.
type bench struct {
	sys    *deploy.System
	key    string
	client *http.Client
	amqp   *amqp.Connection
	rec    *receipts
	o      compareOptions
	seq    atomic.Int64
}

// compare deploys the api, worker and dlq binaries and, for each mode,
// measures publish-to-receipt at a fixed rate with the worker delivering,
// then, with the worker stopped, the events the api commits per second at
// saturation and the api process's CPU per event.
func compare(ctx context.Context, o compareOptions) error {
	bin, err := deploy.Build(ctx, ".")
	if err != nil {
		return err
	}
	defer func() { _ = bin.Remove() }()
	sys, err := deploy.Start(ctx, deploy.Options{Binaries: bin, Name: "publish"})
	if err != nil {
		return err
	}
	defer func() { _ = sys.Close() }()
	b := &bench{sys: sys, o: o, rec: &receipts{},
		client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: o.concurrency * 2, MaxConnsPerHost: o.concurrency * 2}}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	hs := &http.Server{Handler: b.rec, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	defer func() { _ = hs.Close() }()
	if err := b.provision("http://" + ln.Addr().String() + "/hook"); err != nil {
		return err
	}
	if b.amqp, err = amqp.Dial(sys.AMQPURL); err != nil {
		return err
	}
	defer b.amqp.Close()

	rows := map[string][]string{}
	for _, m := range o.modes {
		p50, p99, errs, err := b.paced(ctx, m)
		if err != nil {
			return fmt.Errorf("%s at %d/s: %w", m, o.rate, err)
		}
		rows[m] = []string{m, "", "", "", "", "", p50, p99, strconv.FormatInt(errs, 10)}
	}
	if err := sys.Kill("worker"); err != nil {
		return err
	}
	var base struct{ rate, cpu float64 }
	for _, m := range o.modes {
		if err := b.purge(); err != nil {
			return err
		}
		rate, cpuMs, cores, backlog, err := b.saturate(ctx, m)
		if err != nil {
			return fmt.Errorf("%s at saturation: %w", m, err)
		}
		if m == o.modes[0] {
			base.rate, base.cpu = rate, cpuMs
		}
		r := rows[m]
		r[1], r[2] = fmt.Sprintf("%.0f", rate), fmt.Sprintf("%.2fx", rate/base.rate)
		r[3], r[4], r[5] = fmt.Sprintf("%.3f ms", cpuMs), fmt.Sprintf("%.2fx", cpuMs/base.cpu), fmt.Sprintf("%.2f (backlog %s)", cores, backlog)
	}
	table := report.Table{
		Title:   "Publishing: single, batch and RabbitMQ",
		Command: "go run ./bench/publish " + strings.Join(os.Args[1:], " "),
		Notes: []string{
			fmt.Sprintf("The api, worker and dlq binaries as deployed (default settings), local services; one tenant, one webhook on a local receiver answering 200; %d-byte payloads; %s per run.", o.size, o.duration),
			fmt.Sprintf("single: POST /v1/events; batch: POST /v1/events/batch with %d events; queue: the hookline.publish exchange with publisher confirms, a message id per message. Keep-alive HTTP clients.", o.batch),
			fmt.Sprintf("Saturation, the worker stopped (deliveries wait on the queues, purged between modes): %d closed-loop clients for single, %d for batch, up to 2048 unconfirmed messages for queue, keeping about %d waiting in hookline.publish; events committed per second and the api process's CPU (utime+stime from /proc/<pid>/stat) per event, over the run after its first second. Backlog: messages left in hookline.publish at the end (the api, not the producer, was the limit).", o.concurrency, batchClients(o.concurrency), maxBacklog),
			fmt.Sprintf("Receipt: at %d events/s open loop with the worker delivering, from each event's scheduled send time (a batch's: its request's, every %d events) to the receiver reading its POST.", o.rate, o.batch),
		},
		Header: []string{"mode", "events/s at saturation", "vs " + o.modes[0], "api CPU per event", "vs " + o.modes[0], "api cores (backlog)",
			fmt.Sprintf("receipt p50 at %d/s", o.rate), "receipt p99", "errors"},
	}
	for _, m := range o.modes {
		table.Rows = append(table.Rows, rows[m])
	}
	return report.Emit(table, o.out)
}

func batchClients(concurrency int) int { return max(1, concurrency/8) }

// provision creates the tenant, with publish limits out of the way, and
// its webhook to url.
func (b *bench) provision(url string) error {
	var t struct {
		APIKey string `json:"api_key"`
	}
	body := `{"name": "publish", "rate_limit": {"requests_per_minute": 10000000, "burst": 1000000},
		"publish_rate_limit": {"requests_per_second": 1000000, "burst": 1000000}}`
	if err := b.post("/v1/tenants", b.sys.AdminToken, body, http.StatusCreated, &t); err != nil {
		return err
	}
	b.key = t.APIKey
	return b.post("/v1/webhooks", b.key, fmt.Sprintf(`{"url": %q, "events": ["*"], "rate_limit": {"requests_per_minute": 1000000, "burst": 100000}}`, url),
		http.StatusCreated, nil)
}

func (b *bench) post(path, token, body string, want int, out any) error {
	req, err := http.NewRequest(http.MethodPost, b.sys.APIURL+path, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := b.client.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	if res.StatusCode != want {
		return fmt.Errorf("POST %s: %d %s", path, res.StatusCode, raw)
	}
	if out != nil {
		return json.Unmarshal(raw, out)
	}
	return nil
}

// event is the body of one event, sent at sent.
func (b *bench) event(sent time.Time) []byte {
	filler := strings.Repeat("x", max(b.o.size-90, 1))
	return fmt.Appendf(nil, `{"event_type": "bench.created", "data": {"seq": %d, "sent_ns": %d, "filler": %q}}`,
		b.seq.Add(1), sent.UnixNano(), filler)
}

// batchBody is a batch of n events sent at sent.
func (b *bench) batchBody(n int, sent time.Time) []byte {
	var buf bytes.Buffer
	buf.WriteString(`{"events": [`)
	for i := range n {
		if i > 0 {
			buf.WriteByte(',')
		}
		buf.Write(b.event(sent))
	}
	buf.WriteString(`]}`)
	return buf.Bytes()
}

// sendHTTP posts one request of mode (single or batch) sent at sent and
// returns the events it had accepted.
func (b *bench) sendHTTP(mode string, sent time.Time) int {
	path, body, want := "/v1/events", b.event(sent), 1
	if mode == modeBatch {
		path, body, want = "/v1/events/batch", b.batchBody(b.o.batch, sent), b.o.batch
	}
	req, _ := http.NewRequest(http.MethodPost, b.sys.APIURL+path, bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+b.key)
	res, err := b.client.Do(req)
	if err != nil {
		return 0
	}
	defer res.Body.Close()
	if mode == modeSingle {
		_, _ = io.Copy(io.Discard, res.Body)
		if res.StatusCode == http.StatusAccepted {
			return 1
		}
		return 0
	}
	var out struct {
		Data []struct{ Status int } `json:"data"`
	}
	if res.StatusCode != http.StatusOK || json.NewDecoder(res.Body).Decode(&out) != nil {
		return 0
	}
	n := 0
	for _, r := range out.Data {
		if r.Status == http.StatusAccepted {
			n++
		}
	}
	return min(n, want)
}

// publisher publishes messages to hookline.publish on a confirm-mode
// channel, with at most window unconfirmed.
type publisher struct {
	ch      *amqp.Channel
	slots   chan struct{}
	wg      sync.WaitGroup
	nacked  atomic.Int64
	settled atomic.Int64
}

func (b *bench) publisher(window int) (*publisher, error) {
	ch, err := b.amqp.Channel()
	if err != nil {
		return nil, err
	}
	if err := ch.Confirm(false); err != nil {
		return nil, err
	}
	return &publisher{ch: ch, slots: make(chan struct{}, window)}, nil
}

// publish sends one event sent at sent; its confirm is awaited aside.
func (p *publisher) publish(ctx context.Context, b *bench, sent time.Time) {
	p.slots <- struct{}{}
	body := b.event(sent)
	dc, err := p.ch.PublishWithDeferredConfirmWithContext(ctx, "hookline.publish", "", false, false, amqp.Publishing{
		DeliveryMode: amqp.Persistent, ContentType: "application/json", MessageId: "bench-" + strconv.FormatInt(b.seq.Load(), 10),
		Headers: amqp.Table{"Authorization": "Bearer " + b.key}, Body: body,
	})
	if err != nil {
		<-p.slots
		p.nacked.Add(1)
		return
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		if ok, err := dc.WaitContext(ctx); err != nil || !ok {
			p.nacked.Add(1)
		}
		p.settled.Add(1)
		<-p.slots
	}()
}

func (p *publisher) close() {
	p.wg.Wait()
	_ = p.ch.Close()
}

// paced publishes at o.rate events a second for o.duration in mode and
// returns the receipt p50 and p99 and the events not accepted.
func (b *bench) paced(ctx context.Context, mode string) (string, string, int64, error) {
	b.rec.reset()
	per := 1
	if mode == modeBatch {
		per = b.o.batch
	}
	interval := time.Second * time.Duration(per) / time.Duration(b.o.rate)
	total := int(b.o.duration / interval)
	var accepted, errs atomic.Int64
	var pub *publisher
	if mode == modeQueue {
		var err error
		if pub, err = b.publisher(4096); err != nil {
			return "", "", 0, err
		}
	}
	slots := make(chan struct{}, b.o.concurrency*4)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range total {
		scheduled := start.Add(time.Duration(i) * interval)
		time.Sleep(time.Until(scheduled))
		if pub != nil {
			pub.publish(ctx, b, scheduled)
			continue
		}
		slots <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-slots; wg.Done() }()
			n := b.sendHTTP(mode, scheduled)
			accepted.Add(int64(n))
			errs.Add(int64(per - n))
		}()
	}
	wg.Wait()
	want := accepted.Load()
	if pub != nil {
		pub.close()
		errs.Store(pub.nacked.Load())
		want = int64(total) - pub.nacked.Load()
	}
	if err := b.rec.await(want, 20*time.Second); err != nil {
		return "", "", 0, err
	}
	lat := report.Sort(b.rec.latencies())
	return report.Ms(report.Percentile(lat, 50)), report.Ms(report.Percentile(lat, 99)), errs.Load(), nil
}

// saturate publishes in mode as fast as the api takes it for o.duration
// and returns the events committed per second and the api's CPU per event
// in milliseconds and in cores, over the run after its first second, and
// the messages left in the publish queue at the end.
func (b *bench) saturate(ctx context.Context, mode string) (rate, cpuMs, cores float64, backlog string, err error) {
	runCtx, stop := context.WithTimeout(ctx, b.o.duration)
	defer stop()
	var wg sync.WaitGroup
	switch mode {
	case modeQueue:
		pub, err := b.publisher(2048)
		if err != nil {
			return 0, 0, 0, "", err
		}
		// The producer keeps a backlog of about maxBacklog messages, as
		// one publishing faster than hookline takes its messages would,
		// without flooding the broker, which the api shares.
		var backlog atomic.Int64
		wg.Add(2)
		go func() {
			defer wg.Done()
			for runCtx.Err() == nil {
				backlog.Store(int64(b.depth("hookline.publish")))
				time.Sleep(50 * time.Millisecond)
			}
		}()
		go func() {
			defer wg.Done()
			for runCtx.Err() == nil {
				if backlog.Load() > maxBacklog {
					time.Sleep(5 * time.Millisecond)
					continue
				}
				for range 100 {
					pub.publish(ctx, b, time.Now())
				}
			}
			pub.close()
		}()
	default:
		clients := b.o.concurrency
		if mode == modeBatch {
			clients = batchClients(b.o.concurrency)
		}
		for range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for runCtx.Err() == nil {
					b.sendHTTP(mode, time.Now())
				}
			}()
		}
	}
	time.Sleep(time.Second)
	pid := b.sys.Pid("api")
	t0, e0, ticks0 := time.Now(), b.events(), report.ProcTicks(pid)
	<-runCtx.Done()
	t1, e1, ticks1 := time.Now(), b.events(), report.ProcTicks(pid)
	backlog = "–"
	if mode == modeQueue {
		backlog = strconv.Itoa(b.depth("hookline.publish"))
	}
	wg.Wait()
	n := float64(e1 - e0)
	if n <= 0 {
		return 0, 0, 0, "", fmt.Errorf("no event committed")
	}
	cpu := report.TicksDuration(ticks1 - ticks0)
	return n / t1.Sub(t0).Seconds(), float64(cpu.Microseconds()) / 1000 / n, cpu.Seconds() / t1.Sub(t0).Seconds(), backlog, nil
}

// maxBacklog is the publish queue's depth above which the saturating
// producer waits.
const maxBacklog = 5000

// events counts the events committed.
func (b *bench) events() int64 {
	conn, err := pgx.Connect(context.Background(), b.sys.DBURL)
	if err != nil {
		return 0
	}
	defer conn.Close(context.Background())
	var n int64
	_ = conn.QueryRow(context.Background(), `SELECT count(*) FROM events`).Scan(&n)
	return n
}

// purge empties the work queues and the publish queue, and waits for the
// api to finish what it had taken of the latter.
func (b *bench) purge() error {
	ch, err := b.amqp.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	for _, q := range []string{"hookline.publish", "hookline.work.high", "hookline.work.normal", "hookline.work.low"} {
		if _, err := ch.QueuePurge(q, false); err != nil {
			return fmt.Errorf("purge %s: %w", q, err)
		}
	}
	for last := b.events(); ; {
		time.Sleep(500 * time.Millisecond)
		n := b.events()
		if n == last {
			return nil
		}
		last = n
	}
}

func (b *bench) depth(queue string) int {
	ch, err := b.amqp.Channel()
	if err != nil {
		return -1
	}
	defer ch.Close()
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		return -1
	}
	return q.Messages
}

// receipts is the webhook endpoint: it answers 200 and keeps how long
// after its sent_ns each event arrived.
type receipts struct {
	mu  sync.Mutex
	lat []time.Duration
}

func (r *receipts) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	d, ok := report.SentLatency(body, time.Now())
	w.WriteHeader(http.StatusOK)
	if ok {
		r.mu.Lock()
		r.lat = append(r.lat, d)
		r.mu.Unlock()
	}
}

func (r *receipts) reset() {
	r.mu.Lock()
	r.lat = nil
	r.mu.Unlock()
}

func (r *receipts) latencies() []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]time.Duration(nil), r.lat...)
}

// await waits until n events have arrived, failing once none has for
// quiet.
func (r *receipts) await(n int64, quiet time.Duration) error {
	last, since := -1, time.Now()
	for {
		r.mu.Lock()
		got := len(r.lat)
		r.mu.Unlock()
		if int64(got) >= n {
			return nil
		}
		if got != last {
			last, since = got, time.Now()
		} else if time.Since(since) > quiet {
			return fmt.Errorf("%d of %d events received, none for %s", got, n, quiet)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
