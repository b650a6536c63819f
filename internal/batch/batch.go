// Package batch runs many small concurrent requests as few large ones: the
// group commit behind the publish path and the worker's attempt log.
// Several runner goroutines each take every request waiting (up to a
// maximum) and run them with one call; at low load a batch is one request
// and nothing waits for a window, under load batches grow while the
// previous ones run.
package batch

import (
	"context"
	"errors"
	"fmt"
)

// Func runs a batch and returns one result per input, in order.
type Func[In, Out any] func(ctx context.Context, in []In) ([]Out, error)

// Batcher collects requests for fn.
type Batcher[In, Out any] struct {
	fn      Func[In, Out]
	in      chan *call[In, Out]
	max     int
	workers int
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
	return &Batcher[In, Out]{fn: fn, in: make(chan *call[In, Out], maxBatch*workers*4), max: maxBatch, workers: workers}
}

// Do queues one request and waits for its result. If ctx ends first the
// request may still run.
func (b *Batcher[In, Out]) Do(ctx context.Context, in In) (Out, error) {
	c := &call[In, Out]{in: in, done: make(chan struct{})}
	var zero Out
	select {
	case b.in <- c:
	case <-ctx.Done():
		return zero, ctx.Err()
	}
	select {
	case <-c.done:
		return c.out, c.err
	case <-ctx.Done():
		return zero, ctx.Err()
	}
}

// Run runs batches until ctx ends and no request is waiting. Requests run
// with a context that is not cancelled by ctx, so that a batch in progress
// completes.
func (b *Batcher[In, Out]) Run(ctx context.Context) error {
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
		select {
		case c := <-b.in:
			batch = append(batch[:0], c)
		case <-ctx.Done():
			select {
			case c := <-b.in:
				batch = append(batch[:0], c)
			default:
				return
			}
		}
	fill:
		for len(batch) < b.max {
			select {
			case c := <-b.in:
				batch = append(batch, c)
			default:
				break fill
			}
		}
		b.run(runCtx, batch)
	}
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
