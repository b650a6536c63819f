package process_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A dlq process killed with SIGKILL halfway through a webhook's recovery of
// the events it missed while disabled: a restarted one takes the recovery
// over once the claim times out and finishes it from its checkpoint, giving
// every missed event exactly one delivery.
func TestRecoveryResumesAfterDLQSIGKILL(t *testing.T) {
	t.Parallel()
	f := newBatchKillFixture(t)
	dbURL, topo, base, key, pool, count := f.dbURL, f.topo, f.base, f.key, f.pool, f.count(t)
	var err error
	// The webhook, made two hours ago, was disabled from an hour ago until
	// a minute ago; the events published meanwhile made no delivery to it.
	const n = 600
	_, err = pool.Exec(context.Background(), `UPDATE webhooks SET created_at = now() - interval '2 hours'`)
	require.NoError(t, err)
	_, err = pool.Exec(context.Background(), `INSERT INTO webhook_pauses (webhook_id, paused_at, resumed_at)
SELECT id, now() - interval '1 hour', now() - interval '1 minute' FROM webhooks`)
	require.NoError(t, err)
	_, err = pool.Exec(context.Background(), `INSERT INTO events (id, tenant_id, event_type, idempotency_key, request_hash, priority, data, created_at)
SELECT uuidv7(), t.id, 'order.created', 'missed-' || g, '\x00', 'normal', json_build_object('n', g), now() - interval '30 minutes'
FROM generate_series(1, $1) g, tenants t`, n)
	require.NoError(t, err)
	startWorker(t, dbURL, topo)

	var hookID string
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT id::text FROM webhooks`).Scan(&hookID))
	from := time.Now().Add(-2 * time.Hour).UTC().Format(time.RFC3339)
	id, atKill := f.runKilledMidway(t, n, "the recovery", func() string {
		counts := postJSON(t, base+"/v1/webhooks/"+hookID+"/recover", key, fmt.Sprintf(`{"from": %q, "dry_run": true}`, from), http.StatusOK)
		require.Equal(t, float64(n), counts["total"])
		started := postJSON(t, base+"/v1/webhooks/"+hookID+"/recover", key,
			fmt.Sprintf(`{"from": %q, "include": ["missed"], "rate_limit": {"requests_per_second": 100}}`, from), http.StatusAccepted)
		return started["batch_operation_id"].(string)
	})
	require.Equal(t, n, count(`SELECT total FROM batch_operations WHERE id = $1`, id))
	require.Equal(t, n, count(`SELECT processed FROM batch_operations WHERE id = $1`, id))
	require.Equal(t, n, count(`SELECT succeeded FROM batch_operations WHERE id = $1`, id))
	require.Equal(t, n, count(`SELECT count(*) FROM deliveries`), "one delivery per missed event")
	require.Equal(t, n, count(`SELECT count(DISTINCT event_id) FROM deliveries`))

	f.requireReceivedOnce(t, n, atKill, "every missed event reached the receiver")
}
