// Package redisbatch lets concurrent callers share Redis round trips: the
// commands that callers queue at the same moment travel in one pipeline,
// taken at once (no window), so that under load a round trip and its
// system calls serve many callers, and at low load nothing waits.
package redisbatch

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hookline/hookline/internal/batch"
)

// Pipelines shares pipelines between the callers of Do while Run runs;
// otherwise each Do sends its own.
type Pipelines struct {
	rdb     redis.Cmdable
	timeout time.Duration
	pipes   *batch.Batcher[func(redis.Pipeliner), struct{}]
	// mu is held for reading by each Do on a shared pipeline, and for
	// writing by Run to change running: Run stops sharing only once no Do
	// is using a shared pipeline.
	mu      sync.RWMutex
	running bool
}

// At most maxBatch callers share a pipeline, with runners pipelines in
// flight.
const (
	maxBatch = 256
	runners  = 2
)

// New returns Pipelines on rdb. A shared pipeline is given timeout to run
// (zero: the client's own timeouts only).
func New(rdb redis.Cmdable, timeout time.Duration) *Pipelines {
	p := &Pipelines{rdb: rdb, timeout: timeout}
	p.pipes = batch.New(p.exec, maxBatch, runners)
	return p
}

// Run shares pipelines until ctx ends, and returns once the callers that
// were sharing one have their answers; later callers send their own.
func (p *Pipelines) Run(ctx context.Context) error {
	runCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() { _ = p.pipes.Run(runCtx); close(done) }()
	p.setRunning(true)
	<-ctx.Done()
	p.setRunning(false)
	stop()
	<-done
	return nil
}

func (p *Pipelines) setRunning(v bool) {
	p.mu.Lock()
	p.running = v
	p.mu.Unlock()
}

// Running reports whether Run is sharing pipelines.
func (p *Pipelines) Running() bool {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.running
}

// Do calls queue with a pipeline, sends it and returns once it has run.
// The caller reads each command's outcome, and its error, from the command
// itself. ctx bounds only a pipeline of the caller's own.
func (p *Pipelines) Do(ctx context.Context, queue func(redis.Pipeliner)) {
	p.mu.RLock()
	if p.running {
		// exec never fails and the batcher runs until Run has the write
		// lock, so this returns once queue has run.
		_, _ = p.pipes.Do(context.WithoutCancel(ctx), queue)
		p.mu.RUnlock()
		return
	}
	p.mu.RUnlock()
	pipe := p.rdb.Pipeline()
	queue(pipe)
	_, _ = pipe.Exec(ctx)
}

// exec sends every queued call in one pipeline. It returns no error: a
// command's error is in the command, and a batch that failed as a whole
// would be run again call by call, queueing every command twice.
func (p *Pipelines) exec(ctx context.Context, queues []func(redis.Pipeliner)) ([]struct{}, error) {
	if p.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, p.timeout)
		defer cancel()
	}
	pipe := p.rdb.Pipeline()
	for _, q := range queues {
		q(pipe)
	}
	_, _ = pipe.Exec(ctx)
	return make([]struct{}, len(queues)), nil
}
