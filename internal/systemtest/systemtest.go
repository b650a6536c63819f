// Package systemtest runs hookline in-process for tests: the api as the
// api command builds it (httpapi.NewStack) and, when asked, the worker's
// delivery consumer and the dlq process's dead-letter recorder and batch
// runner, on a database, a RabbitMQ topology and a Redis key prefix of
// their own. Everything stops, and is removed, when the test ends.
package systemtest

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
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/config"
	"github.com/hookline/hookline/internal/db"
	"github.com/hookline/hookline/internal/db/dbtest"
	"github.com/hookline/hookline/internal/httpapi"
	"github.com/hookline/hookline/internal/process"
	"github.com/hookline/hookline/internal/queue"
	"github.com/hookline/hookline/internal/queue/queuetest"
	"github.com/hookline/hookline/internal/redistest"
	"github.com/hookline/hookline/internal/supervisor"
	"github.com/hookline/hookline/internal/supervisor/supervisortest"
	"github.com/hookline/hookline/internal/testproxy"
	"github.com/hookline/hookline/internal/tracing"
)

// AdminToken authorises the tenant routes of a started system.
const AdminToken = "systemtest-admin-token"

// Options adjust Start. The zero value runs the api alone.
type Options struct {
	// Workers is how many deliveries the in-process worker handles at
	// once; with a worker, the dlq process's dead-letter recorder and
	// batch runner run too. 0: the api alone.
	Workers int
	// SharedSlots makes the worker share its Workers slots between
	// tenants, as the worker process does.
	SharedSlots bool
	// BlockPrivate makes the worker refuse private and loopback
	// addresses, as a worker does by default; by default here it delivers
	// to them, where the tests' receivers listen. The api accepts them as
	// webhook URLs either way.
	BlockPrivate bool
	// Roles connects the api, the worker and the dlq parts each under its
	// own database role (hookline_api, hookline_worker, hookline_dlq), as
	// a deployment with per-process database URLs does.
	Roles bool
	// RedisMode is the test Redis every part uses (redistest.Client):
	// the single server (the zero value) or the local Redis Cluster.
	RedisMode redistest.Mode
	// AMQPURL is the RabbitMQ every part connects to, one URL or a
	// cluster's list (queuetest.StartCluster); default the test broker.
	// Shards is amqp.shards of the system's topology; default 1.
	AMQPURL string
	Shards  int
	// WorkerRedis is the address of a single Redis server for the
	// worker's circuit breakers and token buckets, such as a proxy the
	// test cuts; default the api's.
	WorkerRedis string
	// Log receives every part's logs; discarded when nil.
	Log *slog.Logger
	// Tracer traces the api, the worker and the dlq parts, as processes
	// with tracing on do; the zero Tracer: tracing off.
	Tracer tracing.Tracer
	// CircuitReopens is dlq.auto_disable.circuit_reopens of the dlq part
	// that disables failing webhooks (it looks every 100 ms); 0: the
	// configured default.
	CircuitReopens int
}

// System is a running system.
type System struct {
	// URL is the api's base URL.
	URL string
	// Pool is the database owner's pool, for the test's own queries.
	Pool *pgxpool.Pool
	// APIPool, WorkerPool and DLQPool are the pools of the api, the
	// worker and the dlq parts: Pool, or under their roles with
	// Options.Roles. The worker's reaches Postgres through PGTap.
	APIPool, WorkerPool, DLQPool *pgxpool.Pool
	// PGTap is the proxy between the worker and Postgres.
	PGTap *testproxy.Proxy
	// Topology is the system's RabbitMQ topology.
	Topology queue.Topology
	// Redis is a client of the api's Redis; every key of the system is
	// under RedisPrefix.
	Redis       redis.UniversalClient
	RedisPrefix string
	// Stack is the api as httpapi.NewStack built it: its publisher, its
	// outbox and its server's stores.
	Stack *httpapi.Stack

	t testing.TB
}

// Start runs a system until t ends.
func Start(t testing.TB, o Options) *System {
	t.Helper()
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.RedisMode == "" {
		o.RedisMode = redistest.Single
	}
	if o.AMQPURL == "" {
		o.AMQPURL = queuetest.URL()
	}
	s := &System{t: t, Topology: queuetest.NewTopologyAt(t, o.AMQPURL, o.Shards), Redis: redistest.Client(t, o.RedisMode)}
	s.RedisPrefix = redistest.PrefixOn(t, s.Redis)
	s.openPools(o.Roles)
	conn := queue.NewConn(o.AMQPURL, o.Log)
	s.buildAPI(conn, o.Log)
	s.Stack.WithTracer(o.Tracer)
	parts := append([]supervisor.Part{{Name: "rabbitmq", Run: conn.Run}}, s.Stack.Parts()...)
	if o.Workers > 0 {
		parts = append(parts, s.dlqParts(conn, o)...)
		parts = append(parts, s.workerParts(conn, o)...)
	}
	supervisortest.Start(t, o.Log, parts...)
	queuetest.WaitConnected(t, conn)
	// Started last, the server stops first, before what it feeds.
	srv, err := httpapi.New(s.Stack.Deps)
	require.NoError(t, err)
	api := httptest.NewServer(srv.Handler())
	t.Cleanup(api.Close)
	s.URL = api.URL
	return s
}

// openPools makes the database and the parts' pools.
func (s *System) openPools(roles bool) {
	dbURL := dbtest.NewURL(s.t, true)
	s.Pool = openPool(s.t, dbURL)
	s.APIPool, s.DLQPool = s.Pool, s.Pool
	workerURL := dbURL
	if roles {
		s.APIPool, s.DLQPool = openPool(s.t, asRole(s.t, dbURL, "hookline_api")), openPool(s.t, asRole(s.t, dbURL, "hookline_dlq"))
		workerURL = asRole(s.t, dbURL, "hookline_worker")
	}
	u, err := url.Parse(workerURL)
	require.NoError(s.t, err)
	s.PGTap = testproxy.New(s.t, u.Host)
	u.Host = s.PGTap.Addr
	s.WorkerPool = openPool(s.t, u.String())
}

// buildAPI builds the api on conn, with the readiness checks of the api
// process.
func (s *System) buildAPI(conn *queue.Conn, log *slog.Logger) {
	cfg := config.Default()
	cfg.API.AdminToken = AdminToken
	cfg.Network.AllowPrivateNetworks = true
	cfg.AMQP.Prefix, cfg.AMQP.Shards, cfg.Redis.KeyPrefix = s.Topology.Prefix, max(s.Topology.Shards, 1), s.RedisPrefix
	st, err := httpapi.NewStack(cfg, s.APIPool, s.Redis, conn, log)
	require.NoError(s.t, err)
	// The relay takes the deliveries of its production age, looked for
	// more often.
	st.Relay.Interval = 200 * time.Millisecond
	checks := (&process.Deps{PG: s.APIPool, Redis: s.Redis, AMQP: conn}).Checks()
	checks["rabbitmq"] = st.Publisher.Check
	st.Deps.Checks = checks
	s.Stack = st
}

func openPool(t testing.TB, url string) *pgxpool.Pool {
	t.Helper()
	pool, err := db.Open(context.Background(), url, 16)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// asRole is the database URL dbURL connecting under role: the session
// takes the role at connection start, and every privilege check is the
// role's.
func asRole(t testing.TB, dbURL, role string) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	q := u.Query()
	q.Set("options", "-c role="+role)
	// pgx does not read "+" in a query string as a space.
	u.RawQuery = strings.ReplaceAll(q.Encode(), "+", "%20")
	return u.String()
}

func redisClient(t testing.TB, addr string) redis.UniversalClient {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// Call sends a request to the api with token as its bearer token and
// body, unless nil, encoded as JSON. It returns the status and the body of
// the answer.
func (s *System) Call(method, path, token string, body any) (int, []byte) {
	s.t.Helper()
	var rd io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		require.NoError(s.t, err)
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, s.URL+path, rd)
	require.NoError(s.t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	require.NoError(s.t, err)
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	require.NoError(s.t, err)
	return res.StatusCode, raw
}

// Tenant creates a tenant named name and returns its id and API key.
func (s *System) Tenant(name string) (uuid.UUID, string) {
	s.t.Helper()
	status, raw := s.Call("POST", "/v1/tenants", AdminToken, map[string]any{"name": name})
	require.Equal(s.t, http.StatusCreated, status, string(raw))
	var tn struct {
		ID     uuid.UUID `json:"id"`
		APIKey string    `json:"api_key"`
	}
	require.NoError(s.t, json.Unmarshal(raw, &tn))
	return tn.ID, tn.APIKey
}

// Count runs sql, a query for one number such as a count(*), as the
// database's owner.
func (s *System) Count(sql string, args ...any) int {
	s.t.Helper()
	var n int
	require.NoError(s.t, s.Pool.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}
