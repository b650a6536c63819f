package db_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/db"
)

// A database migrates with its events that have deliveries made after
// them (a dead letter's retry, a batch's or a recovery's delivery) marked,
// and the others not; from then on, inserting such a delivery marks its
// event, any other delivery does not, and neither does retention moving
// rows between partitions.
func TestLateDeliveriesMigrationMarksTheirEvents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, exec := atVersion(t, 34)
	tenant, hook := tenantWithWebhook(exec)
	batch := uuid.Must(uuid.NewV7())
	exec(`INSERT INTO batch_operations (id, tenant_id, filter, requests_per_second, priority) VALUES ($1, $2, '{}', 1, 'normal')`, batch, tenant)
	event := func(key string) uuid.UUID {
		t.Helper()
		id := uuid.Must(uuid.NewV7())
		exec(`INSERT INTO events (id, tenant_id, event_type, idempotency_key, request_hash, priority, data)
			VALUES ($1, $2, 'a', $3, '\x00', 'normal', '{}')`, id, tenant, key)
		return id
	}
	delivery := func(ev uuid.UUID, retryOf *uuid.UUID, batchID *uuid.UUID) uuid.UUID {
		t.Helper()
		var id uuid.UUID
		require.NoError(t, pool.QueryRow(ctx, `INSERT INTO deliveries (id, tenant_id, event_id, webhook_id, priority, status, retry_of, batch_operation_id)
			VALUES (uuidv7(), $1, $2, $3, 'normal', 'exhausted', $4, $5) RETURNING id`, tenant, ev, hook, retryOf, batchID).Scan(&id))
		return id
	}
	marked := func(ev uuid.UUID) bool {
		t.Helper()
		var ok bool
		require.NoError(t, pool.QueryRow(ctx, `SELECT late_deliveries_until IS NOT NULL FROM events WHERE id = $1`, ev).Scan(&ok))
		return ok
	}

	plain, retried, batched := event("plain"), event("retried"), event("batched")
	delivery(plain, nil, nil)
	first := delivery(retried, nil, nil)
	delivery(retried, &first, nil)
	delivery(batched, nil, &batch)

	v, err := db.Migrate(ctx, pool)
	require.NoError(t, err)
	require.GreaterOrEqual(t, v, uint(35))
	require.False(t, marked(plain))
	require.True(t, marked(retried))
	require.True(t, marked(batched))

	later, recovered, moved := event("later"), event("recovered"), event("moved")
	original := delivery(later, nil, nil)
	require.False(t, marked(later), "a delivery made with its event")
	delivery(later, &original, nil)
	require.True(t, marked(later), "a retry")
	delivery(recovered, nil, &batch)
	require.True(t, marked(recovered), "a recovery's or a batch's delivery")

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck // committed below
	_, err = tx.Exec(ctx, `SELECT set_config('hookline.rollups', 'process', true)`)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `INSERT INTO deliveries (id, tenant_id, event_id, webhook_id, priority, status, retry_of)
		VALUES (uuidv7(), $1, $2, $3, 'normal', 'succeeded', $4)`, tenant, moved, hook, original)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	require.False(t, marked(moved), "rows retention moves")

	// Marked once in 12 hours: a second retry leaves the mark as it is.
	var before, after string
	require.NoError(t, pool.QueryRow(ctx, `SELECT xmin::text FROM events WHERE id = $1`, later).Scan(&before))
	delivery(later, &original, nil)
	require.NoError(t, pool.QueryRow(ctx, `SELECT xmin::text FROM events WHERE id = $1`, later).Scan(&after))
	require.Equal(t, before, after)
}
