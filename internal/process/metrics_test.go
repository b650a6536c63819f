package process_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/db/dbtest"
	"github.com/hookline/hookline/internal/metrics/metricstest"
	"github.com/hookline/hookline/internal/queue/queuetest"
)

// notExported lists metric families that the dashboards or alert rules
// read but that no process can be made to export in this test, with the
// reason. Empty: every family is either produced by the traffic below or
// pre-created at zero by metrics.Init.
var notExported = map[string]string{}

// After real traffic through api, worker and dlq (deliveries that succeed,
// deliveries that fail to exhaustion and open a circuit, dead letters
// recorded with their owner notifications, a batch retry, a retention
// run), every metric family that a dashboard or an alert rule reads is on
// the /metrics of at least one process.
func TestDashboardAndAlertMetricsAreExported(t *testing.T) {
	t.Parallel()
	refs, err := metricstest.Referenced("../..")
	require.NoError(t, err)
	require.Contains(t, refs, "hookline_dlq_deliveries", "the deployment files are read")

	var failing atomic.Bool
	failing.Store(true)
	var okHits, failHits atomic.Int64
	rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if r.URL.Path == "/fail" {
			failHits.Add(1)
			if failing.Load() {
				w.WriteHeader(http.StatusInternalServerError)
			}
			return
		}
		okHits.Add(1)
	}))
	defer rc.Close()

	dbURL := dbtest.NewURL(t, false)
	topo := queuetest.NewTopology(t)
	// Small pools, so that parallel tests stay within max_connections; a
	// retention run every second.
	cfgFile := filepath.Join(t.TempDir(), "hookline.yaml")
	require.NoError(t, os.WriteFile(cfgFile, []byte("database:\n  max_conns: 6\nretention:\n  interval: 1s\n"), 0o600))
	env := []string{"DATABASE_URL=" + dbURL, "AMQP_PREFIX=" + topo.Prefix, "REDIS_PREFIX=" + redisPrefix(t),
		"ALLOW_PRIVATE_NETWORKS=true", "HOOKLINE_CONFIG=" + cfgFile}
	apiAddr := freeAddr(t)
	api := start(t, "api", append(env, "API_ADDR="+apiAddr)...)
	waitReady(t, api, "http://"+apiAddr+"/readyz")
	base := "http://" + apiAddr

	tenant := postJSON(t, base+"/v1/tenants", "process-test-token", `{"name": "metrics"}`, http.StatusCreated)
	key := tenant["api_key"].(string)
	postJSON(t, base+"/v1/webhooks", key, fmt.Sprintf(`{"url": %q, "events": ["order.*"]}`, rc.URL+"/ok"), http.StatusCreated)
	failHook := postJSON(t, base+"/v1/webhooks", key, fmt.Sprintf(`{"url": %q, "events": ["user.*"],
		"retry_config": {"max_attempts": 1},
		"circuit_breaker_config": {"minimum_throughput": 2, "error_threshold_percentage": 50, "sleep_window_ms": 1000}}`,
		rc.URL+"/fail"), http.StatusCreated)["id"].(string)

	const each = 3
	for i := range each {
		postJSON(t, base+"/v1/events", key, fmt.Sprintf(`{"event_type": "order.created", "data": {"i": %d}}`, i), http.StatusAccepted)
		postJSON(t, base+"/v1/events", key, fmt.Sprintf(`{"event_type": "user.created", "data": {"i": %d}}`, i), http.StatusAccepted)
	}

	workerAddr, dlqAddr := freeAddr(t), freeAddr(t)
	worker := start(t, "worker", append(env, "METRICS_ADDR="+workerAddr)...)
	waitReady(t, worker, "http://"+workerAddr+"/readyz")
	dlq := start(t, "dlq", append(env, "METRICS_ADDR="+dlqAddr)...)
	waitReady(t, dlq, "http://"+dlqAddr+"/readyz")

	dlqCount := func() int {
		list := getJSON(t, base+"/v1/dlq/counts", key)
		return int(list["total"].(float64))
	}
	waitFor(t, 60*time.Second, dlq, func() bool { return okHits.Load() >= each && dlqCount() == each },
		"the order events to be delivered and the user events to be recorded in the DLQ")

	// The DLQ size gauge (refreshed every 15 s) shows the dead letters
	// before they are retried.
	waitFor(t, 45*time.Second, dlq, func() bool {
		return metricstest.Has(metricstest.Families(scrape(t, "http://"+dlqAddr+"/metrics")), "hookline_dlq_deliveries")
	}, "the DLQ size gauge")

	// The endpoint recovers; a batch retries its dead letters.
	failing.Store(false)
	batch := postJSON(t, base+"/v1/dlq/retry-batch", key,
		fmt.Sprintf(`{"filter": {"webhook_ids": [%q]}, "rate_limit": {"requests_per_second": 100}}`, failHook), http.StatusAccepted)
	batchURL := base + "/v1/dlq/batch-operations/" + batch["batch_operation_id"].(string)
	waitFor(t, 60*time.Second, dlq, func() bool { return getJSON(t, batchURL, key)["state"] == "completed" },
		"the batch retry to complete")

	scrapes := map[string]string{"api": base + "/metrics", "worker": "http://" + workerAddr + "/metrics",
		"dlq": "http://" + dlqAddr + "/metrics"}
	var missing []string
	var families map[string]map[string]bool
	check := func() bool {
		families = map[string]map[string]bool{}
		for name, url := range scrapes {
			families[name] = metricstest.Families(scrape(t, url))
		}
		missing = missing[:0]
		for name := range refs {
			if _, ok := notExported[name]; ok {
				continue
			}
			found := false
			for _, fams := range families {
				found = found || metricstest.Has(fams, name)
			}
			if !found {
				missing = append(missing, name)
			}
		}
		return len(missing) == 0
	}
	// The dlq refreshes its gauges every 15 s.
	deadline := time.After(45 * time.Second)
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for !check() {
		select {
		case <-deadline:
			slices.Sort(missing)
			t.Fatalf("read by a dashboard or rule but exported by no process: %s", strings.Join(missing, ", "))
		case <-tick.C:
		}
	}
	for name := range notExported {
		require.Contains(t, refs, name, "an exclusion for a metric nothing reads")
	}

	// Each family comes from the process that owns it.
	for proc, want := range map[string][]string{
		"api":    {"hookline_publish_requests_total", "hookline_http_requests_total", "hookline_outbox_lag_seconds"},
		"worker": {"hookline_deliveries_total", "hookline_circuit_breaker_state", "hookline_dependency_up"},
		"dlq": {"hookline_dlq_deliveries", "hookline_queue_depth", "hookline_batch_operations",
			"hookline_dead_lettered_total", "hookline_retention_pruned_total", "hookline_dependency_up"},
	} {
		for _, name := range want {
			require.True(t, families[proc][name], "%s exports %s", proc, name)
		}
	}
	require.Positive(t, failHits.Load())
}

func getJSON(t *testing.T, url, token string) map[string]any {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	var out map[string]any
	require.NoError(t, json.NewDecoder(res.Body).Decode(&out))
	require.Equal(t, http.StatusOK, res.StatusCode, "%v", out)
	return out
}

func scrape(t *testing.T, url string) string {
	t.Helper()
	res, err := http.Get(url)
	require.NoError(t, err)
	defer res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode, url)
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return string(body)
}
