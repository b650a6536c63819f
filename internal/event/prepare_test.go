package event

import (
	"context"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/db/dbtest"
)

// The committer's pool prepares each new connection with the publish
// statement; a mistake in it would only be logged, so it must run as
// prepared, on the schema as migrated, and insert nothing.
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
	var n int
	require.NoError(t, conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM events) + (SELECT count(*) FROM deliveries)`).Scan(&n))
	require.Zero(t, n)
}
