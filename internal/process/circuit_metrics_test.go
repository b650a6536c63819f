package process_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/db/dbtest"
	"github.com/hookline/hookline/internal/queue/queuetest"
)

// A worker exports the circuit state of every webhook it delivered to,
// closed included: after one delivery to a healthy endpoint and one failed
// attempt to a failing one (not enough to open its circuit), both circuits
// read 0 on the worker's /metrics, with the time they were observed.
func TestClosedCircuitsAreExportedAfterTraffic(t *testing.T) {
	t.Parallel()
	var okHits, failHits atomic.Int64
	rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if r.URL.Path == "/fail" {
			failHits.Add(1)
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		okHits.Add(1)
	}))
	defer rc.Close()
	dbURL := dbtest.NewURL(t, false)
	topo := queuetest.NewTopology(t)
	base, key := startAPI(t, dbURL, topo, rc.URL+"/ok")
	healthy := listWebhooks(t, base, key)[0]
	failing := postJSON(t, base+"/v1/webhooks", key, fmt.Sprintf(`{"url": %q, "events": ["*"],
		"retry_config": {"max_attempts": 1}}`, rc.URL+"/fail"), http.StatusCreated)["id"].(string)
	before := time.Now()
	postJSON(t, base+"/v1/events", key, `{"event_type": "order.created", "data": {}}`, http.StatusAccepted)

	addr := freeAddr(t)
	worker := start(t, "worker", "DATABASE_URL="+dbURL, "METRICS_ADDR="+addr, "AMQP_PREFIX="+topo.Prefix,
		"ALLOW_PRIVATE_NETWORKS=true", "REDIS_PREFIX="+redisPrefix(t))
	waitReady(t, worker, "http://"+addr+"/readyz")
	waitFor(t, 30*time.Second, worker, func() bool { return okHits.Load() == 1 && failHits.Load() == 1 }, "one attempt to each endpoint")

	for _, id := range []string{healthy, failing} {
		state := `hookline_circuit_breaker_state{webhook_id="` + id + `"}`
		stamp := `hookline_circuit_breaker_state_updated_timestamp_seconds{webhook_id="` + id + `"}`
		// The attempt is recorded (and observed) right after the endpoint answers.
		waitFor(t, 10*time.Second, worker, func() bool { return metricValue(scrape(t, "http://"+addr+"/metrics"), state) == 0 },
			"the circuit of "+id+" exported as closed")
		require.GreaterOrEqual(t, metricValue(scrape(t, "http://"+addr+"/metrics"), stamp), float64(before.Unix()))
	}
}

// listWebhooks returns the ids of the tenant's webhooks.
func listWebhooks(t *testing.T, base, key string) []string {
	t.Helper()
	var ids []string
	for _, w := range getJSON(t, base+"/v1/webhooks", key)["data"].([]any) {
		ids = append(ids, w.(map[string]any)["id"].(string))
	}
	return ids
}
