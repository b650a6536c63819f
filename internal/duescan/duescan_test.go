package duescan_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/duescan"
)

func TestBound(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	db := t0.Add(3 * time.Second) // the database's clock runs ahead
	newBound := func() *duescan.Bound { return &duescan.Bound{Margin: 10 * time.Second, FullEvery: time.Minute} }

	t.Run("the first pass reads from the oldest entry", func(t *testing.T) {
		t.Parallel()
		p := newBound().Start(t0)
		require.True(t, p.Full())
		require.True(t, p.Since.IsZero())
	})

	t.Run("after a complete pass, the next begins a margin before its due bound", func(t *testing.T) {
		t.Parallel()
		b := newBound()
		b.Done(b.Start(t0), db.Add(-5*time.Second), 3, 10)
		p := b.Start(t0.Add(time.Second))
		require.False(t, p.Full())
		require.Equal(t, db.Add(-15*time.Second), p.Since)

		b.Done(p, db.Add(-4*time.Second), 0, 10)
		require.Equal(t, db.Add(-14*time.Second), b.Start(t0.Add(2*time.Second)).Since)
	})

	t.Run("a pass that found its limit leaves the bound where it was", func(t *testing.T) {
		t.Parallel()
		b := newBound()
		b.Done(b.Start(t0), db, 10, 10)
		require.True(t, b.Start(t0.Add(time.Second)).Full(), "the pass from the oldest entry is not complete")

		b.Done(b.Start(t0.Add(time.Second)), db.Add(time.Second), 2, 10)
		p := b.Start(t0.Add(2 * time.Second))
		b.Done(p, db.Add(30*time.Second), 10, 10)
		require.Equal(t, p.Since, b.Start(t0.Add(3*time.Second)).Since)
	})

	t.Run("a pass from the oldest entry comes every FullEvery", func(t *testing.T) {
		t.Parallel()
		b := newBound()
		b.Done(b.Start(t0), db, 0, 10)
		for _, after := range []time.Duration{time.Second, 30 * time.Second, time.Minute - time.Nanosecond} {
			p := b.Start(t0.Add(after))
			require.False(t, p.Full(), after)
			b.Done(p, db.Add(after), 0, 10)
		}
		full := b.Start(t0.Add(time.Minute))
		require.True(t, full.Full())
		require.True(t, b.Start(t0.Add(time.Minute+time.Second)).Full(), "until it completes")
		b.Done(full, db.Add(time.Minute), 0, 10)
		require.False(t, b.Start(t0.Add(time.Minute+time.Second)).Full())
		require.True(t, b.Start(t0.Add(2*time.Minute)).Full())
	})

	t.Run("the bound never goes back", func(t *testing.T) {
		t.Parallel()
		b := newBound()
		b.Done(b.Start(t0), db, 0, 10)
		b.Done(b.Start(t0.Add(time.Second)), db.Add(-time.Hour), 0, 10)
		require.Equal(t, db.Add(-10*time.Second), b.Start(t0.Add(2*time.Second)).Since)
	})
}
