package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/config"
	"github.com/hookline/hookline/internal/console"
	"github.com/hookline/hookline/internal/db/dbtest"
	"github.com/hookline/hookline/internal/health"
	"github.com/hookline/hookline/internal/process"
	"github.com/hookline/hookline/internal/queue"
	"github.com/hookline/hookline/internal/queue/queuetest"
	"github.com/hookline/hookline/internal/redistest"
	"github.com/hookline/hookline/internal/supervisor"
	"github.com/hookline/hookline/internal/supervisor/supervisortest"
	"github.com/hookline/hookline/internal/testlog"
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
	// console serves the console and the portal too (withConsole).
	console bool
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
	o := apiOptions{cfg: config.Default(), checks: health.Checks{}, amqpURL: queuetest.URL(), redisAddr: redistest.Addr()}
	o.cfg.API.AdminToken = testAdminToken
	o.cfg.Network.AllowPrivateNetworks = false
	for _, f := range opts {
		f(&o)
	}
	logBuf := &testlog.Buffer{}
	log := slog.New(slog.NewJSONHandler(logBuf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	// A failed test shows what the stack logged at warning and above.
	t.Cleanup(func() {
		if t.Failed() {
			for _, line := range strings.Split(logBuf.String(), "\n") {
				if strings.Contains(line, `"level":"ERROR"`) || strings.Contains(line, `"level":"WARN"`) {
					t.Log(line)
				}
			}
		}
	})

	pool := dbtest.New(t)
	rdb := redis.NewClient(&redis.Options{Addr: o.redisAddr, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	topo := queuetest.NewTopology(t)
	o.cfg.AMQP.Prefix, o.cfg.Redis.KeyPrefix = topo.Prefix, redistest.Prefix(t)
	conn := queue.NewConn(o.amqpURL, log)
	st, err := NewStack(o.cfg, pool, rdb, conn, log)
	require.NoError(t, err)
	st.Relay.Interval = 200 * time.Millisecond
	supervisortest.Start(t, log, append([]supervisor.Part{{Name: "rabbitmq", Run: conn.Run}}, st.Parts()...)...)
	queuetest.WaitConnected(t, conn)

	st.Deps.Checks = (&process.Deps{PG: pool, Redis: rdb, AMQP: conn}).Checks()
	st.Deps.Checks["rabbitmq"] = st.Publisher.Check
	maps.Copy(st.Deps.Checks, o.checks)
	// The REST API alone unless asked: the console has its own tests.
	if !o.console {
		st.Deps.Console = console.Config{}
	}
	srv, err := New(st.Deps)
	require.NoError(t, err)
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	return &apiEnv{pool: pool, srv: srv, http: hs, logBuf: logBuf, topo: topo, amqp: conn}
}

// withConsole serves the console and the portal beside the REST API.
func withConsole(o *apiOptions) { o.console = true }

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

func (e *apiEnv) do(method, path, token string, body any, headers ...string) resp {
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
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
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
