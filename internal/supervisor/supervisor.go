// Package supervisor runs the long-running parts of a process (servers,
// consumers, batchers, background loops) and stops them in order.
//
// Each part runs in its own goroutine with a context of its own. Parts stop
// one at a time, the last started first, so that a part stops before those
// it feeds: the api's HTTP server before the group commit, the group commit
// before the outbox, the outbox before the broker connection. A part that
// returns before it is asked to stop has failed: the group's readiness check
// fails from then on, Failed is closed, and Run stops the rest and returns
// the failure.
package supervisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// Part is a named long-running function: Run returns when ctx ends.
type Part struct {
	Name string
	Run  func(ctx context.Context) error
}

// Group is a set of running parts. The zero value is not usable: use New.
type Group struct {
	log    *slog.Logger
	mu     sync.Mutex
	parts  []*part
	failed chan struct{}
	fail   error // the first part that ended unasked, under mu
	asked  bool  // Stop has begun, under mu
}

type part struct {
	name   string
	cancel context.CancelFunc
	done   chan struct{}
	err    error // what run returned; read after done is closed
}

// New returns an empty group that logs part failures to log.
func New(log *slog.Logger) *Group {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Group{log: log, failed: make(chan struct{})}
}

// Go starts run under name. Its context ends when Stop reaches it, not
// before; run must return soon after.
func (g *Group) Go(name string, run func(ctx context.Context) error) {
	ctx, cancel := context.WithCancel(context.Background())
	p := &part{name: name, cancel: cancel, done: make(chan struct{})}
	g.mu.Lock()
	g.parts = append(g.parts, p)
	g.mu.Unlock()
	go func() {
		defer close(p.done)
		p.err = run(ctx)
		if ctx.Err() == nil {
			g.ended(p)
		}
	}()
}

// ended records that p returned without being asked to.
func (g *Group) ended(p *part) {
	err := p.err
	if err == nil {
		err = errors.New("returned before it was stopped")
	}
	err = fmt.Errorf("%s: %w", p.name, err)
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.asked {
		return
	}
	g.log.Error("part stopped", "part", p.name, "error", err)
	if g.fail == nil {
		g.fail = err
		close(g.failed)
	}
}

// Failed is closed when the first part ends without being asked to.
func (g *Group) Failed() <-chan struct{} { return g.failed }

// Check is a readiness check: it fails, naming the part, once a part has
// ended without being asked to.
func (g *Group) Check(context.Context) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.fail
}

// Run waits until ctx ends or a part fails, then stops every part within
// grace (Stop) and returns the first error.
func (g *Group) Run(ctx context.Context, grace time.Duration) error {
	select {
	case <-ctx.Done():
	case <-g.failed:
	}
	return g.Stop(grace)
}

// Stop stops the parts one at a time, the last started first, each after
// the one started after it has returned. All of them together have grace;
// when it runs out, the parts still running are cancelled together and not
// waited for. Stop returns the first error: the failure of a part that
// ended unasked, else the first error a part returned when stopped, else
// the name of a part that did not stop in time.
func (g *Group) Stop(grace time.Duration) error {
	g.mu.Lock()
	g.asked = true
	parts := g.parts
	g.parts = nil
	first := g.fail
	g.mu.Unlock()

	deadline := time.NewTimer(grace)
	defer deadline.Stop()
	var late []string
	for i := len(parts) - 1; i >= 0; i-- {
		p := parts[i]
		p.cancel()
		select {
		case <-p.done:
			// A part may answer its stop with its context's error.
			if p.err != nil && !errors.Is(p.err, context.Canceled) && first == nil {
				first = fmt.Errorf("%s: %w", p.name, p.err)
			}
		case <-deadline.C:
			for _, q := range parts[:i+1] {
				q.cancel()
				late = append(late, q.name)
			}
			i = 0
		}
	}
	if first == nil && len(late) > 0 {
		first = fmt.Errorf("did not stop within %s: %v", grace, late)
	}
	return first
}
