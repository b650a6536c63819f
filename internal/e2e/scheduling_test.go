package e2e

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/metrics"
	"github.com/hookline/hookline/internal/systemtest"
	"github.com/hookline/hookline/internal/testwait"
)

// Deliveries beyond a webhook's burst each wait for their own reserved
// slot: they arrive one emission interval apart, and each is deferred
// once, however long it waits.
func TestRateLimitedDeliveriesWaitForTheirOwnSlot(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	rc := newReceiver(t, func(int, http.ResponseWriter, *http.Request) {})
	hook, _ := s.webhook(rc.URL, map[string]any{"rate_limit": map[string]any{"requests_per_minute": 120, "burst": 1}})
	const n = 6
	var ids []uuid.UUID
	for i := range n {
		ids = append(ids, s.deliveryOf(s.publish("order.created", map[string]any{"n": i})))
	}
	for _, id := range ids {
		s.waitStatus(id, "succeeded", 30*time.Second)
	}
	require.Len(t, rc.requests(), n)
	// The slots are judged by when each attempt was let through the limit,
	// as recorded, not by when the receiver saw it: on a loaded machine
	// the time from sending to arrival varies more than the 50-ms margin.
	rows, err := s.Pool.Query(context.Background(),
		`SELECT executed_at FROM delivery_attempts WHERE webhook_id = $1 ORDER BY executed_at`, hook)
	require.NoError(t, err)
	at, err := pgx.CollectRows(rows, pgx.RowTo[time.Time])
	require.NoError(t, err)
	require.Len(t, at, n, "one attempt per delivery")
	// 120 a minute is one every 500 ms; the first goes at once.
	for i := 1; i < n; i++ {
		require.GreaterOrEqual(t, at[i].Sub(at[0]), time.Duration(i)*500*time.Millisecond-50*time.Millisecond,
			"delivery %d came before its slot", i)
	}
	require.Less(t, at[n-1].Sub(at[0]), time.Duration(n-1)*500*time.Millisecond+2*time.Second,
		"the last delivery waited far beyond its slot")
	// Each waited once: no delivery was put off more than once.
	require.Zero(t, s.Count(`SELECT count(*) FROM deliveries WHERE postponed_count > 1`))
	require.Zero(t, s.Count(`SELECT count(*) FROM deliveries WHERE parked_at IS NOT NULL`))
}

// Deliveries held back by an open circuit are parked until its half-open
// time, telling when in next_attempt_at, and an operator's reset releases
// them at once.
func TestOpenCircuitParksDeliveriesUntilReset(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	var healthy atomic.Bool
	rc := newReceiver(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
		if !healthy.Load() {
			w.WriteHeader(http.StatusInternalServerError)
		}
	})
	id, _ := s.webhook(rc.URL, map[string]any{
		"retry_config": map[string]any{"max_attempts": 20, "base_delay_ms": 100, "max_delay_ms": 200},
		"circuit_breaker_config": map[string]any{"enabled": true, "minimum_throughput": 2, "error_threshold_percentage": 50,
			"sleep_window_ms": 120000},
	})
	for i := range 2 {
		s.publish("order.created", map[string]any{"n": i})
	}
	testwait.Eventually(t, 20*time.Second, func() bool {
		return s.Count(`SELECT count(*) FROM circuit_breaker_states WHERE webhook_id = $1 AND state = 'open'`, id) == 1
	}, "the circuit to open")
	for i := range 4 {
		s.publish("order.created", map[string]any{"n": 10 + i})
	}
	testwait.Eventually(t, 20*time.Second, func() bool {
		return s.Count(`SELECT count(*) FROM deliveries WHERE park_reason = 'circuit_open'`) == 6
	}, "every delivery to be parked behind the circuit")
	// Each knows when it will be looked at again: the half-open time,
	// about two minutes out.
	require.Zero(t, s.Count(`SELECT count(*) FROM deliveries
		WHERE next_attempt_at IS NULL OR next_attempt_at < now() + interval '100 seconds'`))
	var parked uuid.UUID
	require.NoError(t, s.Pool.QueryRow(context.Background(), `SELECT id FROM deliveries LIMIT 1`).Scan(&parked))
	var shown map[string]any
	s.call("GET", "/v1/deliveries/"+parked.String(), s.key, nil, http.StatusOK, &shown)
	require.Equal(t, "circuit_open", shown["waiting_for"])
	require.NotEmpty(t, shown["next_attempt_at"])
	before := len(rc.requests())

	healthy.Store(true)
	s.call("PATCH", "/v1/webhooks/"+id+"/circuit-breaker", s.key, map[string]any{"action": "reset"}, http.StatusOK, nil)
	testwait.Eventually(t, 15*time.Second, func() bool {
		return s.Count(`SELECT count(*) FROM deliveries WHERE status = 'succeeded'`) == 6
	}, "the reset to release every parked delivery")
	require.Equal(t, before+6, len(rc.requests()), "each parked delivery was sent once after the reset")
	require.Zero(t, s.Count(`SELECT count(*) FROM deliveries WHERE postponed_count > 1`),
		"no delivery was put off more than once while the circuit was open")
}

// A burst to one endpoint host waits for its few connections inside the
// worker: nothing is postponed for a busy host.
func TestABurstQueuesForItsHostInTheWorker(t *testing.T) {
	t.Parallel()
	s := newSystem(t, func(o *systemtest.Options) { o.Workers = 32 })
	// An endpoint that takes 20 ms to answer: 40 deliveries need its 5
	// connections for a while.
	rc := newReceiver(t, func(_ int, _ http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(20 * time.Millisecond):
		case <-r.Context().Done():
		}
	})
	s.webhook(rc.URL, map[string]any{"rate_limit": map[string]any{"requests_per_minute": 100000, "burst": 1000}})
	const n = 40
	for i := range n {
		s.publish("order.created", map[string]any{"n": i})
	}
	testwait.Eventually(t, 30*time.Second, func() bool {
		return s.Count(`SELECT count(*) FROM deliveries WHERE status = 'succeeded'`) == n
	}, "every delivery to succeed")
	require.Zero(t, s.Count(`SELECT count(*) FROM deliveries WHERE postponed_count > 0 OR park_reason IS NOT NULL`))
	require.Len(t, rc.requests(), n)
}

// While one tenant's endpoints hang and hold every slot of the worker,
// another tenant's deliveries go at once: a tenant below its fair share is
// always let in.
func TestAHangingTenantLeavesRoomForAnother(t *testing.T) {
	t.Parallel()
	s := newSystem(t, func(o *systemtest.Options) { o.Workers, o.SharedSlots = 6, true })
	hang := make(chan struct{})
	var hanging atomic.Int64
	// Each hanging webhook is its own host, so that the per-host cap is
	// not what holds the noisy tenant back.
	for range 8 {
		slow := newReceiver(t, func(_ int, _ http.ResponseWriter, r *http.Request) {
			hanging.Add(1)
			select {
			case <-hang:
			case <-r.Context().Done():
			}
		})
		s.webhook(slow.URL, map[string]any{"events": []string{"noisy.*"},
			"retry_config":           map[string]any{"timeout_ms": 60000},
			"circuit_breaker_config": map[string]any{"enabled": false}})
	}
	t.Cleanup(func() { close(hang) }) // before the receivers close: cleanups run last first
	for i := range 4 {
		s.publish("noisy.tick", map[string]any{"n": i})
	}
	// The noisy tenant, alone, holds every slot.
	testwait.Eventually(t, 20*time.Second, func() bool { return hanging.Load() == 6 }, "the noisy tenant to fill the slots")

	_, quiet := s.newTenant(map[string]any{"name": "quiet"})
	rc := newReceiver(t, func(int, http.ResponseWriter, *http.Request) {})
	s.webhookAs(quiet, rc.URL, nil)
	const n = 10
	start := time.Now()
	for i := range n {
		s.publishAs(quiet, "order.created", map[string]any{"n": i})
	}
	testwait.Eventually(t, 10*time.Second, func() bool { return len(rc.requests()) == n }, "the quiet tenant's deliveries")
	require.Less(t, time.Since(start), 10*time.Second)
	require.EqualValues(t, 6, hanging.Load(), "the noisy tenant, over its share, got no slot meanwhile")
	testwait.Eventually(t, 20*time.Second, func() bool {
		return s.Count(`SELECT count(*) FROM deliveries WHERE park_reason = 'tenant_share'`) > 0
	}, "the noisy tenant's other deliveries to wait in Postgres, not in the queue")
}

// A delivery of a paused webhook waits parked; enabling the webhook
// releases it at once rather than at the end of its minute. (Publishing
// fans out to active webhooks only, so the parked delivery is set up as a
// worker leaves one that met its webhook paused.)
func TestEnablingAWebhookReleasesItsParkedDeliveries(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	rc := newReceiver(t, func(int, http.ResponseWriter, *http.Request) {})
	id, _ := s.webhook(rc.URL, map[string]any{"active": false})
	var d uuid.UUID
	require.NoError(t, s.Pool.QueryRow(context.Background(), `WITH ev AS (
    INSERT INTO events (id, tenant_id, event_type, idempotency_key, request_hash, priority, data)
    VALUES (uuidv7(), $1, 'order.created', 'paused-1', '\x00', 'normal', '{"n":1}') RETURNING id, tenant_id, created_at)
INSERT INTO deliveries (id, tenant_id, event_id, webhook_id, priority, parked_at, park_reason, next_attempt_at, created_at)
SELECT uuidv7(), tenant_id, id, $2, 'normal', now(), 'inactive', now() + interval '1 minute', created_at FROM ev
RETURNING id`, s.tenantID, id).Scan(&d))
	s.call("PATCH", "/v1/webhooks/"+id, s.key, map[string]any{"active": true}, http.StatusOK, nil)
	s.waitStatus(d, "succeeded", 15*time.Second)
	require.Len(t, rc.requests(), 1)
}

// A host that stalls, then answers fast again: the deliveries parked during
// the stall, at the pace it showed (a fifth of its age per connection),
// are brought forward when it recovers, and all arrive long before the
// latest of those reservations.
func TestDeliveriesParkedDuringAHostStallAreBroughtForward(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	s.unlimited()
	stalled := make(chan struct{})
	rc := newReceiver(t, func(_ int, _ http.ResponseWriter, r *http.Request) {
		select {
		case <-stalled:
		case <-r.Context().Done():
		}
	})
	s.fastHook(rc.URL, nil) // a 30 s attempt timeout: the stall ends first
	const n = 40
	for i := range n {
		s.publish("order.created", map[string]any{"n": i})
	}
	// The worker's five connections to the host hang; the deliveries that
	// find no free one are reserved further and further ahead.
	var ahead int
	testwait.Eventually(t, 30*time.Second, func() bool {
		ahead = s.Count(`SELECT coalesce(extract(epoch FROM max(next_attempt_at) - now()), 0)::int
			FROM deliveries WHERE park_reason = 'host_busy'`)
		return ahead >= 10
	}, "a delivery parked 10 s or more ahead for its busy host")
	latest := time.Now().Add(time.Duration(ahead) * time.Second)
	soonest := s.Count(`SELECT coalesce(extract(epoch FROM min(next_attempt_at) - now()) * 1000, 0)::int
		FROM deliveries WHERE park_reason = 'host_busy'`)
	var parkedIDs []uuid.UUID
	rows, err := s.Pool.Query(context.Background(), `SELECT id FROM deliveries WHERE park_reason = 'host_busy'`)
	require.NoError(t, err)
	parkedIDs, err = pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	require.NoError(t, err)
	parked := len(parkedIDs)
	hastened := testutil.ToFloat64(metrics.DeliveriesHastened)
	close(stalled)
	// A worker notices the recovery at the next fast 2xx from the host: of
	// a delivery published now, as a host with traffic gets at once (with
	// none, the earliest reservation to come due brings it).
	const more = 5
	for i := range more {
		s.publish("order.created", map[string]any{"n": n + i})
	}

	testwait.Eventually(t, 30*time.Second, func() bool {
		return s.Count(`SELECT count(*) FROM deliveries WHERE status = 'succeeded'`) == n+more
	}, "every delivery to succeed")
	// Every delivery, those whose parking was still being written when the
	// host answered fast again included.
	var lastDone, lastParked time.Time
	require.NoError(t, s.Pool.QueryRow(context.Background(),
		`SELECT max(completed_at), max(completed_at) FILTER (WHERE id = ANY($1)) FROM deliveries`, parkedIDs).
		Scan(&lastDone, &lastParked))
	require.Less(t, lastDone, latest.Add(-2*time.Second),
		"deliveries deferred during the stall were sent at their reservations, not when the host answered again "+
			"(%d parked when it ended, the soonest %d ms ahead, the last of them done %s before the latest "+
			"reservation; %.0f brought forward since)",
		parked, soonest, latest.Sub(lastParked), testutil.ToFloat64(metrics.DeliveriesHastened)-hastened)
	require.Zero(t, s.Count(`SELECT count(*) FROM deliveries WHERE parked_at IS NOT NULL`))
}
