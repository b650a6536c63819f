package intake_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/config"
	"github.com/hookline/hookline/internal/db/dbtest"
	"github.com/hookline/hookline/internal/health"
	"github.com/hookline/hookline/internal/httpapi"
	"github.com/hookline/hookline/internal/intake"
	"github.com/hookline/hookline/internal/queue"
	"github.com/hookline/hookline/internal/queue/queuetest"
	"github.com/hookline/hookline/internal/redistest"
	"github.com/hookline/hookline/internal/supervisor"
	"github.com/hookline/hookline/internal/supervisor/supervisortest"
	"github.com/hookline/hookline/internal/testwait"
)

const adminToken = "intake-test-admin-token"

// env is an api, as cmd/api builds it, consuming its publish queue.
type env struct {
	t    *testing.T
	pool *pgxpool.Pool
	topo queue.Topology
	http *httptest.Server
	// stopSource stops the source and waits until it has returned.
	stopSource func()
}

func newEnv(t *testing.T) *env {
	t.Helper()
	cfg := config.Default()
	cfg.API.AdminToken = adminToken
	log := slog.New(slog.DiscardHandler)
	pool := dbtest.New(t)
	rdb := redis.NewClient(&redis.Options{Addr: redistest.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	topo := queuetest.NewTopology(t)
	cfg.AMQP.Prefix, cfg.Redis.KeyPrefix = topo.Prefix, redistest.Prefix(t)
	conn := queue.NewConn(queuetest.URL(), log)
	st, err := httpapi.NewStack(cfg, pool, rdb, conn, log)
	require.NoError(t, err)
	st.Deps.Checks = health.Checks{}
	srv, err := httpapi.New(st.Deps)
	require.NoError(t, err)
	src := intake.New(intake.Config{Prefetch: 32, MaxPayloadBytes: cfg.API.MaxPayloadBytes, Grace: time.Second},
		conn, topo, st.Publisher, srv, st.Events, st.Deps.Limits, log)
	supervisortest.Start(t, log, append([]supervisor.Part{{Name: "rabbitmq", Run: conn.Run}}, st.Parts()...)...)
	queuetest.WaitConnected(t, conn)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx) }()
	stop := func() {
		cancel()
		require.NoError(t, <-done)
	}
	// Registered after the supervisor's: runs before it stops the
	// group commit.
	t.Cleanup(func() {
		if ctx.Err() == nil {
			stop()
		}
	})
	testwait.Eventually(t, 10*time.Second, func() bool { return src.Check(context.Background()) == nil }, "source consuming")
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	return &env{t: t, pool: pool, topo: topo, http: hs, stopSource: stop}
}

// post sends an admin or tenant request and decodes the answer.
func (e *env) post(path, token string, body any, want int) map[string]any {
	e.t.Helper()
	raw, err := json.Marshal(body)
	require.NoError(e.t, err)
	req, err := http.NewRequest(http.MethodPost, e.http.URL+path, bytes.NewReader(raw))
	require.NoError(e.t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	require.NoError(e.t, err)
	defer res.Body.Close()
	out, err := io.ReadAll(res.Body)
	require.NoError(e.t, err)
	require.Equal(e.t, want, res.StatusCode, string(out))
	var m map[string]any
	require.NoError(e.t, json.Unmarshal(out, &m))
	return m
}

// tenant creates a tenant (with body's settings) and returns its id and
// API key.
func (e *env) tenant(body map[string]any) (string, string) {
	e.t.Helper()
	m := e.post("/v1/tenants", adminToken, body, http.StatusCreated)
	return m["id"].(string), m["api_key"].(string)
}

// send publishes body to the publish exchange with headers.
func (e *env) send(body string, headers amqp.Table, messageID string) {
	e.t.Helper()
	queuetest.Publish(e.t, e.topo.PublishExchange(), "any.key", amqp.Publishing{
		DeliveryMode: amqp.Persistent, ContentType: "application/json", MessageId: messageID, Headers: headers, Body: []byte(body),
	})
}

func (e *env) count(sql string, args ...any) int {
	e.t.Helper()
	var n int
	require.NoError(e.t, e.pool.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

// rejected takes the next message of the rejected queue, waiting for it.
func (e *env) rejected() amqp.Delivery {
	e.t.Helper()
	var got amqp.Delivery
	testwait.Eventually(e.t, 10*time.Second, func() bool {
		ok := false
		queuetest.WithChannel(e.t, func(ch *amqp.Channel) error {
			d, found, err := ch.Get(e.topo.PublishRejectedQueue(), true)
			got, ok = d, found
			return err
		})
		return ok
	}, "a message in %s", e.topo.PublishRejectedQueue())
	return got
}

// taken waits until the source has taken every message of the publish
// queue (none is ready).
func (e *env) taken() {
	e.t.Helper()
	testwait.Eventually(e.t, 10*time.Second, func() bool { return queuetest.Depth(e.t, e.topo.PublishQueue()) == 0 },
		"publish queue taken")
}

// settled stops the source and requires the publish queue empty: a
// message handed out and not acknowledged would be back in it.
func (e *env) settled() {
	e.t.Helper()
	e.taken()
	e.stopSource()
	require.Zero(e.t, queuetest.Depth(e.t, e.topo.PublishQueue()), "every message acknowledged")
}

// An event published through the queue is committed with its deliveries,
// and its message acknowledged; the same key again, with the same body, is
// a replay that creates nothing and is acknowledged too; the same key with
// another body is kept in the rejected queue as a conflict.
func TestQueuePublishAcceptsAndReplays(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tenantID, key := e.tenant(map[string]any{"name": "queue"})
	e.post("/v1/webhooks", key, map[string]any{"url": "https://8.8.8.8/hook", "events": []string{"order.*"}}, http.StatusCreated)
	auth := amqp.Table{"Authorization": "Bearer " + key, "Idempotency-Key": "order-1"}
	body := `{"event_type":"order.created","data":{"n":1},"priority":"high"}`

	e.send(body, auth, "")
	testwait.Eventually(t, 10*time.Second, func() bool {
		return e.count(`SELECT count(*) FROM events WHERE tenant_id = $1`, tenantID) == 1
	}, "event committed")
	require.Equal(t, 1, e.count(`SELECT count(*) FROM events WHERE tenant_id = $1 AND idempotency_key = 'order-1' AND priority = 'high'`, tenantID))
	require.Equal(t, 1, e.count(`SELECT count(*) FROM deliveries WHERE tenant_id = $1`, tenantID))

	e.send(body, auth, "")
	e.send(`{"event_type":"order.created","data":{"n":2}}`, auth, "")
	d := e.rejected()
	require.Equal(t, "idempotency_conflict", d.Headers[intake.HeaderErrorCode])
	require.EqualValues(t, 422, d.Headers[intake.HeaderErrorStatus])

	// Without a key, the message id is the key: the same message sent
	// twice is one event.
	e.send(`{"event_type":"order.paid","data":{}}`, amqp.Table{"Authorization": "Bearer " + key}, "msg-7")
	e.send(`{"event_type":"order.paid","data":{}}`, amqp.Table{"Authorization": "Bearer " + key}, "msg-7")
	e.settled()
	require.Equal(t, 2, e.count(`SELECT count(*) FROM events WHERE tenant_id = $1`, tenantID), "order-1 and msg-7")
	require.Equal(t, 1, e.count(`SELECT count(*) FROM events WHERE tenant_id = $1 AND idempotency_key = 'msg-7'`, tenantID))
	require.Equal(t, 2, e.count(`SELECT count(*) FROM deliveries WHERE tenant_id = $1`, tenantID))
	require.Equal(t, 0, queuetest.Depth(t, e.topo.PublishRejectedQueue()), "the replays were not refused")
}

// A message the HTTP route would refuse is kept in the rejected queue with
// the route's code and message, without its credential; nothing is stored.
func TestQueuePublishRejectsWithTheReason(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tenantID, key := e.tenant(map[string]any{"name": "refused"})
	svc := e.post("/v1/service-keys", adminToken, map[string]any{"scopes": []string{"read"}}, http.StatusCreated)["service_key"].(string)
	good := `{"event_type":"order.created","data":{}}`
	cases := []struct {
		name    string
		body    string
		headers amqp.Table
		code    string
		status  int
	}{
		{"no credential", good, amqp.Table{}, "unauthorized", 401},
		{"wrong key", good, amqp.Table{"Authorization": "Bearer hk_wrong"}, "unauthorized", 401},
		{"service key without tenant", good, amqp.Table{"Authorization": "Bearer " + svc}, "tenant_required", 400},
		{"service key without the publish scope", good, amqp.Table{"Authorization": "Bearer " + svc, "Hookline-Tenant": tenantID},
			"insufficient_scope", 403},
		{"missing event type", `{"data":{}}`, amqp.Table{"Authorization": "Bearer " + key}, "invalid_request", 400},
		{"not JSON", `{"event_type":`, amqp.Table{"Authorization": "Bearer " + key}, "invalid_json", 400},
		// The quorum queue's count, set here as the broker sets it on
		// the twentieth hand-out.
		{"handed out too often", good, amqp.Table{"Authorization": "Bearer " + key, "x-delivery-count": int64(19)},
			"redelivery_limit", 500},
		{"key differs from the header", `{"event_type":"a","data":{},"idempotency_key":"x"}`,
			amqp.Table{"Authorization": "Bearer " + key, "Idempotency-Key": "y"}, "invalid_request", 400},
	}
	for _, tc := range cases {
		tc.headers["X-Case"] = tc.name
		e.send(tc.body, tc.headers, "")
		d := e.rejected()
		require.Equal(t, tc.name, d.Headers["X-Case"], "kept in order, with the producer's other headers")
		require.Equal(t, tc.code, d.Headers[intake.HeaderErrorCode], tc.name)
		require.EqualValues(t, tc.status, d.Headers[intake.HeaderErrorStatus], tc.name)
		require.NotEmpty(t, d.Headers[intake.HeaderErrorMessage], tc.name)
		require.NotContains(t, d.Headers, "Authorization", tc.name)
		require.Equal(t, tc.body, string(d.Body), tc.name)
	}
	e.settled()
	require.Equal(t, 0, e.count(`SELECT count(*) FROM events`))
}

// A tenant publishing faster than its publish limit through the queue is
// slowed to the limit, not refused: every event is stored, none rejected,
// and they are spread over the time the bucket takes to give their tokens.
func TestQueuePublishIsSlowedByThePublishLimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const n, rate = 12, 5
	tenantID, key := e.tenant(map[string]any{"name": "limited", "publish_rate_limit": map[string]any{"requests_per_second": rate, "burst": 1}})
	for i := range n {
		e.send(`{"event_type":"order.created","data":{"i":`+string(rune('0'+i%10))+`}}`, amqp.Table{"Authorization": "Bearer " + key}, "")
	}
	testwait.Eventually(t, 20*time.Second, func() bool {
		return e.count(`SELECT count(*) FROM events WHERE tenant_id = $1`, tenantID) == n
	}, "every event committed")
	e.settled()
	require.Equal(t, 0, queuetest.Depth(t, e.topo.PublishRejectedQueue()), "none refused")
	var spread float64
	require.NoError(t, e.pool.QueryRow(context.Background(),
		`SELECT extract(epoch FROM max(created_at) - min(created_at)) FROM events WHERE tenant_id = $1`, tenantID).Scan(&spread))
	// n tokens at rate a second with a burst of 1: the last comes
	// (n-1)/rate seconds after the first.
	require.GreaterOrEqual(t, spread, float64(n-1)/rate*0.9, "published at the limit")
}
