package process_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/db"
	"github.com/hookline/hookline/internal/db/dbtest"
	"github.com/hookline/hookline/internal/queue/queuetest"
)

// A dlq process killed with SIGKILL halfway through a webhook's recovery of
// the events it missed while disabled: a restarted one takes the recovery
// over once the claim times out and finishes it from its checkpoint, giving
// every missed event exactly one delivery.
func TestRecoveryResumesAfterDLQSIGKILL(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	seen := map[string]int{} // requests per idempotency key (one key per event)
	rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		mu.Lock()
		seen[r.Header.Get("X-Idempotency-Key")]++
		mu.Unlock()
	}))
	defer rc.Close()
	dbURL := dbtest.NewURL(t, false)
	topo := queuetest.NewTopology(t)
	base, key := startAPI(t, dbURL, topo, rc.URL)
	pool, err := db.Open(context.Background(), dbURL, 2)
	require.NoError(t, err)
	defer pool.Close()
	count := func(sql string, args ...any) int {
		var n int
		require.NoError(t, pool.QueryRow(context.Background(), sql, args...).Scan(&n))
		return n
	}
	_, err = pool.Exec(context.Background(), `UPDATE tenants SET rate_limit_rpm = 600000, rate_limit_burst = 10000;
		UPDATE webhooks SET rate_limit = '{"requests_per_minute": 600000, "burst": 10000}'`)
	require.NoError(t, err)
	// The webhook was disabled from an hour ago until a minute ago; the
	// events published meanwhile made no delivery to it.
	const n = 600
	_, err = pool.Exec(context.Background(), `INSERT INTO webhook_pauses (webhook_id, paused_at, resumed_at)
SELECT id, now() - interval '1 hour', now() - interval '1 minute' FROM webhooks`)
	require.NoError(t, err)
	_, err = pool.Exec(context.Background(), `INSERT INTO events (id, tenant_id, event_type, idempotency_key, request_hash, priority, data, created_at)
SELECT uuidv7(), t.id, 'order.created', 'missed-' || g, '\x00', 'normal', json_build_object('n', g), now() - interval '30 minutes'
FROM generate_series(1, $1) g, tenants t`, n)
	require.NoError(t, err)
	startWorker(t, dbURL, topo)

	cfgFile := filepath.Join(t.TempDir(), "dlq.yaml")
	require.NoError(t, os.WriteFile(cfgFile, []byte(smallPools+"dlq:\n  batch_claim_timeout: 2s\n"), 0o600))
	startDLQ := func() *proc {
		addr := freeAddr(t)
		p := start(t, "dlq", "DATABASE_URL="+dbURL, "METRICS_ADDR="+addr, "AMQP_PREFIX="+topo.Prefix, "HOOKLINE_CONFIG="+cfgFile)
		waitReady(t, p, "http://"+addr+"/readyz")
		return p
	}
	dlq1 := startDLQ()
	var hookID string
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT id::text FROM webhooks`).Scan(&hookID))
	from := time.Now().Add(-2 * time.Hour).UTC().Format(time.RFC3339)
	counts := postJSON(t, base+"/v1/webhooks/"+hookID+"/recover", key, fmt.Sprintf(`{"from": %q, "dry_run": true}`, from), http.StatusOK)
	require.Equal(t, float64(n), counts["total"])
	started := postJSON(t, base+"/v1/webhooks/"+hookID+"/recover", key,
		fmt.Sprintf(`{"from": %q, "include": ["missed"], "rate_limit": {"requests_per_second": 100}}`, from), http.StatusAccepted)
	id := started["batch_operation_id"].(string)
	waitFor(t, 30*time.Second, dlq1, func() bool {
		return count(`SELECT processed FROM batch_operations WHERE id = $1`, id) >= n/3
	}, "the recovery to get a third of the way")
	dlq1.kill(t)
	atKill := count(`SELECT processed FROM batch_operations WHERE id = $1`, id)
	require.Less(t, atKill, n, "killed before the end")

	dlq2 := startDLQ()
	waitFor(t, 60*time.Second, dlq2, func() bool {
		return count(`SELECT count(*) FROM batch_operations WHERE id = $1 AND state = 'completed'`, id) == 1
	}, "the recovery to complete after the restart")
	require.Equal(t, n, count(`SELECT total FROM batch_operations WHERE id = $1`, id))
	require.Equal(t, n, count(`SELECT processed FROM batch_operations WHERE id = $1`, id))
	require.Equal(t, n, count(`SELECT succeeded FROM batch_operations WHERE id = $1`, id))
	require.Equal(t, n, count(`SELECT count(*) FROM deliveries`), "one delivery per missed event")
	require.Equal(t, n, count(`SELECT count(DISTINCT event_id) FROM deliveries`))

	mu.Lock()
	defer mu.Unlock()
	require.Len(t, seen, n, "every missed event reached the receiver")
	dups := 0
	for _, c := range seen {
		dups += c - 1
	}
	t.Logf("killed at %d of %d; duplicate requests at the receiver: %d", atKill, n, dups)
	// Only the chunk whose messages were published but not yet marked
	// enqueued when the process died can be published twice (by the relay).
	require.LessOrEqual(t, dups, 10, "at most one chunk (rate/10) delivered twice")
}
