package console_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/breaker"
	"github.com/hookline/hookline/internal/config"
	"github.com/hookline/hookline/internal/console"
	"github.com/hookline/hookline/internal/db/dbtest"
	"github.com/hookline/hookline/internal/delivery"
	"github.com/hookline/hookline/internal/dlq"
	"github.com/hookline/hookline/internal/event"
	"github.com/hookline/hookline/internal/health"
	"github.com/hookline/hookline/internal/history"
	"github.com/hookline/hookline/internal/httpapi"
	"github.com/hookline/hookline/internal/netguard"
	"github.com/hookline/hookline/internal/outbox"
	"github.com/hookline/hookline/internal/queue"
	"github.com/hookline/hookline/internal/queue/queuetest"
	"github.com/hookline/hookline/internal/ratelimit"
	"github.com/hookline/hookline/internal/redistest"
	"github.com/hookline/hookline/internal/tenant"
	"github.com/hookline/hookline/internal/webhook"
)

const adminToken = "console-test-admin-token"

// env is an api (with its console) on its own database, queues and Redis
// prefix; with workers, also the delivery workers, the dlq recorder and the
// batch runner, as the three processes run them.
type env struct {
	t           *testing.T
	pool        *pgxpool.Pool
	api         *httptest.Server
	overrides   *breaker.Overrides
	rdb         *redis.Client
	redisPrefix string
}

type envOptions struct {
	workers bool
}

func withWorkers(o *envOptions) { o.workers = true }

func newEnv(t *testing.T, opts ...func(*envOptions)) *env {
	t.Helper()
	var o envOptions
	for _, f := range opts {
		f(&o)
	}
	pool := dbtest.New(t)
	log := slog.New(slog.DiscardHandler)
	rdb := redis.NewClient(&redis.Options{Addr: redistest.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	redisPrefix := redistest.Prefix(t)
	topo := queuetest.NewTopology(t)
	conn := queue.NewConn(queuetest.URL(), log)
	pub := queue.NewPublisher(conn, topo, 2)
	dispatcher := outbox.NewDispatcher(pool, pub, log)
	relay := outbox.NewRelay(pool, pub, log)
	relay.Age, relay.Interval = time.Second, 200*time.Millisecond
	events := event.NewService(pool, rdb, redisPrefix, dispatcher, log)

	cfg := config.Default()
	cfg.API.AdminToken = adminToken
	cfg.Network.AllowPrivateNetworks = true
	overrides := breaker.NewOverrides(pool)
	srv, err := httpapi.New(httpapi.Deps{Config: cfg, Log: log, Tenants: tenant.NewStore(pool),
		Webhooks: webhook.NewStore(pool), Events: events, Deliveries: history.NewReader(pool),
		DLQ: dlq.NewStore(pool, dispatcher), Breaker: breaker.New(rdb, redisPrefix), Overrides: overrides,
		Limits: ratelimit.New(rdb, redisPrefix), Checks: health.Checks{}, Console: console.Config{DB: pool}})
	require.NoError(t, err)
	api := httptest.NewServer(srv.Handler())
	t.Cleanup(api.Close)

	parts := []func(context.Context) error{conn.Run, events.Run, dispatcher.Run, relay.Run}
	if o.workers {
		sender := delivery.NewSender(delivery.SenderConfig{ConnectTimeout: 2 * time.Second, MaxConnsPerHost: 5,
			UserAgent: delivery.UserAgent}, netguard.Policy{AllowPrivate: true})
		guard := delivery.NewGuard(breaker.New(rdb, redisPrefix), ratelimit.New(rdb, redisPrefix), pool, log)
		worker := delivery.NewWorker(pool, sender, guard, pub, log)
		consumer := queue.NewConsumer(conn, topo, pub, queue.ConsumerConfig{Prefetch: 16, Concurrency: 8, Grace: time.Second}, worker.Handle)
		recorder := queue.NewConsumer(conn, topo, pub, queue.ConsumerConfig{Queues: []string{topo.DeadQueue()}, Prefetch: 8,
			Concurrency: 2, Grace: time.Second}, dlq.NewRecorder(pool, dispatcher, log).Handle)
		batches := dlq.NewRunner(pool, dispatcher, log, 2, 2*time.Second)
		batches.Poll = 100 * time.Millisecond
		parts = append(parts, recorder.Run, batches.Run,
			func(ctx context.Context) error { return worker.Serve(ctx, consumer.Run) })
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, run := range parts {
		wg.Add(1)
		go func() { defer wg.Done(); _ = run(ctx) }()
	}
	t.Cleanup(func() { cancel(); wg.Wait() })
	queuetest.WaitConnected(t, conn)
	return &env{t: t, pool: pool, api: api, overrides: overrides, rdb: rdb, redisPrefix: redisPrefix}
}

// call is a REST API request; it returns the status and decoded body.
func (e *env) call(method, path, token string, body any) (int, map[string]any) {
	e.t.Helper()
	var rd io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		require.NoError(e.t, err)
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, e.api.URL+path, rd)
	require.NoError(e.t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	require.NoError(e.t, err)
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	require.NoError(e.t, err)
	var out map[string]any
	if len(raw) > 0 {
		require.NoError(e.t, json.Unmarshal(raw, &out), string(raw))
	}
	return res.StatusCode, out
}

// tenant creates a tenant and returns its id and API key.
func (e *env) tenant(name string) (uuid.UUID, string) {
	e.t.Helper()
	status, body := e.call("POST", "/v1/tenants", adminToken, map[string]any{"name": name})
	require.Equal(e.t, http.StatusCreated, status, body)
	return uuid.MustParse(body["id"].(string)), body["api_key"].(string)
}

// webhook registers an endpoint for every event and returns its id.
func (e *env) webhook(key, url string, extra map[string]any) uuid.UUID {
	e.t.Helper()
	body := map[string]any{"url": url, "events": []string{"*"}}
	for k, v := range extra {
		body[k] = v
	}
	status, out := e.call("POST", "/v1/webhooks", key, body)
	require.Equal(e.t, http.StatusCreated, status, out)
	return uuid.MustParse(out["id"].(string))
}

// seed stores n deliveries of new events to hook, in the given state, as
// if they had run: exhausted ones with a 502 and a recorded attempt. It
// returns their ids, oldest first.
func (e *env) seed(tenantID, hook uuid.UUID, n int, eventType, status string) []uuid.UUID {
	e.t.Helper()
	return e.seedAt(tenantID, hook, n, eventType, status, 0)
}

// shiftedID is the schema's uuidv7() for the time now + $6.
const shiftedID = `encode(set_bit(set_bit(overlay(uuid_send(gen_random_uuid())
    PLACING substring(int8send((extract(epoch FROM clock_timestamp() + $6::interval) * 1000)::bigint) FROM 3)
    FROM 1 FOR 6), 52, 1), 53, 1), 'hex')::uuid`

// seedAt is seed for deliveries created shift from now (ids included).
func (e *env) seedAt(tenantID, hook uuid.UUID, n int, eventType, status string, shift time.Duration) []uuid.UUID {
	e.t.Helper()
	ctx := context.Background()
	rows, err := e.pool.Query(ctx, `WITH ev AS (
    INSERT INTO events (id, tenant_id, event_type, source, idempotency_key, request_hash, priority, data, created_at)
    SELECT `+shiftedID+`, $1, $3, 'seed', 'seed-' || gen_random_uuid(), '\x00', 'normal',
        json_build_object('n', g, 'note', 'seeded'), now() + $6::interval
    FROM generate_series(1, $4) g
    RETURNING id, tenant_id, created_at)
INSERT INTO deliveries (id, tenant_id, event_id, webhook_id, status, priority, attempt_count, failure_category,
    last_status_code, last_error, completed_at, dead_lettered_at, created_at)
SELECT `+shiftedID+`, tenant_id, id, $2, $5, 'normal',
    CASE WHEN $5 IN ('exhausted', 'succeeded') THEN 1 ELSE 0 END,
    CASE WHEN $5 = 'exhausted' THEN 'server_error' END,
    CASE WHEN $5 = 'exhausted' THEN 502 WHEN $5 = 'succeeded' THEN 200 END,
    CASE WHEN $5 = 'exhausted' THEN '502 Bad Gateway: upstream closed the connection' END,
    CASE WHEN $5 IN ('exhausted', 'succeeded') THEN now() END,
    CASE WHEN $5 = 'exhausted' THEN now() END,
    created_at
FROM ev
RETURNING id`, tenantID, hook, eventType, n, status, shift)
	require.NoError(e.t, err)
	var ids []uuid.UUID
	for rows.Next() {
		var id uuid.UUID
		require.NoError(e.t, rows.Scan(&id))
		ids = append(ids, id)
	}
	require.NoError(e.t, rows.Err())
	if status == "exhausted" || status == "succeeded" {
		_, err = e.pool.Exec(ctx, `INSERT INTO delivery_attempts (delivery_id, delivery_created_at, attempt_number, tenant_id,
    webhook_id, status_code, failure_category, error, duration_ms, response_headers, response_body_sample, scheduled_at, executed_at)
SELECT id, created_at, 1, tenant_id, webhook_id, last_status_code, failure_category, last_error, 42,
    '{"Content-Type": "text/plain"}', CASE WHEN status = 'exhausted' THEN 'bad gateway' ELSE 'ok' END, created_at, now()
FROM deliveries WHERE id = ANY($1)`, ids)
		require.NoError(e.t, err)
	}
	return ids
}

func (e *env) count(sql string, args ...any) int {
	e.t.Helper()
	var n int
	require.NoError(e.t, e.pool.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

// client is a browser without JavaScript: a cookie jar, redirects not
// followed, and the CSRF token of the last page it read.
type client struct {
	t    *testing.T
	base string
	http *http.Client
	csrf string
}

func (e *env) client() *client {
	jar, err := cookiejar.New(nil)
	require.NoError(e.t, err)
	return &client{t: e.t, base: e.api.URL, http: &http.Client{Jar: jar,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// page is an answer of the console.
type page struct {
	Status   int
	Body     string
	Location string
	Header   http.Header
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

func (c *client) do(req *http.Request) page {
	c.t.Helper()
	res, err := c.http.Do(req)
	require.NoError(c.t, err)
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	require.NoError(c.t, err)
	p := page{Status: res.StatusCode, Body: string(raw), Location: res.Header.Get("Location"), Header: res.Header}
	if m := csrfField.FindStringSubmatch(p.Body); m != nil {
		c.csrf = m[1]
	}
	return p
}

func (c *client) get(path string) page {
	c.t.Helper()
	req, err := http.NewRequest("GET", c.base+path, nil)
	require.NoError(c.t, err)
	return c.do(req)
}

// post sends form with the client's current CSRF token (unless form sets
// its own).
func (c *client) post(path string, form url.Values) page {
	c.t.Helper()
	if form == nil {
		form = url.Values{}
	}
	if _, ok := form["csrf"]; !ok {
		form.Set("csrf", c.csrf)
	}
	req, err := http.NewRequest("POST", c.base+path, strings.NewReader(form.Encode()))
	require.NoError(c.t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return c.do(req)
}

// signIn signs in with key and reads a page so that the client holds the
// session's CSRF token.
func (c *client) signIn(key string) {
	c.t.Helper()
	c.get("/console/sign-in")
	p := c.post("/console/sign-in", url.Values{"api_key": {key}})
	require.Equal(c.t, http.StatusSeeOther, p.Status, p.Body)
	require.Equal(c.t, "/console/webhooks", p.Location)
	require.Equal(c.t, http.StatusOK, c.get("/console/webhooks").Status)
}
