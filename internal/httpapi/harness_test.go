package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/breaker"
	"github.com/hookline/hookline/internal/config"
	"github.com/hookline/hookline/internal/db/dbtest"
	"github.com/hookline/hookline/internal/dlq"
	"github.com/hookline/hookline/internal/event"
	"github.com/hookline/hookline/internal/health"
	"github.com/hookline/hookline/internal/history"
	"github.com/hookline/hookline/internal/outbox"
	"github.com/hookline/hookline/internal/queue"
	"github.com/hookline/hookline/internal/queue/queuetest"
	"github.com/hookline/hookline/internal/ratelimit"
	"github.com/hookline/hookline/internal/redistest"
	"github.com/hookline/hookline/internal/tenant"
	"github.com/hookline/hookline/internal/testlog"
	"github.com/hookline/hookline/internal/webhook"
)

const testAdminToken = "admin-token-for-tests"

// apiEnv is one API server on its own database.
type apiEnv struct {
	t      *testing.T
	pool   *pgxpool.Pool
	srv    *Server
	http   *httptest.Server
	logBuf *testlog.Buffer
	topo   queue.Topology
	amqp   *queue.Conn
}

// apiOptions adjust newAPI.
type apiOptions struct {
	cfg       config.Config
	checks    health.Checks
	amqpURL   string // default: the local broker
	redisAddr string // default: the local Redis
}

func newAPI(t *testing.T, opts ...func(*apiOptions)) *apiEnv {
	t.Helper()
	e := startAPI(t, opts...)
	e.t = t
	return e
}

// startAPI is newAPI for any testing.TB, such as a fuzz target's
// *testing.F: the server lives as long as t, and forTest gives each test
// that uses it a handle that reports to that test.
func startAPI(t testing.TB, opts ...func(*apiOptions)) *apiEnv {
	t.Helper()
	pool := dbtest.New(t)
	o := apiOptions{cfg: config.Default(), checks: health.Checks{}, amqpURL: queuetest.URL(), redisAddr: redistest.Addr()}
	o.cfg.API.AdminToken = testAdminToken
	o.cfg.Network.AllowPrivateNetworks = false
	for _, f := range opts {
		f(&o)
	}
	logBuf := &testlog.Buffer{}
	log := slog.New(slog.NewJSONHandler(logBuf, &slog.HandlerOptions{Level: slog.LevelDebug}))

	rdb := redis.NewClient(&redis.Options{Addr: o.redisAddr, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	topo := queuetest.NewTopology(t)
	conn := queue.NewConn(o.amqpURL, log)
	pub := queue.NewPublisher(conn, topo, 2)
	dispatcher := outbox.NewDispatcher(pool, pub, log)
	relay := outbox.NewRelay(pool, pub, log)
	relay.Age, relay.Interval = 5*time.Second, 200*time.Millisecond
	redisPrefix := redistest.Prefix(t)
	events := event.NewService(pool, rdb, redisPrefix, dispatcher, log)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, run := range []func(context.Context) error{conn.Run, events.Run, dispatcher.Run, relay.Run} {
		wg.Add(1)
		go func() { defer wg.Done(); _ = run(ctx) }()
	}
	t.Cleanup(func() { cancel(); wg.Wait() })
	queuetest.WaitConnected(t, conn)

	checks := health.Checks{
		"postgres": func(ctx context.Context) error { return pool.Ping(ctx) },
		"redis":    func(ctx context.Context) error { return rdb.Ping(ctx).Err() },
		"rabbitmq": pub.Check,
	}
	for name, c := range o.checks {
		checks[name] = c
	}
	srv, err := New(Deps{
		Config:     o.cfg,
		Log:        log,
		Tenants:    tenant.NewStore(pool),
		Webhooks:   webhook.NewStore(pool),
		Events:     events,
		Deliveries: history.NewReader(pool),
		DLQ:        dlq.NewStore(pool, dispatcher),
		Breaker:    breaker.New(rdb, redisPrefix),
		Overrides:  breaker.NewOverrides(pool),
		Limits:     ratelimit.New(rdb, redisPrefix),
		Checks:     checks,
	})
	require.NoError(t, err)
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	return &apiEnv{pool: pool, srv: srv, http: hs, logBuf: logBuf, topo: topo, amqp: conn}
}

// forTest returns a copy of e that reports to t.
func (e *apiEnv) forTest(t *testing.T) *apiEnv {
	c := *e
	c.t = t
	return &c
}

// resp is a decoded answer.
type resp struct {
	Status int
	Header http.Header
	Raw    []byte
	Body   map[string]any
}

func (r resp) errCode() string {
	e, _ := r.Body["error"].(map[string]any)
	code, _ := e["code"].(string)
	return code
}

func (r resp) errField() string {
	e, _ := r.Body["error"].(map[string]any)
	f, _ := e["field"].(string)
	return f
}

func (e *apiEnv) do(method, path, token string, body any) resp {
	e.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		require.NoError(e.t, err)
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, e.http.URL+path, rd)
	require.NoError(e.t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(e.t, err)
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	require.NoError(e.t, err)
	out := resp{Status: res.StatusCode, Header: res.Header, Raw: raw}
	if len(raw) > 0 && strings.HasPrefix(res.Header.Get("Content-Type"), "application/json") {
		require.NoError(e.t, json.Unmarshal(raw, &out.Body), string(raw))
	}
	return out
}

// tenantKey creates a tenant and returns its id and API key.
func (e *apiEnv) tenantKey(name string) (string, string) {
	e.t.Helper()
	r := e.do("POST", "/v1/tenants", testAdminToken, map[string]any{"name": name})
	require.Equal(e.t, http.StatusCreated, r.Status, string(r.Raw))
	return r.Body["id"].(string), r.Body["api_key"].(string)
}

// createWebhook registers a webhook and returns the response body.
func (e *apiEnv) createWebhook(key string, body map[string]any) map[string]any {
	e.t.Helper()
	if body["url"] == nil {
		body["url"] = "https://8.8.8.8/hooks"
	}
	if body["events"] == nil {
		body["events"] = []string{"order.*"}
	}
	r := e.do("POST", "/v1/webhooks", key, body)
	require.Equal(e.t, http.StatusCreated, r.Status, string(r.Raw))
	return r.Body
}

func (e *apiEnv) count(sql string, args ...any) int {
	e.t.Helper()
	var n int
	require.NoError(e.t, e.pool.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}
