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
// Margin. A row that joins with an older due time (a lost message found by
// the sweep, a clock far behind the database's, a row skipped while
// locked whose locker then rolled back) is found by the pass that reads
// from the oldest entry, once every FullEvery.
package duescan

import (
	"sync"
	"time"
)

// Bound is the lower bound of a periodic scan. Its methods may be called
// from several goroutines, though a scan normally has one.
type Bound struct {
	// Margin is how far before the last complete pass's due bound the
	// next pass begins.
	Margin time.Duration
	// FullEvery is how often a pass reads from the oldest entry.
	FullEvery time.Duration

	mu sync.Mutex
	// since is the lower bound of the next pass; zero until a pass from
	// the oldest entry completed.
	since time.Time
	// fullAt is when the last complete pass from the oldest entry began,
	// by the process's clock.
	fullAt time.Time
}

// Pass is one pass of a scan, from Start until Done.
type Pass struct {
	// Since is the lower bound of the pass's due times; zero when the
	// pass reads from the oldest entry.
	Since time.Time
	began time.Time
}

// Full reports whether the pass reads from the oldest entry.
func (p Pass) Full() bool { return p.Since.IsZero() }

// Start begins a pass at now, by the process's clock.
func (b *Bound) Start(now time.Time) Pass {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.since.IsZero() || now.Sub(b.fullAt) >= b.FullEvery {
		return Pass{began: now}
	}
	return Pass{Since: b.since, began: now}
}

// Done records a pass whose due bound was due (by the database's clock,
// which due times are compared with) and that found rows (at most
// limit). A pass that found limit rows may have left due ones
// behind: the next pass begins where it began. A pass that failed is not
// recorded.
func (b *Bound) Done(p Pass, due time.Time, found, limit int) {
	if found >= limit {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if p.Full() {
		b.fullAt = p.began
	}
	if next := due.Add(-b.Margin); next.After(b.since) {
		b.since = next
	}
}
