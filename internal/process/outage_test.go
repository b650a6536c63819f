package process_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/db"
	"github.com/hookline/hookline/internal/db/dbtest"
	"github.com/hookline/hookline/internal/queue/queuetest"
	"github.com/hookline/hookline/internal/testproxy"
	"github.com/hookline/hookline/internal/wire"
)

// metricValue reads an unlabelled sample from a scrape; -1 when absent.
func metricValue(scraped, name string) float64 {
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` (\S+)$`).FindStringSubmatch(scraped)
	if m == nil {
		return -1
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return -1
	}
	return v
}

// A worker cut off from Postgres for longer than an hour keeps its
// deliveries waiting instead of dead-lettering them as poison (720 tries
// of 5 s used to be the end): a delivery whose message has been put back
// for over an hour is put back again, not sent to the DLQ, the worker
// exports how long it has waited, and once Postgres is back it is
// delivered on its first attempt, its retries untouched.
func TestLongPostgresOutageKeepsDeliveriesWaiting(t *testing.T) {
	t.Parallel()
	var hits atomic.Int64
	rc := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		hits.Add(1)
	}))
	defer rc.Close()
	dbURL := dbtest.NewURL(t, false)
	topo := queuetest.NewTopology(t)
	base, key := startAPI(t, dbURL, topo, rc.URL)
	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	tap := testproxy.New(t, u.Host)
	u.Host = tap.Addr
	metricsAddr := freeAddr(t)
	w := start(t, "worker", "DATABASE_URL="+u.String(), "METRICS_ADDR="+metricsAddr, "AMQP_PREFIX="+topo.Prefix,
		"ALLOW_PRIVATE_NETWORKS=true")
	waitReady(t, w, "http://"+metricsAddr+"/readyz")
	pool, err := db.Open(context.Background(), dbURL, 1)
	require.NoError(t, err)
	defer pool.Close()

	tap.Cut()
	ev := postJSON(t, base+"/v1/events", key, `{"event_type": "order.created", "data": {}}`, http.StatusAccepted)
	var task wire.Task
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT d.id, d.event_id, d.webhook_id, d.tenant_id, d.priority
		FROM deliveries d WHERE d.event_id = $1`, ev["id"]).Scan(&task.DeliveryID, &task.EventID, &task.WebhookID, &task.TenantID, &task.Priority))
	task.Attempt, task.CreatedAt = 1, time.Now()
	// The same delivery's message as it comes back after an hour of
	// put-backs, 720 of them.
	m := task.Message(time.Time{})
	queuetest.Publish(t, topo.WorkExchange(), task.Priority, amqp.Publishing{DeliveryMode: amqp.Persistent, MessageId: m.ID, Body: m.Body,
		Headers: amqp.Table{"x-internal-retries": int64(720), "x-internal-since": time.Now().Add(-61 * time.Minute).UnixMilli()}})

	// Put back for 30 s (the longest wait), it sits in the 25.6 s delay
	// tier; dead-lettered, it would be on the dead-letter queue.
	tier := topo.DelayQueue(25600 * time.Millisecond)
	waitFor(t, 30*time.Second, w, func() bool {
		return queuetest.Depth(t, tier)+queuetest.Depth(t, topo.DeadQueue()) > 0
	}, "the worker to handle the message that waited an hour")
	require.Zero(t, queuetest.Depth(t, topo.DeadQueue()), "nothing was dead-lettered")
	require.Equal(t, 1, queuetest.Depth(t, tier), "put back for 30 s")
	waitFor(t, 10*time.Second, w, func() bool {
		return metricValue(scrape(t, "http://"+metricsAddr+"/metrics"), "hookline_worker_internal_wait_seconds") >= 3600
	}, "the worker to report a delivery waiting on Postgres for over an hour")
	scraped := scrape(t, "http://"+metricsAddr+"/metrics")
	require.GreaterOrEqual(t, metricValue(scraped, "hookline_worker_internal_waiting"), 1.0)

	tap.Restore()
	waitFor(t, 60*time.Second, w, func() bool {
		var status string
		require.NoError(t, pool.QueryRow(context.Background(), `SELECT status FROM deliveries WHERE id = $1`, task.DeliveryID).Scan(&status))
		return status == "succeeded"
	}, "the delivery to succeed once Postgres is back")
	var attempts int
	var dead bool
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT attempt_count, dead_lettered_at IS NOT NULL FROM deliveries WHERE id = $1`,
		task.DeliveryID).Scan(&attempts, &dead))
	require.Equal(t, 1, attempts, "the outage spent none of the endpoint's retries")
	require.False(t, dead)
	require.Equal(t, int64(1), hits.Load())
	require.Zero(t, queuetest.Depth(t, topo.DeadQueue()))
}
