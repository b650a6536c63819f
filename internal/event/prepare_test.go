package event

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/db/dbtest"
)

// The committer's pool prepares each new connection with both forms of
// the publish statement; a mistake in either would only be logged, so each
// must run as prepared, on the schema as migrated, and insert nothing.
func TestPrepareRunsThePublishStatement(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	c := newCommitter(pool, slog.New(slog.DiscardHandler))
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	require.NoError(t, c.prepare(ctx, conn.Conn()))
	require.True(t, dbtest.Prepared(t, conn, publishSQL))
	require.True(t, dbtest.Prepared(t, conn, publishOwnKeysSQL))
	var n int
	require.NoError(t, conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM events) + (SELECT count(*) FROM deliveries)`).Scan(&n))
	require.Zero(t, n)
}

// Only a batch whose every event has its own generated key skips the
// idempotency keys' statement parts: one given key, or one that claims
// another event's generated key, needs them for the whole batch.
func TestPublishStatementForTheBatchsKeys(t *testing.T) {
	t.Parallel()
	own := func() *pending {
		return newPending(uuid.New(), Request{EventType: "t"}, nil, time.Now())
	}
	given := func(key string) *pending {
		return newPending(uuid.New(), Request{EventType: "t", IdempotencyKey: key}, nil, time.Now())
	}
	claiming := given(generatedKey(uuid.Must(uuid.NewV7())))
	require.NotEqual(t, claiming.id, claiming.claim)
	for _, c := range []struct {
		name  string
		batch []*pending
		want  string
	}{
		{"none", nil, publishOwnKeysSQL},
		{"own keys", []*pending{own(), own()}, publishOwnKeysSQL},
		{"a given key", []*pending{given("order-1")}, publishSQL},
		{"a given key among own", []*pending{own(), given("order-1"), own()}, publishSQL},
		{"a claimed generated key", []*pending{own(), claiming}, publishSQL},
	} {
		require.Equal(t, c.want == publishSQL, publishStatementFor(c.batch) == publishSQL, c.name)
	}
	require.NotEqual(t, publishSQL, publishOwnKeysSQL)
	require.NotContains(t, publishOwnKeysSQL, "event_keys")
}
