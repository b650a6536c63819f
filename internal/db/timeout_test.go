package db_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/db"
	"github.com/hookline/hookline/internal/db/dbtest"
)

// A pool opened on a URL given a statement timeout cancels a statement
// that runs longer, on every connection, and the database answers again
// at once.
func TestStatementTimeoutCancelsLongStatements(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, err := db.WithStatementTimeout(dbtest.NewURL(t, true), 200*time.Millisecond)
	require.NoError(t, err)
	pool, err := db.Open(ctx, url, 3)
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	for range 3 { // each of the pool's connections
		var setting string
		require.NoError(t, pool.QueryRow(ctx, `SHOW statement_timeout`).Scan(&setting))
		require.Equal(t, "200ms", setting)
	}
	start := time.Now()
	_, err = pool.Exec(ctx, `SELECT pg_sleep(30)`)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "57014", pgErr.Code, "query_canceled")
	require.Less(t, time.Since(start), 10*time.Second)
	require.NoError(t, pool.Ping(ctx))
}

// The URL keeps what it said, in both connection string forms.
func TestWithStatementTimeoutForms(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"postgres://u@h:5432/d?sslmode=disable":                     "postgres://u@h:5432/d?sslmode=disable&statement_timeout=1500",
		"postgresql://u@h/d?statement_timeout=9&application_name=x": "postgresql://u@h/d?application_name=x&statement_timeout=1500",
		"host=h user=u dbname=d":                                    "host=h user=u dbname=d statement_timeout=1500",
	} {
		got, err := db.WithStatementTimeout(in, 1500*time.Millisecond)
		require.NoError(t, err)
		require.Equal(t, want, got)
	}
	_, err := db.WithStatementTimeout("postgres://u@h/d", 0)
	require.Error(t, err)
}

// Migrations may take longer than the api's statement timeout (an index
// on a large table) and wait for another process's migration: they run
// without it, on connections of their own.
func TestMigrateIgnoresThePoolStatementTimeout(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, err := db.WithStatementTimeout(dbtest.NewURL(t, false), time.Millisecond)
	require.NoError(t, err)
	pool, err := db.Open(ctx, url, 2)
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	v, err := db.Migrate(ctx, pool)
	require.NoError(t, err)
	require.Positive(t, v)
	// SHOW itself runs under the 1 ms bound, which a busy machine can
	// exceed: a cancelled SHOW is asked again.
	var setting string
	for try := 0; ; try++ {
		err = pool.QueryRow(ctx, `SHOW statement_timeout`).Scan(&setting)
		var pgErr *pgconn.PgError
		if err == nil || try == 100 || !errors.As(err, &pgErr) || pgErr.Code != pgerrcode.QueryCanceled {
			break
		}
	}
	require.NoError(t, err)
	require.Equal(t, "1ms", setting, "the pool keeps its own bound")
}
