package db_test

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/db"
	"github.com/hookline/hookline/internal/db/dbtest"
	"github.com/hookline/hookline/internal/testlog"
)

// A hot pool opens its ready connections before anything asks for one,
// and prepares every connection it opens, those opened under load too.
func TestHotPoolOpensAndPreparesItsReadyConnectionsUnasked(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	const lookup = `SELECT id FROM deliveries WHERE id = ANY($1)`
	var prepared atomic.Int32
	hot, err := db.OpenHot(pool, db.HotPool{MaxConns: 4, Ready: 3, Prepare: func(ctx context.Context, c *pgx.Conn) error {
		prepared.Add(1)
		_, err := c.Exec(ctx, lookup, []uuid.UUID{})
		return err
	}}, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	t.Cleanup(hot.Close)

	require.Eventually(t, func() bool { return hot.Stat().IdleConns() == 3 }, 10*time.Second, 10*time.Millisecond)
	require.EqualValues(t, 3, prepared.Load(), "each ready connection prepared")

	// Four at once: one more connection, prepared before its first use.
	conns := make([]*pgxpool.Conn, 4)
	for i := range conns {
		conns[i], err = hot.Acquire(ctx)
		require.NoError(t, err)
	}
	require.EqualValues(t, 4, prepared.Load())
	for _, c := range conns {
		require.True(t, dbtest.Prepared(t, c, lookup))
		c.Release()
	}
}

// A connection whose preparation failed is used all the same, and the
// failure is logged; one that the failure closed is not handed out.
func TestHotPoolUsesAConnectionItCouldNotPrepare(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	var logs testlog.Buffer
	hot, err := db.OpenHot(pool, db.HotPool{MaxConns: 1, Prepare: func(ctx context.Context, c *pgx.Conn) error {
		_, err := c.Exec(ctx, `SELECT * FROM no_such_table`)
		return err
	}}, slog.New(slog.NewTextHandler(&logs, nil)))
	require.NoError(t, err)
	t.Cleanup(hot.Close)
	var one int
	require.NoError(t, hot.QueryRow(ctx, `SELECT 1`).Scan(&one))
	require.Equal(t, 1, one)
	require.Contains(t, logs.String(), "hot-path statements not prepared")
	require.Contains(t, logs.String(), "no_such_table")

	closing, err := db.OpenHot(pool, db.HotPool{MaxConns: 1, Prepare: func(ctx context.Context, c *pgx.Conn) error {
		_ = c.Close(ctx)
		return errors.New("connection lost")
	}}, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	t.Cleanup(closing.Close)
	err = closing.QueryRow(ctx, `SELECT 1`).Scan(&one)
	require.ErrorContains(t, err, "connection lost")
}
