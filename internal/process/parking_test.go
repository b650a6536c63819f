package process_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/db"
	"github.com/hookline/hookline/internal/db/dbtest"
	"github.com/hookline/hookline/internal/queue/queuetest"
)

// A worker killed with SIGKILL while deliveries wait parked in Postgres
// (each for its own rate-limit slot) loses none of them: another worker's
// waker publishes each at its time, and each is delivered (once, or twice
// if the kill cut its attempt off after the endpoint got it), none before
// its slot.
func TestParkedDeliveriesSurviveAWorkerKill(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	first := map[string]time.Time{} // each delivery's first arrival
	byDelivery := map[string]int{}
	rc := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		mu.Lock()
		defer mu.Unlock()
		id := r.Header.Get("X-Webhook-Delivery")
		if _, ok := first[id]; !ok {
			first[id] = time.Now()
		}
		byDelivery[id]++
	}))
	defer rc.Close()
	dbURL := dbtest.NewURL(t, false)
	topo := queuetest.NewTopology(t)
	addr := freeAddr(t)
	api := start(t, "api", "DATABASE_URL="+dbURL, "API_ADDR="+addr, "AMQP_PREFIX="+topo.Prefix, "ALLOW_PRIVATE_NETWORKS=true")
	base := "http://" + addr
	waitReady(t, api, base+"/readyz")
	tenant := postJSON(t, base+"/v1/tenants", "process-test-token", `{"name": "acme"}`, http.StatusCreated)
	key := tenant["api_key"].(string)
	// 120 a minute, burst 1: one delivery every 500 ms.
	postJSON(t, base+"/v1/webhooks", key, fmt.Sprintf(`{"url": %q, "events": ["*"],
		"rate_limit": {"requests_per_minute": 120, "burst": 1}}`, rc.URL), http.StatusCreated)
	w1 := startWorker(t, dbURL, topo)

	const n = 12
	for i := range n {
		postJSON(t, base+"/v1/events", key, fmt.Sprintf(`{"event_type": "order.created", "data": {"n": %d}}`, i), http.StatusAccepted)
	}
	pool, err := db.Open(context.Background(), dbURL, 1)
	require.NoError(t, err)
	defer pool.Close()
	count := func(sql string) int {
		var c int
		require.NoError(t, pool.QueryRow(context.Background(), sql).Scan(&c))
		return c
	}
	waitFor(t, 30*time.Second, w1, func() bool {
		return count(`SELECT count(*) FROM deliveries WHERE park_reason = 'rate_limited'`) >= 5
	}, "deliveries to be parked for their slots")
	w1.kill(t)

	w2 := startWorker(t, dbURL, topo)
	waitFor(t, 60*time.Second, w2, func() bool {
		return count(`SELECT count(*) FROM deliveries WHERE status = 'succeeded'`) == n
	}, "every delivery to succeed after the kill")

	mu.Lock()
	defer mu.Unlock()
	require.Len(t, byDelivery, n, "every delivery arrived")
	for id, times := range byDelivery {
		// Once, or twice for an attempt the kill cut off after the
		// endpoint got it (at least once).
		require.LessOrEqual(t, times, 2, "delivery %s sent again and again", id)
	}
	arrivals := make([]time.Time, 0, len(first))
	for _, at := range first {
		arrivals = append(arrivals, at)
	}
	sort.Slice(arrivals, func(i, j int) bool { return arrivals[i].Before(arrivals[j]) })
	// Each delivery goes no earlier than its own slot, 500 ms after the one
	// before; so the i-th arrival is at least i slots after the first. (The
	// slots that passed while no worker ran go together once one is back.)
	for i := 1; i < len(arrivals); i++ {
		require.GreaterOrEqual(t, arrivals[i].Sub(arrivals[0]), time.Duration(i)*500*time.Millisecond-150*time.Millisecond,
			"arrival %d came before its slot", i)
	}
	// Each waited once, or twice when the kill left its message
	// unacknowledged and the redelivered copy was put off again: never
	// more (no spinning).
	require.Zero(t, count(`SELECT count(*) FROM deliveries WHERE postponed_count > 2`), "a delivery was put off again and again")
}
