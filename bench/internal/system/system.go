// Package system runs a hookline api in-process against the local services,
// on its own database and queue prefix, for the load programs under bench/.
package system

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"

	"github.com/hookline/hookline/internal/breaker"
	"github.com/hookline/hookline/internal/config"
	"github.com/hookline/hookline/internal/db"
	"github.com/hookline/hookline/internal/db/dbtest"
	"github.com/hookline/hookline/internal/delivery"
	"github.com/hookline/hookline/internal/health"
	"github.com/hookline/hookline/internal/httpapi"
	"github.com/hookline/hookline/internal/netguard"
	"github.com/hookline/hookline/internal/queue"
	"github.com/hookline/hookline/internal/queue/queuetest"
	"github.com/hookline/hookline/internal/ratelimit"
	"github.com/hookline/hookline/internal/redistest"
	"github.com/hookline/hookline/internal/schedule"
	"github.com/hookline/hookline/internal/tracing"
)

// AdminToken authorises tenant creation on the in-process api.
const AdminToken = "bench-admin-token-0123456789"

// System is a running api with its own database and topology.
type System struct {
	URL      string
	Topology queue.Topology
	DBURL    string
	close    func()
}

// Options adjust Start.
type Options struct {
	// Workers is the number of in-process delivery workers (0: none).
	Workers int
	// WorkerConcurrency and Prefetch tune each worker. Defaults 64 and 64.
	WorkerConcurrency, Prefetch int
	// MaxConnsPerHost is each worker's per-endpoint-host limit. Default 5.
	MaxConnsPerHost int
	// Guard turns on the circuit breakers and token buckets in the workers.
	Guard bool
	// Tracer traces the api and the workers; the zero Tracer: tracing off.
	Tracer tracing.Tracer
	// CommitWindow, when set, replaces the api's default commit window
	// (api.commit_window).
	CommitWindow *time.Duration
}

// Start brings an api up on a loopback port, with workers when asked.
func Start(ctx context.Context, opts ...Options) (*System, error) {
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	if o.WorkerConcurrency == 0 {
		o.WorkerConcurrency = 64
	}
	if o.Prefetch == 0 {
		o.Prefetch = 64
	}
	if o.MaxConnsPerHost == 0 {
		o.MaxConnsPerHost = 5
	}
	dbURL, drop, err := dbtest.Create(true)
	if err != nil {
		return nil, err
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	topo := queue.Topology{Prefix: "bench-" + hex.EncodeToString(b)}
	cfg := config.Default()
	cfg.API.AdminToken = AdminToken
	cfg.Network.AllowPrivateNetworks = true
	cfg.AMQP.Prefix = topo.Prefix
	cfg.Redis.KeyPrefix = topo.Prefix + ":"
	cfg.Defaults.TenantPublishRateLimit.RequestsPerSecond = 1_000_000
	cfg.Defaults.TenantPublishRateLimit.Burst = 1_000_000
	cfg.Defaults.TenantRateLimit.RequestsPerMinute = 10_000_000
	cfg.Defaults.TenantRateLimit.Burst = 1_000_000
	if o.CommitWindow != nil {
		cfg.API.CommitWindow = config.Duration(*o.CommitWindow)
	}

	pool, err := db.Open(ctx, dbURL, 32)
	if err != nil {
		drop()
		return nil, err
	}
	log := slog.New(slog.DiscardHandler)
	rdb := redis.NewClient(&redis.Options{Addr: redistest.Addr()})
	conn := queue.NewConn(queuetest.URL(), log)
	api, err := httpapi.NewStack(cfg, pool, rdb, conn, log)
	if err != nil {
		drop()
		return nil, err
	}
	api.WithTracer(o.Tracer)
	pub := api.Publisher
	api.Deps.Checks = health.Checks{"rabbitmq": pub.Check}
	srv, err := httpapi.New(api.Deps)
	if err != nil {
		drop()
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		drop()
		return nil, err
	}
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second}
	parts := []func(context.Context) error{conn.Run}
	for _, p := range api.Parts() {
		parts = append(parts, p.Run)
	}
	for range o.Workers {
		sender := delivery.NewSender(delivery.SenderConfig{ConnectTimeout: 10 * time.Second, MaxConnsPerHost: o.MaxConnsPerHost,
			UserAgent: delivery.UserAgent, Tracer: o.Tracer}, netguard.Policy{AllowPrivate: true})
		var guard *delivery.Guard
		if o.Guard {
			guard = delivery.NewGuard(breaker.New(rdb, cfg.Redis.KeyPrefix), ratelimit.New(rdb, cfg.Redis.KeyPrefix), pool, log)
		}
		// Tenants share each worker's slots as in the worker process.
		gate := schedule.NewGate(schedule.GateConfig{Slots: o.WorkerConcurrency})
		w := delivery.NewWorker(pool, sender, guard, pub, log).WithGate(gate).WithTracer(o.Tracer)
		c := queue.NewConsumer(conn, topo, pub, queue.ConsumerConfig{Prefetch: o.Prefetch,
			Concurrency: schedule.Handlers(o.WorkerConcurrency), Grace: time.Second}, w.Handle)
		parts = append(parts, func(ctx context.Context) error { return w.Serve(ctx, c.Run) })
	}
	bg, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, run := range parts {
		wg.Add(1)
		go func() { defer wg.Done(); _ = run(bg) }()
	}
	go func() { _ = hs.Serve(ln) }()
	s := &System{URL: "http://" + ln.Addr().String(), Topology: topo, DBURL: dbURL}
	s.close = func() {
		_ = hs.Shutdown(context.Background())
		cancel()
		wg.Wait()
		_, _ = redistest.DeleteKeys(context.Background(), rdb, cfg.Redis.KeyPrefix)
		_ = rdb.Close()
		pool.Close()
		deleteTopology(topo)
		drop()
	}
	deadline := time.Now().Add(10 * time.Second)
	for pub.Check(ctx) != nil {
		if time.Now().After(deadline) {
			s.Close()
			return nil, fmt.Errorf("rabbitmq not connected within 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return s, nil
}

// Close stops the api and removes its database and queues.
func (s *System) Close() { s.close() }

// Purge empties the work queues between scenarios.
func (s *System) Purge() error {
	return withChannel(func(ch *amqp.Channel) error {
		for _, p := range queue.Priorities {
			for _, q := range s.Topology.WorkQueues(p) {
				if _, err := ch.QueuePurge(q, false); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

func deleteTopology(topo queue.Topology) {
	_ = withChannel(func(ch *amqp.Channel) error { return topo.Delete(ch) })
}

func withChannel(f func(*amqp.Channel) error) error {
	conn, err := amqp.Dial(queuetest.URL())
	if err != nil {
		return err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	return f(ch)
}

// ClearEvents removes every event with its deliveries and attempts, so
// that the next run writes to tables as empty as the first run's.
func (s *System) ClearEvents() error {
	conn, err := pgx.Connect(context.Background(), s.DBURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(context.Background(), `TRUNCATE events CASCADE`)
	return err
}

// Tenant creates a tenant with one webhook per URL in urls, subscribed to
// "bench.*" with limits that never bind, and returns its API key. extra,
// when not empty, holds more JSON fields for every webhook (such as
// `"retry_config": {"timeout_ms": 1000}`).
func (s *System) Tenant(extra string, urls ...string) (string, error) {
	return s.TenantEach(func(int) string { return extra }, urls...)
}

// TenantEach is Tenant with the extra fields of webhook i (of urls) given
// by extra(i).
func (s *System) TenantEach(extra func(i int) string, urls ...string) (string, error) {
	var t struct {
		APIKey string `json:"api_key"`
	}
	if err := post(s.URL+"/v1/tenants", AdminToken, `{"name": "bench"}`, &t); err != nil {
		return "", err
	}
	for i, u := range urls {
		more := extra(i)
		if more != "" {
			more = ", " + more
		}
		body := fmt.Sprintf(`{"url": %q, "events": ["bench.*"], "rate_limit": {"requests_per_minute": 1000000, "burst": 100000}%s}`, u, more)
		if err := post(s.URL+"/v1/webhooks", t.APIKey, body, nil); err != nil {
			return "", err
		}
	}
	return t.APIKey, nil
}

func post(url, token, body string, out any) error {
	req, err := http.NewRequest("POST", url, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		raw, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("POST %s: %d %s", url, resp.StatusCode, raw)
	}
	if out != nil {
		return json.NewDecoder(resp.Body).Decode(out)
	}
	return nil
}
