package db_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/breaker"
	"github.com/hookline/hookline/internal/db"
)

// A database with deliveries parked behind a circuit migrates with the
// index of them keyed by webhook and id, holding the unfinished ones, from
// which the circuit's hold reads; migrating back restores the index keyed
// by webhook alone.
func TestCircuitFloorMigrationIndexesEveryParkedDelivery(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, exec := atVersion(t, 19)
	tenant, hook := tenantWithWebhook(exec)
	// Deliveries of n hours ago parked behind the circuit: the three
	// oldest still unfinished, the rest finished since.
	exec(`INSERT INTO deliveries (id, tenant_id, event_id, webhook_id, priority, status, parked_at, park_reason, next_attempt_at)
SELECT uuidv7_floor(now() - n * interval '1 hour'), $1, gen_random_uuid(), $2, 'normal',
    CASE WHEN n > 117 THEN 'retrying' ELSE 'succeeded' END, now(), 'circuit_open', now() + interval '1 minute'
FROM generate_series(1, 120) n`, tenant, hook)

	_, err := db.Migrate(ctx, pool)
	require.NoError(t, err)
	var def string
	require.NoError(t, pool.QueryRow(ctx, `SELECT pg_get_indexdef('deliveries_circuit_parked_idx'::regclass)`).Scan(&def))
	require.Contains(t, def, "(webhook_id, id)")

	until := time.Now().Add(time.Hour).UTC().Truncate(time.Microsecond)
	require.NoError(t, breaker.HoldParked(ctx, pool, hook, &until))
	var held int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM deliveries WHERE next_attempt_at = $1`, until).Scan(&held))
	require.Equal(t, 3, held, "the unfinished deliveries parked behind the circuit")

	require.NoError(t, db.MigrateTo(ctx, pool, 19))
	require.NoError(t, pool.QueryRow(ctx, `SELECT pg_get_indexdef('deliveries_circuit_parked_idx'::regclass)`).Scan(&def))
	require.Contains(t, def, "(webhook_id) WHERE")
}
