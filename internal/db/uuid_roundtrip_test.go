package db_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/db/dbtest"
)

// Every way the code passes and reads ids round-trips through a pool Open
// returns: one id, a uuid[] of them, NULL into a pointer, and an id read
// as text.
func TestUUIDsRoundTrip(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := context.Background()
	ids := []uuid.UUID{uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewRandom()), uuid.Nil}

	var one uuid.UUID
	require.NoError(t, pool.QueryRow(ctx, `SELECT $1::uuid`, ids[0]).Scan(&one))
	require.Equal(t, ids[0], one)
	var text string
	require.NoError(t, pool.QueryRow(ctx, `SELECT $1::uuid::text`, ids[1]).Scan(&text))
	require.Equal(t, ids[1].String(), text)

	var back []uuid.UUID
	require.NoError(t, pool.QueryRow(ctx, `SELECT $1::uuid[]`, ids).Scan(&back))
	require.Equal(t, ids, back)
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM unnest($1::uuid[]) u WHERE u = $2`, ids, ids[1]).Scan(&n))
	require.Equal(t, 1, n)

	var none *uuid.UUID
	require.NoError(t, pool.QueryRow(ctx, `SELECT NULL::uuid`).Scan(&none))
	require.Nil(t, none)
	some := &uuid.UUID{}
	require.NoError(t, pool.QueryRow(ctx, `SELECT $1::uuid`, ids[1]).Scan(&some))
	require.Equal(t, ids[1], *some)
	var nullable []*uuid.UUID
	require.NoError(t, pool.QueryRow(ctx, `SELECT ARRAY[$1::uuid, NULL]`, ids[0]).Scan(&nullable))
	require.Len(t, nullable, 2)
	require.Equal(t, ids[0], *nullable[0])
	require.Nil(t, nullable[1])
	var wrong uuid.UUID
	require.Error(t, pool.QueryRow(ctx, `SELECT NULL::uuid`).Scan(&wrong), "NULL into a plain id is an error, as before")
}
