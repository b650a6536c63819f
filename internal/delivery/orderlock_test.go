package delivery

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/db/dbtest"
)

// The check and the release rely on the batch's implicit transaction: the
// key's lock, taken by the batch's first statement, is held while its
// second runs, and released when the batch ends.
func TestTheKeysLockIsHeldThroughTheStatementAfterIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	const heldSQL = `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted`
	var held int
	found, err := underKeyLock(ctx, pool, "lock-key", heldSQL, nil, &held)
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, 1, held, "the key's lock, during the statement")
	var left int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'
    AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&left))
	require.Zero(t, left, "released with the batch")
}
