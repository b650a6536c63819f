package delivery

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/db/dbtest"
)

// The hot pool prepares each new connection with the statements of every
// delivery; a mistake in one would only be logged, so each must run as
// prepared, on the schema as migrated, and write nothing.
func TestPrepareRunsEveryStatementOfADelivery(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	st := &store{pool: pool, hot: pool}
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	require.NoError(t, st.prepare(ctx, conn.Conn()))
	for _, sql := range []string{loadJobsSQL, recordSQL} {
		require.True(t, dbtest.Prepared(t, conn, sql), "prepared: %.40s", sql)
	}
	var rows int
	require.NoError(t, conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM deliveries) + (SELECT count(*) FROM delivery_attempts)`).Scan(&rows))
	require.Zero(t, rows)
}
