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
	var none time.Time
	newBound := func() *duescan.Bound {
		b := duescan.Defaults()
		return &b
	}

	t.Run("the first pass reads from the oldest entry and settles", func(t *testing.T) {
		t.Parallel()
		p := newBound().Start(t0)
		require.True(t, p.Full())
		require.True(t, p.Settles)
	})

	t.Run("after a complete pass, the next begins a margin before its due bound", func(t *testing.T) {
		t.Parallel()
		b := newBound()
		b.Done(b.Start(t0), db.Add(-5*time.Second), 3, 10, none)
		p := b.Start(t0.Add(time.Second))
		require.False(t, p.Full())
		require.False(t, p.Settles)
		require.Equal(t, db.Add(-15*time.Second), p.Since)

		b.Done(p, db.Add(-4*time.Second), 0, 10, none)
		require.Equal(t, db.Add(-14*time.Second), b.Start(t0.Add(2*time.Second)).Since)
	})

	t.Run("a pass that found its limit leaves the bounds where they were", func(t *testing.T) {
		t.Parallel()
		b := newBound()
		b.Done(b.Start(t0), db, 10, 10, none)
		require.True(t, b.Start(t0.Add(time.Second)).Full(), "the pass from the oldest entry is not complete")

		b.Done(b.Start(t0.Add(time.Second)), db.Add(time.Second), 2, 10, none)
		p := b.Start(t0.Add(2 * time.Second))
		b.Done(p, db.Add(30*time.Second), 10, 10, none)
		require.Equal(t, p.Since, b.Start(t0.Add(3*time.Second)).Since)

		floor := b.Start(t0.Add(time.Minute + time.Second))
		require.True(t, floor.Settles)
		b.Done(floor, db.Add(time.Hour), 10, 10, none)
		again := b.Start(t0.Add(time.Minute + 2*time.Second))
		require.True(t, again.Settles, "the pass from the floor is not complete")
		require.Equal(t, floor.Since, again.Since)
	})

	t.Run("a pass from the floor comes every FloorEvery, one from the oldest entry every FullEvery", func(t *testing.T) {
		t.Parallel()
		b := newBound()
		b.Done(b.Start(t0), db, 0, 10, none)
		for _, after := range []time.Duration{time.Second, 30 * time.Second, time.Minute - time.Nanosecond} {
			p := b.Start(t0.Add(after))
			require.False(t, p.Settles, after)
			b.Done(p, db.Add(after), 0, 10, none)
		}
		for minute := 1; minute < 60; minute++ {
			at := t0.Add(time.Duration(minute) * time.Minute)
			p := b.Start(at)
			require.True(t, p.Settles, minute)
			require.False(t, p.Full(), minute)
			require.True(t, b.Start(at.Add(time.Second)).Settles, "until it completes")
			b.Done(p, db.Add(time.Duration(minute)*time.Minute), 0, 10, none)
			require.False(t, b.Start(at.Add(time.Second)).Settles, minute)
		}
		full := b.Start(t0.Add(time.Hour))
		require.True(t, full.Full())
		require.True(t, b.Start(t0.Add(time.Hour+time.Second)).Full(), "until it completes")
		b.Done(full, db.Add(time.Hour), 0, 10, none)
		next := b.Start(t0.Add(time.Hour + time.Second))
		require.False(t, next.Settles, "a pass from the oldest entry is one from the floor too")
		require.True(t, b.Start(t0.Add(time.Hour+time.Minute)).Settles)
		require.True(t, b.Start(t0.Add(2*time.Hour)).Full())
	})

	t.Run("the floor is FloorLag before the due bound, or the oldest left when older", func(t *testing.T) {
		t.Parallel()
		b := newBound()
		b.Done(b.Start(t0), db, 0, 10, none)
		require.Equal(t, db.Add(-5*time.Minute), b.Start(t0.Add(time.Minute)).Since, "nothing left")

		b = newBound()
		b.Done(b.Start(t0), db, 0, 10, db.Add(time.Hour))
		require.Equal(t, db.Add(-5*time.Minute), b.Start(t0.Add(time.Minute)).Since, "only rows due later")

		b = newBound()
		locked := db.Add(-3 * time.Hour)
		b.Done(b.Start(t0), db, 4, 10, locked)
		p := b.Start(t0.Add(time.Minute))
		require.Equal(t, locked, p.Since, "a row another transaction held")
		b.Done(p, db.Add(time.Minute), 0, 10, locked)
		require.Equal(t, locked, b.Start(t0.Add(2*time.Minute)).Since, "still there")
		p = b.Start(t0.Add(2 * time.Minute))
		b.Done(p, db.Add(2*time.Minute), 1, 10, none)
		require.Equal(t, db.Add(-3*time.Minute), b.Start(t0.Add(3*time.Minute)).Since, "gone")
	})

	t.Run("a pass from the oldest entry may move the floor back, one from the floor never does", func(t *testing.T) {
		t.Parallel()
		b := newBound()
		b.Done(b.Start(t0), db, 0, 10, none)
		p := b.Start(t0.Add(time.Minute))
		b.Done(p, db.Add(-time.Hour), 0, 10, none)
		require.Equal(t, p.Since, b.Start(t0.Add(2*time.Minute)).Since, "a due bound from a clock gone back")

		lateJoiner := db.Add(-2 * time.Hour)
		full := b.Start(t0.Add(time.Hour))
		require.True(t, full.Full())
		b.Done(full, db.Add(time.Hour), 0, 10, lateJoiner)
		require.Equal(t, lateJoiner, b.Start(t0.Add(time.Hour+time.Minute)).Since)
	})

	t.Run("the bound never goes back", func(t *testing.T) {
		t.Parallel()
		b := newBound()
		b.Done(b.Start(t0), db, 0, 10, none)
		b.Done(b.Start(t0.Add(time.Second)), db.Add(-time.Hour), 0, 10, none)
		require.Equal(t, db.Add(-10*time.Second), b.Start(t0.Add(2*time.Second)).Since)
	})
}
