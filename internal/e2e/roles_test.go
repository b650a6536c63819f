package e2e

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/config"
	"github.com/hookline/hookline/internal/dlq"
	"github.com/hookline/hookline/internal/retention"
	"github.com/hookline/hookline/internal/systemtest"
	"github.com/hookline/hookline/internal/testlog"
	"github.com/hookline/hookline/internal/testwait"
	"github.com/hookline/hookline/internal/wire"
)

// taskSink takes the outbox tasks a part would publish.
type taskSink struct {
	mu    sync.Mutex
	tasks []wire.Task
}

func (d *taskSink) Enqueue(tasks ...wire.Task) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.tasks = append(d.tasks, tasks...)
}

// The whole system runs with each process under its own database role:
// the api (tenants, keys, webhooks, publishing, the outbox relay, reads,
// overrides, retries, replays, deletion, the audit log), the worker
// (deliveries in order, attempts, breaker transitions and their owner
// notifications) and the dlq process (dead letters and their notifications,
// batch retries, the sweep, retention dropping partitions). Nothing any of
// them does is refused: no log line mentions a missing privilege.
func TestSystemRunsUnderPerProcessRoles(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	logs := &testlog.Buffer{}
	s := newSystem(t, func(o *systemtest.Options) {
		o.Roles = true
		o.Log = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	for want, pool := range map[string]*pgxpool.Pool{"hookline_api": s.APIPool, "hookline_worker": s.WorkerPool, "hookline_dlq": s.DLQPool} {
		var got string
		require.NoError(t, pool.QueryRow(ctx, "SELECT current_user").Scan(&got))
		require.Equal(t, want, got)
	}

	var healthy atomic.Bool
	ok := newReceiver(t, func(int, http.ResponseWriter, *http.Request) {})
	flaky := newReceiver(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
		if !healthy.Load() {
			w.WriteHeader(http.StatusGone)
		}
	})
	broken := newReceiver(t, func(_ int, w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusInternalServerError) })
	owner := newReceiver(t, func(int, http.ResponseWriter, *http.Request) {})
	s.unlimited()

	okHook, _ := s.webhook(ok.URL, map[string]any{"events": []string{"order.*"}, "ordering_guarantee": "strict"})
	flakyHook := s.fastHook(flaky.URL, map[string]any{"events": []string{"order.*"}})
	brokenHook := s.fastHook(broken.URL, map[string]any{"events": []string{"order.*"},
		"circuit_breaker_config": map[string]any{"minimum_throughput": 2, "error_threshold_percentage": 50, "sleep_window_ms": 60000}})
	s.webhook(owner.URL, map[string]any{"events": []string{"webhook.*"}})

	var events []string
	for i := range 2 {
		events = append(events, s.publish("order.created", map[string]any{"n": i}))
	}
	testwait.Eventually(t, 20*time.Second, func() bool {
		return s.Count(`SELECT count(*) FROM deliveries WHERE webhook_id = $1 AND status = 'succeeded'`, okHook) == 2 &&
			s.Count(`SELECT count(*) FROM deliveries WHERE webhook_id = $1 AND dead_lettered_at IS NOT NULL`, flakyHook) == 2 &&
			s.Count(`SELECT count(*) FROM circuit_breaker_states WHERE webhook_id = $1 AND state = 'open'`, brokenHook) == 1
	}, "deliveries, dead letters and the broken circuit")
	testwait.Eventually(t, 20*time.Second, func() bool {
		return s.Count(`SELECT count(*) FROM deliveries d JOIN events e ON e.id = d.event_id
			WHERE e.event_type = 'webhook.circuit_opened' AND d.status = 'succeeded'`) == 1 &&
			s.Count(`SELECT count(*) FROM deliveries d JOIN events e ON e.id = d.event_id
			WHERE e.event_type = 'webhook.delivery_exhausted' AND d.status = 'succeeded'`) >= 2
	}, "owner notifications of the worker (circuit) and the dlq process (exhausted) delivered")

	// The api's reads and writes.
	s.call("POST", "/v1/api-keys", s.key, map[string]any{"name": "second"}, http.StatusCreated, nil)
	s.call("GET", "/v1/api-keys", s.key, nil, http.StatusOK, nil)
	var delivery map[string]any
	var okDelivery uuid.UUID
	require.NoError(t, s.Pool.QueryRow(ctx, `SELECT id FROM deliveries WHERE webhook_id = $1 ORDER BY id LIMIT 1`, okHook).Scan(&okDelivery))
	s.call("GET", "/v1/deliveries/"+okDelivery.String(), s.key, nil, http.StatusOK, &delivery)
	require.Len(t, delivery["attempts"], 1)
	s.call("GET", "/v1/webhooks/"+okHook+"/deliveries", s.key, nil, http.StatusOK, nil)
	s.call("GET", "/v1/webhooks/"+okHook+"/health", s.key, nil, http.StatusOK, nil)
	s.call("GET", "/v1/events/"+events[0], s.key, nil, http.StatusOK, nil)
	s.call("GET", "/v1/dlq", s.key, nil, http.StatusOK, nil)
	s.call("GET", "/v1/dlq/counts", s.key, nil, http.StatusOK, nil)
	s.call("PATCH", "/v1/webhooks/"+brokenHook+"/circuit-breaker", s.key, map[string]any{"action": "reset"}, http.StatusOK, nil)
	s.call("POST", "/v1/webhooks/"+okHook+"/secret/rotate", s.key, nil, http.StatusOK, nil)
	s.call("PATCH", "/v1/webhooks/"+okHook, s.key, map[string]any{"metadata": map[string]any{"team": "a"}}, http.StatusOK, nil)

	// Retries: one by hand (api), the other in a batch (dlq process), then
	// a replay; the worker delivers them.
	healthy.Store(true)
	var flakyDeliveries []uuid.UUID
	rows, err := s.Pool.Query(ctx, `SELECT id FROM deliveries WHERE webhook_id = $1 ORDER BY id`, flakyHook)
	require.NoError(t, err)
	for rows.Next() {
		var id uuid.UUID
		require.NoError(t, rows.Scan(&id))
		flakyDeliveries = append(flakyDeliveries, id)
	}
	require.NoError(t, rows.Err())
	require.Len(t, flakyDeliveries, 2)
	var retry struct {
		DeliveryID uuid.UUID `json:"delivery_id"`
	}
	s.call("POST", "/v1/webhooks/"+flakyHook+"/deliveries/"+flakyDeliveries[0].String()+"/retry", s.key, nil, http.StatusAccepted, &retry)
	s.waitStatus(retry.DeliveryID, "succeeded", 15*time.Second)
	batch := s.startBatch(map[string]any{"webhook_ids": []string{flakyHook}}, 100)
	testwait.Eventually(t, 20*time.Second, func() bool { return s.batch(batch).State == "completed" }, "the batch retry to complete")
	require.Equal(t, 1, s.batch(batch).Succeeded)
	var replay map[string]any
	s.call("POST", "/v1/events/"+events[1]+"/replay", s.key, map[string]any{"webhook_id": flakyHook}, http.StatusAccepted, &replay)
	testwait.Eventually(t, 15*time.Second, func() bool {
		return s.Count(`SELECT count(*) FROM deliveries WHERE event_id = $1 AND status = 'succeeded'`, replay["id"]) == 1
	}, "the replay delivered")

	s.call("DELETE", "/v1/webhooks/"+brokenHook, s.key, nil, http.StatusNoContent, nil)
	var audit struct {
		Data []map[string]any `json:"data"`
	}
	s.call("GET", "/v1/audit", s.key, nil, http.StatusOK, &audit)
	require.NotEmpty(t, audit.Data)

	// The dlq process's sweep and retention, under its role: as if 200 days
	// had passed, every partition of the attempt log is old enough to drop.
	discard := slog.New(slog.DiscardHandler)
	var swept taskSink
	lost := uuid.Must(uuid.NewV7())
	_, err = s.Pool.Exec(ctx, `INSERT INTO deliveries (id, tenant_id, event_id, webhook_id, status, priority, attempt_count, completed_at)
		SELECT $1, tenant_id, event_id, webhook_id, 'exhausted', 'normal', 1, now() - interval '1 hour'
		FROM deliveries WHERE id = $2`, lost, flakyDeliveries[1])
	require.NoError(t, err)
	sweeper := dlq.NewSweeper(s.DLQPool, &swept, discard)
	sweeper.Age = time.Minute
	require.NoError(t, sweeper.Sweep(ctx))
	require.Equal(t, 1, s.Count(`SELECT count(*) FROM deliveries WHERE id = $1 AND dead_lettered_at IS NOT NULL`, lost))
	require.Len(t, swept.tasks, 1, "the owner notification of the swept delivery")
	rep, err := retention.New(s.DLQPool, config.Default().Retention, discard).Once(ctx, time.Now().Add(200*24*time.Hour))
	require.NoError(t, err)
	require.Positive(t, rep.AttemptPartitions)
	require.Positive(t, rep.AttemptsRetained+rep.Attempts)
	require.Positive(t, rep.Deliveries)

	require.NotContains(t, logs.String(), "42501", "a part was refused a privilege")
	require.NotContains(t, logs.String(), "permission denied")
}
