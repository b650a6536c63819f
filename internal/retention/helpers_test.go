package retention

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/config"
	"github.com/hookline/hookline/internal/db/dbtest"
)

// v7Filled returns the UUIDv7 of t whose random bits are all fill.
func v7Filled(t time.Time, fill byte) uuid.UUID {
	u := v7At(t)
	for i := 6; i < 16; i++ {
		u[i] = fill
	}
	u[6] = 0x70 | fill&0x0f
	u[8] = 0x80 | fill&0x3f
	return u
}

func TestIDBound(t *testing.T) {
	t.Parallel()
	base := time.Date(2025, 3, 14, 15, 9, 26, 535_100_000, time.UTC)
	bound := idBound(base)
	require.Equal(t, uuid.Version(7), bound.Version())
	require.Equal(t, "01959533-fa87-7000-0000-000000000000", bound.String())

	cases := []struct {
		name  string
		id    uuid.UUID
		below bool
	}{
		{"a year earlier", v7At(base.AddDate(-1, 0, 0)), true},
		{"a millisecond earlier, highest random bits", v7Filled(base.Add(-time.Millisecond), 0xff), true},
		{"same millisecond, lowest random bits", v7Filled(base, 0x00), false},
		{"same millisecond, highest random bits", v7Filled(base, 0xff), false},
		{"same millisecond, later microsecond", v7At(base.Add(800 * time.Microsecond)), false},
		{"a millisecond later, lowest random bits", v7Filled(base.Add(time.Millisecond), 0x00), false},
		{"a year later", v7At(base.AddDate(1, 0, 0)), false},
	}
	for _, c := range cases {
		require.Equal(t, c.below, bytes.Compare(c.id[:], bound[:]) < 0, c.name)
	}

	require.Equal(t, bound, idBound(base.Truncate(time.Millisecond)), "the bound of a millisecond does not depend on the time within it")
	prev := idBound(base)
	for _, d := range []time.Duration{time.Millisecond, time.Second, time.Hour, 90 * 24 * time.Hour} {
		next := idBound(base.Add(d))
		require.Negative(t, bytes.Compare(prev[:], next[:]), "bounds grow with time (+%s)", d)
		prev = next
	}
	require.Equal(t, uuid.Nil, idBound(time.Unix(-3600, 0)), "before 1970")
	require.Equal(t, uuid.MustParse("00000000-0000-7000-0000-000000000000"), idBound(time.Unix(0, 0)))
}

// Postgres orders uuids as idBound assumes, and the schema's uuidv7()
// falls between the bounds of the moments around it.
func TestIDBoundInPostgres(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	now := time.Now()
	var afterLow, beforeHigh bool
	require.NoError(t, pool.QueryRow(ctx, `SELECT $1::uuid <= id, id < $2::uuid FROM (SELECT uuidv7() AS id) x`,
		idBound(now.Add(-time.Minute)), idBound(now.Add(time.Minute))).Scan(&afterLow, &beforeHigh))
	require.True(t, afterLow)
	require.True(t, beforeHigh)

	bound := idBound(now)
	for _, id := range []uuid.UUID{
		v7Filled(now.Add(-time.Millisecond), 0xff), v7Filled(now, 0x00), v7At(now), uuid.Must(uuid.NewV7()),
		v7At(now.AddDate(0, 0, -90)), v7At(now.AddDate(0, 0, 90)),
	} {
		var below bool
		require.NoError(t, pool.QueryRow(ctx, `SELECT $1::uuid < $2::uuid`, id, bound).Scan(&below))
		require.Equal(t, bytes.Compare(id[:], bound[:]) < 0, below, "%s against %s", id, bound)
	}
}

func TestLockError(t *testing.T) {
	t.Parallel()
	cases := []struct {
		err  error
		busy bool
	}{
		{&pgconn.PgError{Code: "55P03", Message: "canceling statement due to lock timeout"}, true},
		{fmt.Errorf("lock: %w", &pgconn.PgError{Code: "40P01"}), true},
		{&pgconn.PgError{Code: "23505"}, false},
		{&pgconn.PgError{Code: "57014"}, false}, // statement cancelled, not a lock wait
		{errors.New("connection reset"), false},
		{context.Canceled, false},
	}
	for _, c := range cases {
		err := lockError(c.err)
		require.Equal(t, c.busy, errors.Is(err, errBusy), "%v", c.err)
		require.ErrorIs(t, err, c.err, "the cause stays inspectable")
	}
}

func TestCutoffsAt(t *testing.T) {
	t.Parallel()
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	c := cutoffsAt(now, config.Default().Retention)
	require.Equal(t, time.Date(2025, 3, 3, 12, 0, 0, 0, time.UTC), c.attempts, "90 days")
	require.Equal(t, time.Date(2025, 5, 25, 12, 0, 0, 0, time.UTC), c.payloads, "7 days")

	c = cutoffsAt(now, config.Retention{AttemptsAge: config.Duration(48 * time.Hour), PayloadAge: config.Duration(time.Hour)})
	require.Equal(t, now.Add(-48*time.Hour), c.attempts)
	require.Equal(t, now.Add(-time.Hour), c.payloads)
}
