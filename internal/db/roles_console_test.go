package db_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/db/dbtest"
)

// Console sign-outs (migration 000003): the api records them through
// end_console_session, which also forgets expired ones, and reads them; it
// deletes nothing directly. The other roles have nothing to do with them.
func TestConsoleSignOutGrants(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	f := newRoleFixture(t, pool)
	end := `SELECT end_console_session('\x0102', '{tenant}', now() + interval '1 hour')`
	checkRole(t, pool, "hookline_api", f, []roleCase{
		{end, true},
		{`SELECT EXISTS (SELECT 1 FROM console_sessions_ended WHERE session_hash = '\x0102')`, true},
		{`DELETE FROM console_sessions_ended`, false},
		{`UPDATE console_sessions_ended SET expires_at = now()`, false},
		{`INSERT INTO console_sessions_ended (session_hash, tenant_id, expires_at) VALUES ('\x03', '{tenant}', now())`, false},
	})
	for _, role := range []string{"hookline_worker", "hookline_dlq"} {
		checkRole(t, pool, role, f, []roleCase{
			{end, false},
			{`SELECT * FROM console_sessions_ended`, false},
		})
	}
}

// A sign-out forgets those of sessions that have expired: the table holds
// only sessions that would still be accepted.
func TestEndConsoleSessionForgetsExpiredOnes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	f := newRoleFixture(t, pool)
	for _, stmt := range []string{
		`SELECT end_console_session('\x01', $1, now() - interval '1 second')`,
		`SELECT end_console_session('\x02', $1, now() + interval '1 hour')`,
		`SELECT end_console_session('\x02', $1, now() + interval '1 hour')`, // twice: once recorded
	} {
		_, err := pool.Exec(ctx, stmt, f.tenant)
		require.NoError(t, err)
	}
	var hashes []byte
	require.NoError(t, pool.QueryRow(ctx, `SELECT string_agg(session_hash, '' ORDER BY session_hash) FROM console_sessions_ended`).Scan(&hashes))
	require.Equal(t, []byte{2}, hashes)
}
