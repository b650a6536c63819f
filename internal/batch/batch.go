// Package batch runs many small concurrent requests as few large ones: the
// group commit behind the publish path and the worker's attempt log.
// Several runner goroutines each take every request waiting (up to a
// maximum) and run them with one call; under load batches grow while the
// previous ones run. Without a window a batch at low load is one request
// and nothing waits; with one (Window), one runner at a time collects a
// batch for up to that long after its first request, so that batches
// fill at moderate load too, at the cost of that wait. With Sparse, the
// whole window applies only while requests come close enough together for
// a batch to find company in it; while they come further apart, a batch
// waits only for the batches already running, if any (a group commit).
package batch

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Func runs a batch and returns one result per input, in order.
type Func[In, Out any] func(ctx context.Context, in []In) ([]Out, error)

// Batcher collects requests for fn.
type Batcher[In, Out any] struct {
	fn      Func[In, Out]
	in      chan *call[In, Out]
	max     int
	workers int
	window  time.Duration
	// urgent requests close the window of the batch they join (Urgent).
	urgent func(In) bool
	// pace is the mean interval between requests, with Sparse.
	pace *pace
	// collecting is held by the runner collecting a batch (with a window).
	collecting chan struct{}
	// running counts the batches running; idle is closed while none is
	// (with Sparse).
	runMu   sync.Mutex
	running int
	idle    chan struct{}
	// stopped is closed when Run has returned: nothing takes requests any
	// more.
	stopped chan struct{}
}

type call[In, Out any] struct {
	in   In
	out  Out
	err  error
	done chan struct{}
}

// ErrStopped is returned by Do when the batcher stopped before running the
// request.
var ErrStopped = errors.New("batcher stopped")

// New returns a batcher running fn on at most maxBatch requests at once,
// with workers batches in flight.
func New[In, Out any](fn Func[In, Out], maxBatch, workers int) *Batcher[In, Out] {
	return &Batcher[In, Out]{fn: fn, in: make(chan *call[In, Out], maxBatch*workers*4), max: maxBatch, workers: workers,
		collecting: make(chan struct{}, 1), stopped: make(chan struct{})}
}

// Window makes a batch wait up to d after its first request for others to
// join it (until the batch is full), one runner collecting at a time while
// the others run the batches collected before. Call it before Run.
func (b *Batcher[In, Out]) Window(d time.Duration) *Batcher[In, Out] {
	b.window = d
	return b
}

// Urgent makes a request for which urgent is true end the window of the
// batch it joins: that batch runs at once, with whatever joined it before.
// Call it before Run.
func (b *Batcher[In, Out]) Urgent(urgent func(In) bool) *Batcher[In, Out] {
	b.urgent = urgent
	return b
}

// Sparse makes a batch shorten its window when requests have been coming
// at least gap apart on average (an exponentially weighted mean of the
// intervals between them, each counted as at most 4 gap): waiting the
// whole window would seldom find company then, and each request would only
// be later. Such a batch runs at once when no other batch is running, and
// otherwise as soon as none is (within the window): the requests arriving
// while a batch runs share the next one, so that batches still grow when
// each takes longer than the interval between requests (a slow or busy
// database). A batch whose first request comes while requests are closer
// together waits the whole window. A new batcher starts as if requests
// were sparse. Call it before Run.
func (b *Batcher[In, Out]) Sparse(gap time.Duration) *Batcher[In, Out] {
	return b.sparse(gap, time.Now)
}

// sparse is Sparse on the clock now.
func (b *Batcher[In, Out]) sparse(gap time.Duration, now func() time.Time) *Batcher[In, Out] {
	b.pace = newPace(gap, now)
	b.idle = make(chan struct{})
	close(b.idle)
	return b
}

// pace follows the intervals between requests.
type pace struct {
	gap time.Duration
	now func() time.Time

	mu   sync.Mutex
	last time.Time
	mean time.Duration
}

// paceWeight is the weight of the newest interval in the mean: 1/8.
const paceWeight = 8

func newPace(gap time.Duration, now func() time.Time) *pace {
	return &pace{gap: gap, now: now, mean: 4 * gap}
}

// arrive counts a request that came now.
func (p *pace) arrive() {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	if !p.last.IsZero() {
		d := min(max(now.Sub(p.last), 0), 4*p.gap)
		p.mean += (d - p.mean) / paceWeight
	}
	p.last = now
}

// sparse reports whether requests come gap or more apart on average.
func (p *pace) sparse() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mean >= p.gap
}

// Waiting is the number of requests queued and not yet taken into a batch.
func (b *Batcher[In, Out]) Waiting() int { return len(b.in) }

// Do queues one request and waits for its result. If ctx ends first the
// request may still run. Once Run has returned, Do returns ErrStopped
// (and the request does not run).
func (b *Batcher[In, Out]) Do(ctx context.Context, in In) (Out, error) {
	c := &call[In, Out]{in: in, done: make(chan struct{})}
	if b.pace != nil {
		b.pace.arrive()
	}
	var zero Out
	select {
	case b.in <- c:
	case <-ctx.Done():
		return zero, ctx.Err()
	case <-b.stopped:
		return zero, ErrStopped
	}
	select {
	case <-c.done:
		return c.out, c.err
	case <-ctx.Done():
		return zero, ctx.Err()
	case <-b.stopped:
		// Run returns only after the batches it took have run: a request
		// not done by then was queued after the last runner left.
		select {
		case <-c.done:
			return c.out, c.err
		default:
			return zero, ErrStopped
		}
	}
}

// Run runs batches until ctx ends and no request is waiting. Requests run
// with a context that is not cancelled by ctx, so that a batch in progress
// completes. Call it once.
func (b *Batcher[In, Out]) Run(ctx context.Context) error {
	defer close(b.stopped)
	done := make(chan struct{})
	for range b.workers {
		go func() {
			defer func() { done <- struct{}{} }()
			b.loop(ctx)
		}()
	}
	for range b.workers {
		<-done
	}
	return nil
}

func (b *Batcher[In, Out]) loop(ctx context.Context) {
	batch := make([]*call[In, Out], 0, b.max)
	runCtx := context.WithoutCancel(ctx)
	for {
		if b.window > 0 {
			b.collecting <- struct{}{}
		}
		batch = collect(ctx, b.in, batch[:0], b.max, b.window, b.isUrgent, b.sparseEnd)
		if len(batch) > 0 {
			// Counted as running before the next runner may collect, so
			// that it waits for this batch.
			b.began()
		}
		if b.window > 0 {
			<-b.collecting
		}
		if len(batch) == 0 {
			return
		}
		b.run(runCtx, batch)
		b.ended()
	}
}

// isUrgent reports whether c ends its batch's window (Urgent).
func (b *Batcher[In, Out]) isUrgent(c *call[In, Out]) bool {
	return b.urgent != nil && b.urgent(c.in)
}

// sparseEnd returns what ends the window of a batch whose first request
// was just taken: while requests are sparse (Sparse), the end of the
// batches running (a closed channel when none is); otherwise nil, nothing
// before the window's end.
func (b *Batcher[In, Out]) sparseEnd() <-chan struct{} {
	if b.pace == nil || !b.pace.sparse() {
		return nil
	}
	b.runMu.Lock()
	defer b.runMu.Unlock()
	return b.idle
}

// began counts a batch that starts running (with Sparse).
func (b *Batcher[In, Out]) began() {
	if b.pace == nil {
		return
	}
	b.runMu.Lock()
	defer b.runMu.Unlock()
	if b.running == 0 {
		b.idle = make(chan struct{})
	}
	b.running++
}

// ended counts a batch that has run (with Sparse).
func (b *Batcher[In, Out]) ended() {
	if b.pace == nil {
		return
	}
	b.runMu.Lock()
	defer b.runMu.Unlock()
	b.running--
	if b.running == 0 {
		close(b.idle)
	}
}

// Collect appends to batch the next items of in, up to max: it waits for a
// first item, then takes those waiting, or, with a window, those arriving
// up to window after the first. Once ctx has ended it waits for nothing: it
// takes what is waiting, and returns batch unchanged when nothing is (the
// end of a drain).
func Collect[T any](ctx context.Context, in <-chan T, batch []T, max int, window time.Duration) []T {
	return CollectUntil(ctx, in, batch, max, window, nil)
}

// CollectUntil is Collect, except that the window ends as soon as an item
// for which stop is true has been taken (stop may be nil).
func CollectUntil[T any](ctx context.Context, in <-chan T, batch []T, max int, window time.Duration, stop func(T) bool) []T {
	return collect(ctx, in, batch, max, window, stop, nil)
}

// collect is CollectUntil, whose window also ends (after the items waiting
// then are taken) once the channel returned by end is ready; end is called
// once the first item is taken, and may be nil or return nil.
func collect[T any](ctx context.Context, in <-chan T, batch []T, max int, window time.Duration, stop func(T) bool,
	end func() <-chan struct{}) []T {
	n := len(batch)
	select {
	case c := <-in:
		batch = append(batch, c)
	case <-ctx.Done():
		select {
		case c := <-in:
			batch = append(batch, c)
		default:
			return batch
		}
	}
	if stop != nil && stop(batch[len(batch)-1]) {
		window = 0
	}
	if window <= 0 || ctx.Err() != nil {
		return takeWaiting(in, batch, n, max)
	}
	var ended <-chan struct{}
	if end != nil {
		ended = end()
		select {
		case <-ended:
			return takeWaiting(in, batch, n, max)
		default:
		}
	}
	timer := time.NewTimer(window)
	defer timer.Stop()
	for len(batch)-n < max {
		select {
		case c := <-in:
			batch = append(batch, c)
			if stop != nil && stop(c) {
				return batch
			}
		case <-ended:
			return takeWaiting(in, batch, n, max)
		case <-timer.C:
			return batch
		case <-ctx.Done():
			return batch
		}
	}
	return batch
}

// takeWaiting appends the items waiting in in to batch, until batch holds
// max items after its first n.
func takeWaiting[T any](in <-chan T, batch []T, n, max int) []T {
	for len(batch)-n < max {
		select {
		case c := <-in:
			batch = append(batch, c)
		default:
			return batch
		}
	}
	return batch
}

// run executes a batch; when it fails as a whole, each request is retried
// alone so that one bad request cannot fail the others.
func (b *Batcher[In, Out]) run(ctx context.Context, batch []*call[In, Out]) {
	ins := make([]In, len(batch))
	for i, c := range batch {
		ins[i] = c.in
	}
	outs, err := b.fn(ctx, ins)
	if err == nil && len(outs) != len(ins) {
		err = fmt.Errorf("batch returned %d results for %d requests", len(outs), len(ins))
	}
	switch {
	case err == nil:
		for i, c := range batch {
			c.out = outs[i]
		}
	case len(batch) == 1:
		batch[0].err = err
	default:
		for _, c := range batch {
			out, err := b.fn(ctx, []In{c.in})
			if err == nil && len(out) == 1 {
				c.out = out[0]
			} else if err == nil {
				err = fmt.Errorf("batch returned %d results for 1 request", len(out))
			}
			c.err = err
		}
	}
	for _, c := range batch {
		close(c.done)
	}
}
