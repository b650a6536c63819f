// Package duescan bounds the periodic scans that find due rows by an index
// on their due time: the outbox relay's deliveries not confirmed enqueued,
// and the waker's parked deliveries.
//
// Such an index holds an entry for every row that was ever due, not only
// the rows due now: an entry outlives its row's leaving the scan's set
// until a vacuum removes it, and nothing ever inserts to the left of the
// newest entries, where Postgres would clean dead ones on the way. A scan
// from the oldest entry therefore walks every delivery that went through
// the set since the last vacuum: about 5,000 index pages for a million
// deliveries (docs/BENCHMARKS.md), at every pass, growing with the history.
//
// A Bound lets most passes begin a Margin before the due bound of the last
// pass that saw everything due: every row that joins the set later does so
// with a due time no earlier than a moment before it joins, well within
// Margin. Some rows join with an older due time: a row skipped while
// locked whose locker then rolled back, a row written by a transaction
// that began long before it committed (a due time of now() is the
// transaction's start), a due time from a process whose clock is behind
// the database's. Once every FloorEvery a pass reads from the floor: the
// older of FloorLag before the due bound of the last such pass and the
// oldest due time then in the set, of the rows every transaction could see
// (locked ones included). It finds the first kind whatever their age and
// the others up to FloorLag late; the pass that reads from the oldest
// entry, once every FullEvery, finds the rest. A pass from the floor reads
// the entries of the rows that joined within about FloorLag and
// FloorEvery, whatever the history.
package duescan

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// Bound is the lower bound of a periodic scan. Its methods may be called
// from several goroutines, though a scan normally has one.
type Bound struct {
	// Margin is how far before the last complete pass's due bound the
	// next pass begins.
	Margin time.Duration
	// FloorEvery is how often a pass reads from the floor.
	FloorEvery time.Duration
	// FloorLag is how far before its due bound a pass from the floor
	// (or from the oldest entry) sets the next floor, at most.
	FloorLag time.Duration
	// FullEvery is how often a pass reads from the oldest entry.
	FullEvery time.Duration

	mu sync.Mutex
	// since is the lower bound of the next pass; zero until a pass from
	// the oldest entry completed.
	since time.Time
	// floor is the lower bound of the next pass from the floor.
	floor time.Time
	// fullAt and floorAt are when the last complete passes from the
	// oldest entry and from the floor began, by the process's clock (a
	// pass from the oldest entry counts as both).
	fullAt, floorAt time.Time
}

// Defaults returns a Bound with the timings of the relay and the waker:
// passes from 10 s before the last one's due bound, from the floor (5
// minutes back) once a minute, and from the oldest entry once an hour.
func Defaults() Bound {
	return Bound{Margin: 10 * time.Second, FloorEvery: time.Minute, FloorLag: 5 * time.Minute, FullEvery: time.Hour}
}

// Pass is one pass of a scan, from Start until Done.
type Pass struct {
	// Since is the lower bound of the pass's due times; zero when the
	// pass reads from the oldest entry.
	Since time.Time
	// Settles is true for a pass from the oldest entry or from the
	// floor: Done takes the oldest due time left in the set after it.
	Settles bool
	began   time.Time
}

// Full reports whether the pass reads from the oldest entry.
func (p Pass) Full() bool { return p.Since.IsZero() }

// Start begins a pass at now, by the process's clock.
func (b *Bound) Start(now time.Time) Pass {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.since.IsZero() || now.Sub(b.fullAt) >= b.FullEvery:
		return Pass{Settles: true, began: now}
	case now.Sub(b.floorAt) >= b.FloorEvery:
		return Pass{Since: b.floor, Settles: true, began: now}
	}
	return Pass{Since: b.since, began: now}
}

// Done records a pass whose due bound was due (by the database's clock,
// which due times are compared with) and that found rows (at most
// limit). For a pass that settles, oldest is the oldest due time in the
// set at or after the pass's Since once the pass's own changes were made,
// read without skipping locked rows; zero when there is none. A pass that
// found limit rows may have left due ones behind: the next pass begins
// where it began. A pass that failed is not recorded.
func (b *Bound) Done(p Pass, due time.Time, found, limit int, oldest time.Time) {
	if found >= limit {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if p.Settles {
		floor := due.Add(-b.FloorLag)
		if !oldest.IsZero() && oldest.Before(floor) {
			floor = oldest
		}
		// A pass from the oldest entry may move the floor back, to a row
		// that joined before it; one from the floor saw nothing before it.
		if p.Full() || floor.After(b.floor) {
			b.floor = floor
		}
		b.floorAt = p.began
		if p.Full() {
			b.fullAt = p.began
		}
	}
	if next := due.Add(-b.Margin); next.After(b.since) {
		b.since = next
	}
}

// querier is a pool or a transaction.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Oldest reads the oldest due time for Done after pass p, which settles:
// with oldest (no parameter) for a pass from the oldest entry, with
// oldestSince (its lower bound, $1) for one from the floor. A NULL
// (nothing in the set) is the zero time.
func Oldest(ctx context.Context, q querier, p Pass, oldest, oldestSince string) (time.Time, error) {
	var at *time.Time
	var err error
	if p.Full() {
		err = q.QueryRow(ctx, oldest).Scan(&at)
	} else {
		err = q.QueryRow(ctx, oldestSince, p.Since).Scan(&at)
	}
	if err != nil || at == nil {
		return time.Time{}, err
	}
	return *at, nil
}
