package db_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/db/dbtest"
)

// uuidv7_floor gives the least UUIDv7 of a millisecond: its 48 bits, then
// version 7 and zeros. Postgres inlines it (its body is immutable), so a
// statement runs no SQL function for each row it bounds.
func TestUUIDv7FloorIsTheMillisecondsLeastIDAndInlined(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := context.Background()
	for _, at := range []time.Time{time.UnixMilli(0).Add(500 * time.Microsecond), time.UnixMilli(1),
		time.Date(2026, 11, 29, 12, 34, 56, 789999000, time.UTC), time.Date(2026, 3, 29, 1, 30, 0, 0, time.FixedZone("CET", 3600))} {
		var id uuid.UUID
		require.NoError(t, pool.QueryRow(ctx, `SELECT uuidv7_floor($1)`, at).Scan(&id))
		var want uuid.UUID
		ms := at.UnixMilli()
		for i := 5; i >= 0; i-- {
			want[i] = byte(ms)
			ms >>= 8
		}
		want[6] = 0x70
		require.Equal(t, want, id, at)
	}
	rows, err := pool.Query(ctx, `EXPLAIN (VERBOSE, FORMAT TEXT) SELECT uuidv7_floor(now() - interval '1 day')`)
	require.NoError(t, err)
	var lines []string
	for rows.Next() {
		var line string
		require.NoError(t, rows.Scan(&line))
		lines = append(lines, line)
	}
	require.NoError(t, rows.Err())
	require.NotContains(t, strings.Join(lines, "\n"), "uuidv7_floor(", "inlined")
}
