package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
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
	"github.com/hookline/hookline/internal/db"
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
	"github.com/hookline/hookline/internal/schedule"
	"github.com/hookline/hookline/internal/tenant"
	"github.com/hookline/hookline/internal/testproxy"
	"github.com/hookline/hookline/internal/testwait"
	"github.com/hookline/hookline/internal/webhook"
)

const adminToken = "e2e-admin-token"

// system is an api, workers and a dlq recorder on their own database and
// queues.
type system struct {
	t        *testing.T
	pool     *pgxpool.Pool
	api      *httptest.Server
	topo     queue.Topology
	key      string
	tenantID uuid.UUID
	pgTap    *testproxy.Proxy // between the worker and Postgres
	// The pools of the api, the worker and the dlq parts: pool itself
	// (the worker's through pgTap) unless roles.
	apiPool, workerPool, dlqPool *pgxpool.Pool
}

type options struct {
	allowPrivate bool
	workers      int
	// roles connects the api, the worker and the dlq parts each under its
	// own database role (hookline_api, hookline_worker, hookline_dlq), as
	// a deployment with per-process database URLs does; pool stays the
	// owner's, for the tests' own queries.
	roles bool
	// log receives every part's logs; discarded when nil.
	log *slog.Logger
	// share makes the worker share its slots (workers of them) between
	// tenants, as the worker process does.
	share bool
}

func newSystem(t *testing.T, opts ...func(*options)) *system {
	t.Helper()
	o := options{allowPrivate: true, workers: 16}
	for _, f := range opts {
		f(&o)
	}
	ctx := context.Background()
	dbURL := dbtest.NewURL(t, true)
	pool := openPool(t, dbURL)
	apiPool, dlqPool := pool, pool
	if o.roles {
		apiPool, dlqPool = openPool(t, asRole(t, dbURL, "hookline_api")), openPool(t, asRole(t, dbURL, "hookline_dlq"))
		dbURL = asRole(t, dbURL, "hookline_worker")
	}
	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	tap := testproxy.New(t, u.Host)
	u.Host = tap.Addr
	workerPool := openPool(t, u.String())

	log := o.log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	topo := queuetest.NewTopology(t)
	conn := queue.NewConn(queuetest.URL(), log)
	pub := queue.NewPublisher(conn, topo, 2)
	dispatcher := outbox.NewDispatcher(apiPool, pub, log)
	dlqDispatcher := dispatcher
	if o.roles {
		dlqDispatcher = outbox.NewDispatcher(dlqPool, pub, log)
	}
	relay := outbox.NewRelay(apiPool, pub, log)
	relay.Age, relay.Interval = 5*time.Second, 200*time.Millisecond
	rdb := redis.NewClient(&redis.Options{Addr: redistest.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	redisPrefix := redistest.Prefix(t)
	events := event.NewService(apiPool, rdb, redisPrefix, dispatcher, log)

	cfg := config.Default()
	cfg.API.AdminToken = adminToken
	cfg.Network.AllowPrivateNetworks = true
	srv, err := httpapi.New(httpapi.Deps{Config: cfg, Log: log, Tenants: tenant.NewStore(apiPool),
		Webhooks: webhook.NewStore(apiPool), Events: events, Deliveries: history.NewReader(apiPool), DLQ: dlq.NewStore(apiPool, dispatcher), Checks: health.Checks{},
		Breaker: breaker.New(rdb, redisPrefix), Overrides: breaker.NewOverrides(apiPool), Limits: ratelimit.New(rdb, redisPrefix)})
	require.NoError(t, err)
	api := httptest.NewServer(srv.Handler())
	t.Cleanup(api.Close)

	policy := netguard.Policy{AllowPrivate: o.allowPrivate}
	sender := delivery.NewSender(delivery.SenderConfig{ConnectTimeout: 2 * time.Second, MaxConnsPerHost: 5, UserAgent: delivery.UserAgent}, policy)
	guard := delivery.NewGuard(breaker.New(rdb, redisPrefix), ratelimit.New(rdb, redisPrefix), workerPool, log)
	worker := delivery.NewWorker(workerPool, sender, guard, pub, log)
	handlers := o.workers
	if o.share {
		worker.WithGate(schedule.NewGate(schedule.GateConfig{Slots: o.workers, Wait: 50 * time.Millisecond}))
		handlers = schedule.Handlers(o.workers)
	}
	consumer := queue.NewConsumer(conn, topo, pub, queue.ConsumerConfig{Prefetch: 16, Concurrency: handlers, Grace: time.Second}, worker.Handle)
	recorder := queue.NewConsumer(conn, topo, pub, queue.ConsumerConfig{Queues: []string{topo.DeadQueue()}, Prefetch: 8, Concurrency: 2, Grace: time.Second},
		dlq.NewRecorder(dlqPool, dlqDispatcher, log).Handle)

	batches := dlq.NewRunner(dlqPool, dlqDispatcher, log, 2, 2*time.Second)
	batches.Poll = 100 * time.Millisecond

	bg, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	parts := []func(context.Context) error{conn.Run, events.Run, dispatcher.Run, relay.Run, recorder.Run,
		batches.Run, func(ctx context.Context) error { return worker.Serve(ctx, consumer.Run) }}
	if dlqDispatcher != dispatcher {
		parts = append(parts, dlqDispatcher.Run)
	}
	for _, run := range parts {
		wg.Add(1)
		go func() { defer wg.Done(); _ = run(bg) }()
	}
	t.Cleanup(func() { cancel(); wg.Wait() })
	queuetest.WaitConnected(t, conn)

	s := &system{t: t, pool: pool, api: api, topo: topo, pgTap: tap,
		apiPool: apiPool, workerPool: workerPool, dlqPool: dlqPool}
	var tn map[string]any
	s.call("POST", "/v1/tenants", adminToken, map[string]any{"name": "e2e"}, http.StatusCreated, &tn)
	s.key = tn["api_key"].(string)
	s.tenantID = uuid.MustParse(tn["id"].(string))
	return s
}

func openPool(t *testing.T, url string) *pgxpool.Pool {
	t.Helper()
	pool, err := db.Open(context.Background(), url, 16)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// asRole is the database URL dbURL connecting under role: the session
// takes the role at connection start, and every privilege check is the
// role's.
func asRole(t *testing.T, dbURL, role string) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	q := u.Query()
	q.Set("options", "-c role="+role)
	// pgx does not read "+" in a query string as a space.
	u.RawQuery = strings.ReplaceAll(q.Encode(), "+", "%20")
	return u.String()
}

func (s *system) call(method, path, token string, body any, status int, out any) {
	s.t.Helper()
	var rd io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		require.NoError(s.t, err)
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, s.api.URL+path, rd)
	require.NoError(s.t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	require.NoError(s.t, err)
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	require.NoError(s.t, err)
	require.Equal(s.t, status, res.StatusCode, "%s %s: %s", method, path, raw)
	if out != nil {
		require.NoError(s.t, json.Unmarshal(raw, out))
	}
}

// webhook registers an endpoint for every event and returns its id and
// secret.
func (s *system) webhook(url string, extra map[string]any) (string, string) {
	s.t.Helper()
	body := map[string]any{"url": url, "events": []string{"*"}}
	for k, v := range extra {
		body[k] = v
	}
	var w map[string]any
	s.call("POST", "/v1/webhooks", s.key, body, http.StatusCreated, &w)
	return w["id"].(string), w["secret"].(string)
}

// publish sends one event and returns its id.
func (s *system) publish(eventType string, data map[string]any) string {
	s.t.Helper()
	var r map[string]any
	s.call("POST", "/v1/events", s.key, map[string]any{"event_type": eventType, "data": data}, http.StatusAccepted, &r)
	return r["id"].(string)
}

// deliveryOf returns the single delivery of an event.
func (s *system) deliveryOf(eventID string) uuid.UUID {
	s.t.Helper()
	var id uuid.UUID
	require.NoError(s.t, s.pool.QueryRow(context.Background(), `SELECT id FROM deliveries WHERE event_id = $1`, eventID).Scan(&id))
	return id
}

// waitStatus polls until the delivery reaches status (and, for exhausted,
// has been recorded by the dlq), failing after timeout.
func (s *system) waitStatus(id uuid.UUID, status string, timeout time.Duration) {
	s.t.Helper()
	testwait.Eventually(s.t, timeout, func() bool {
		var got string
		var dead bool
		err := s.pool.QueryRow(context.Background(), `SELECT status, dead_lettered_at IS NOT NULL FROM deliveries WHERE id = $1`, id).Scan(&got, &dead)
		return err == nil && got == status && (status != "exhausted" || dead)
	}, "delivery %s to become %s", id, status)
}

type attemptRow struct {
	Number      int
	StatusCode  *int
	Category    *string
	Error       *string
	Sample      string
	ScheduledAt time.Time
	ExecutedAt  time.Time
	DurationMS  int
}

func (s *system) attempts(id uuid.UUID) []attemptRow {
	s.t.Helper()
	rows, err := s.pool.Query(context.Background(), `SELECT attempt_number, status_code, failure_category, error,
		coalesce(response_body_sample, ''), scheduled_at, executed_at, duration_ms
		FROM delivery_attempts WHERE delivery_id = $1 ORDER BY attempt_number`, id)
	require.NoError(s.t, err)
	defer rows.Close()
	var out []attemptRow
	for rows.Next() {
		var a attemptRow
		require.NoError(s.t, rows.Scan(&a.Number, &a.StatusCode, &a.Category, &a.Error, &a.Sample, &a.ScheduledAt, &a.ExecutedAt, &a.DurationMS))
		out = append(out, a)
	}
	require.NoError(s.t, rows.Err())
	return out
}

func (s *system) count(sql string, args ...any) int {
	s.t.Helper()
	var n int
	require.NoError(s.t, s.pool.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

// received is one request a receiver saw.
type received struct {
	At     time.Time
	Header http.Header
	Body   []byte
}

// receiver is an httptest server whose answer to the n-th request (0-based)
// is decided by respond.
type receiver struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []received
}

func newReceiver(t *testing.T, respond func(n int, w http.ResponseWriter, r *http.Request)) *receiver {
	rc := &receiver{}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rc.mu.Lock()
		n := len(rc.reqs)
		rc.reqs = append(rc.reqs, received{At: time.Now(), Header: r.Header.Clone(), Body: body})
		rc.mu.Unlock()
		respond(n, w, r)
	}))
	t.Cleanup(rc.Close)
	return rc
}

func (rc *receiver) requests() []received {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]received(nil), rc.reqs...)
}
