package db_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/db/dbtest"
)

// Every SECURITY DEFINER function of the schema runs with its search_path
// pinned to the schema (and pg_temp last), so that a caller's search_path
// cannot choose what its unqualified names, or current_schema(), mean.
// CREATE OR REPLACE resets a function's settings: a migration that
// replaces one must pin it again (migration 34 did not for
// drop_detached_deliveries; migration 37 does).
func TestDefinerFunctionsPinTheirSearchPath(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	rows, err := pool.Query(context.Background(), `SELECT p.proname, coalesce(array_to_string(p.proconfig, ';'), '')
		FROM pg_proc p WHERE p.prosecdef AND p.pronamespace = current_schema()::regnamespace ORDER BY 1`)
	require.NoError(t, err)
	type fn struct{ name, config string }
	fns, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (fn, error) {
		var f fn
		return f, r.Scan(&f.name, &f.config)
	})
	require.NoError(t, err)
	require.NotEmpty(t, fns)
	var schema string
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT current_schema()`).Scan(&schema))
	for _, f := range fns {
		require.Equal(t, "search_path="+schema+", pg_temp", f.config, "%s", f.name)
	}
}
