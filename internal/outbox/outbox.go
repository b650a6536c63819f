// Package outbox gets committed deliveries onto RabbitMQ: a dispatcher
// publishes them right after their transaction commits, and a relay
// republishes any delivery the broker has not confirmed within a few
// seconds (the api crashed, or the broker was down). A delivery may be
// enqueued twice; it is never lost.
package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookline/hookline/internal/batch"
	"github.com/hookline/hookline/internal/duescan"
	"github.com/hookline/hookline/internal/metrics"
	"github.com/hookline/hookline/internal/queue"
	"github.com/hookline/hookline/internal/supervisor"
	"github.com/hookline/hookline/internal/wire"
)

// publisher is the part of queue.Publisher the outbox uses.
type publisher interface {
	Publish(ctx context.Context, msgs ...queue.Message) error
}

// Dispatcher publishes deliveries right after commit, in batches, and marks
// the confirmed ones enqueued markDelay later. When the dispatcher is
// behind, Enqueue holds the publisher's caller until there is room (at
// most enqueueWait), so that a burst slows publishing down instead of
// overflowing to the relay; when the broker is failing, or the wait runs
// out, tasks are dropped here and the relay publishes them a few seconds
// later.
type Dispatcher struct {
	pool    *pgxpool.Pool
	pub     publisher
	log     *slog.Logger
	in      chan wire.Task
	workers int
	// healthy is false while publishing fails (or the dispatcher is not
	// running): Enqueue then never waits.
	healthy atomic.Bool
	// window is how long a batch waits for company (batchWindow); one
	// loop at a time collects (it holds collecting), so that deliveries
	// committed a moment apart share a publish instead of going to
	// different loops one by one.
	window     time.Duration
	collecting chan struct{}
}

// dispatchBuffer bounds the deliveries waiting in memory. Small enough
// that one waits far less than the relay's Age before it is published,
// so the relay does not send it a second time.
const dispatchBuffer = 4096

// enqueueWait is the longest Enqueue holds its caller for room.
const enqueueWait = time.Second

// NewDispatcher returns a dispatcher; Run starts it.
func NewDispatcher(pool *pgxpool.Pool, pub publisher, log *slog.Logger) *Dispatcher {
	return &Dispatcher{pool: pool, pub: pub, log: log, in: make(chan wire.Task, dispatchBuffer), workers: 4,
		window: batchWindow, collecting: make(chan struct{}, 1)}
}

// Enqueue hands committed deliveries over for publishing.
func (d *Dispatcher) Enqueue(tasks ...wire.Task) {
	var deadline *time.Timer
	defer func() {
		if deadline != nil {
			deadline.Stop()
		}
	}()
	for i, t := range tasks {
		select {
		case d.in <- t:
			continue
		default:
		}
		if !d.healthy.Load() {
			metrics.OutboxDropped.Add(float64(len(tasks) - i))
			return
		}
		if deadline == nil {
			deadline = time.NewTimer(enqueueWait)
		}
		select {
		case d.in <- t:
		case <-deadline.C:
			metrics.OutboxDropped.Add(float64(len(tasks) - i))
			return
		}
	}
}

// Run publishes until ctx ends, then spends up to drainTimeout publishing
// what is still buffered; anything left after that is the relay's.
func (d *Dispatcher) Run(ctx context.Context) error {
	drainCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	stop := context.AfterFunc(ctx, func() {
		d.healthy.Store(false)
		time.AfterFunc(drainTimeout, cancel)
	})
	defer stop()
	d.healthy.Store(ctx.Err() == nil)
	marks := make(chan confirmed, 64)
	marked := make(chan struct{})
	go func() {
		defer close(marked)
		d.markLoop(ctx, drainCtx, marks)
	}()
	done := make(chan struct{})
	for range d.workers {
		go func() {
			defer func() { done <- struct{}{} }()
			d.loop(ctx, drainCtx, marks)
		}()
	}
	for range d.workers {
		<-done
	}
	close(marks)
	<-marked
	d.healthy.Store(false)
	return nil
}

const (
	maxBatch = 500
	// batchWindow is how long a batch waits for company: deliveries
	// committed within it share one publish and its confirm. The publish
	// is already answered, so the wait only delays the first attempt.
	batchWindow  = 5 * time.Millisecond
	drainTimeout = 3 * time.Second
	// markDelay is how long the dispatcher waits after the broker's
	// confirm before it marks deliveries enqueued. Most are attempted and
	// recorded within it, and the mark then finds nothing to write for
	// them (it names the attempt count the message was for), which saves
	// a row update per delivery. It stays well below the relay's Age (5
	// s), so the relay does not take an unmarked delivery for a lost one.
	markDelay = time.Second
)

// confirmed is a batch of deliveries the broker confirmed, to be marked
// at due.
type confirmed struct {
	due   time.Time
	tasks []wire.Task
}

// loop takes batches until ctx ends, then until the buffer is empty or
// drainCtx ends, publishes them and hands the confirmed ones to markLoop.
func (d *Dispatcher) loop(ctx, drainCtx context.Context, marks chan<- confirmed) {
	tasks := make([]wire.Task, 0, maxBatch)
	for {
		d.collecting <- struct{}{}
		tasks = batch.Collect(ctx, d.in, tasks[:0], maxBatch, d.window)
		<-d.collecting
		if len(tasks) == 0 || drainCtx.Err() != nil {
			return
		}
		err := publish(drainCtx, d.pub, tasks)
		d.healthy.Store(err == nil && ctx.Err() == nil)
		if err != nil {
			d.log.Warn("post-commit publish failed; the relay will retry", "deliveries", len(tasks), "error", err)
			continue
		}
		marks <- confirmed{due: time.Now().Add(markDelay), tasks: slices.Clone(tasks)}
	}
}

// maxMark bounds the deliveries of one mark statement.
const maxMark = 5000

// markGather is how long the mark of a confirmed batch waits past its due
// time for later batches to share its statement.
const markGather = 100 * time.Millisecond

// markLoop marks confirmed batches once they are due, all those due
// together in one statement (up to maxMark). Once ctx has ended it marks
// what it holds without waiting. It returns when marks is closed and
// everything it brought is marked.
func (d *Dispatcher) markLoop(ctx, drainCtx context.Context, marks <-chan confirmed) {
	var queue []confirmed
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	stopping := ctx.Done()
	for {
		now := time.Now()
		if ctx.Err() != nil {
			now = time.Now().Add(markDelay + markGather)
		}
		var due []wire.Task
		// Once the oldest batch is markGather past its due time, every
		// batch due by now goes in one statement.
		if len(queue) > 0 && !queue[0].due.Add(markGather).After(now) {
			for len(queue) > 0 && !queue[0].due.After(now) && len(due) < maxMark {
				due = append(due, queue[0].tasks...)
				queue = queue[1:]
			}
		}
		if len(due) > 0 {
			d.mark(drainCtx, due)
			continue
		}
		var wake <-chan time.Time
		if len(queue) > 0 {
			// Batches falling due within markGather of each other share
			// one statement.
			timer.Reset(time.Until(queue[0].due) + markGather)
			wake = timer.C
		}
		select {
		case c, ok := <-marks:
			if !ok {
				for _, c := range queue {
					d.mark(drainCtx, c.tasks)
				}
				return
			}
			queue = append(queue, c)
		case <-wake:
		case <-stopping:
			stopping = nil
		}
	}
}

// mark marks tasks enqueued; a failure leaves them to the relay.
func (d *Dispatcher) mark(ctx context.Context, tasks []wire.Task) {
	if err := wire.MarkEnqueued(ctx, d.pool, tasks); err != nil {
		d.log.Warn("confirmed deliveries not marked enqueued; the relay may send them again", "deliveries", len(tasks), "error", err)
	}
}

// publish publishes tasks with confirms.
func publish(ctx context.Context, pub publisher, tasks []wire.Task) error {
	msgs := make([]queue.Message, len(tasks))
	for i, t := range tasks {
		msgs[i] = t.Message(time.Time{})
	}
	if err := pub.Publish(ctx, msgs...); err != nil {
		return fmt.Errorf("publish %d deliveries: %w", len(tasks), err)
	}
	metrics.OutboxPublished.Add(float64(len(tasks)))
	return nil
}

// publishAndMark publishes tasks with confirms, then marks them enqueued.
func publishAndMark(ctx context.Context, db execer, pub publisher, tasks []wire.Task) error {
	if err := publish(ctx, pub, tasks); err != nil {
		return err
	}
	return wire.MarkEnqueued(ctx, db, tasks)
}

// execer is a pool or a transaction.
type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Relay republishes deliveries whose next attempt is not confirmed as
// enqueued Age after it was due: new deliveries the api could not publish,
// and retries a worker recorded but could not schedule. Rows are claimed with FOR UPDATE SKIP LOCKED, so
// several api processes share the work instead of all republishing it.
//
// A pass reads deliveries_outbox_idx, whose entries of deliveries long
// enqueued stay until a vacuum: most passes begin shortly before the
// previous one's due time instead of at the oldest entry, one a minute
// from a floor a few minutes back, and one an hour from the oldest
// (package duescan).
type Relay struct {
	pool     *pgxpool.Pool
	pub      publisher
	log      *slog.Logger
	Age      time.Duration
	Interval time.Duration
	Batch    int
	// Scan bounds the passes.
	Scan duescan.Bound
}

// NewRelay returns a relay with the default timings: deliveries older than
// 5 s, checked every second, 1000 per transaction, with the passes of
// duescan.Defaults.
func NewRelay(pool *pgxpool.Pool, pub publisher, log *slog.Logger) *Relay {
	return &Relay{pool: pool, pub: pub, log: log, Age: 5 * time.Second, Interval: time.Second, Batch: 1000,
		Scan: duescan.Defaults()}
}

const (
	// dueBoundSQL is the due time of a pass: deliveries due before it
	// are stale.
	dueBoundSQL = `SELECT now() - $1::interval`

	// staleSQL selects the stale deliveries due before $1, up to $2 of
	// them, oldest first, and only those due at or after $3 when it is
	// not NULL. The two plans are separate statements, so that a generic
	// plan of the second keeps $3 as its index's lower bound.
	staleSQL = staleColumns + `
  AND coalesce(d.next_attempt_at, d.created_at) < $1
` + staleOrder
	staleSinceSQL = staleColumns + `
  AND coalesce(d.next_attempt_at, d.created_at) < $1 AND coalesce(d.next_attempt_at, d.created_at) >= $3
` + staleOrder
	staleColumns = `SELECT d.id, d.event_id, d.webhook_id, d.tenant_id, d.priority, d.attempt_count, d.created_at, e.correlation_id
FROM deliveries d JOIN events e ON e.id = d.event_id
WHERE d.enqueued_at IS NULL AND d.parked_at IS NULL AND d.status IN ('pending', 'retrying')`
	staleOrder = `ORDER BY coalesce(d.next_attempt_at, d.created_at)
LIMIT $2
FOR UPDATE OF d SKIP LOCKED`

	// oldestSQL is the oldest due time of a delivery not confirmed
	// enqueued, of those every transaction can see (locked or not), for
	// the next floor of the passes (package duescan); oldestSinceSQL of
	// those due at or after $1.
	oldestSQL = `SELECT min(coalesce(next_attempt_at, created_at)) FROM deliveries
WHERE enqueued_at IS NULL AND parked_at IS NULL AND status IN ('pending', 'retrying')`
	oldestSinceSQL = oldestSQL + ` AND coalesce(next_attempt_at, created_at) >= $1`

	// backlogSQL counts the deliveries due and not confirmed enqueued,
	// and how long the oldest has been due; backlogSinceSQL only those
	// due at or after $1, the bound of the relay's next pass.
	backlogSQL = `SELECT count(*), coalesce(extract(epoch FROM now() - min(coalesce(next_attempt_at, created_at))), 0)
FROM deliveries WHERE enqueued_at IS NULL AND parked_at IS NULL AND status IN ('pending', 'retrying')
  AND coalesce(next_attempt_at, created_at) < now()`
	backlogSinceSQL = backlogSQL + ` AND coalesce(next_attempt_at, created_at) >= $1`
)

// Run relays until ctx ends.
func (r *Relay) Run(ctx context.Context) error {
	var lastGauge time.Time
	return supervisor.Every(ctx, 0, r.Interval, func(ctx context.Context) {
		for {
			n, err := r.Pass(ctx)
			if err != nil && ctx.Err() == nil {
				r.log.Warn("outbox relay pass failed", "error", err)
			}
			if err != nil || n < r.Batch {
				break
			}
		}
		if time.Since(lastGauge) >= 5*time.Second {
			r.observeBacklog(ctx)
			lastGauge = time.Now()
		}
	})
}

// Pass republishes one batch of stale deliveries and reports how many.
func (r *Relay) Pass(ctx context.Context) (int, error) {
	var n int
	var due, oldest time.Time
	pass := r.Scan.Start(time.Now())
	err := pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, dueBoundSQL, r.Age).Scan(&due); err != nil {
			return fmt.Errorf("select stale deliveries: %w", err)
		}
		var rows pgx.Rows
		var err error
		if pass.Full() {
			rows, err = tx.Query(ctx, staleSQL, due, r.Batch)
		} else {
			rows, err = tx.Query(ctx, staleSinceSQL, due, r.Batch, pass.Since)
		}
		if err != nil {
			return fmt.Errorf("select stale deliveries: %w", err)
		}
		tasks, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (wire.Task, error) {
			var t wire.Task
			var attempts int
			err := row.Scan(&t.DeliveryID, &t.EventID, &t.WebhookID, &t.TenantID, &t.Priority, &attempts, &t.CreatedAt, &t.CorrelationID)
			t.Attempt = attempts + 1
			return t, err
		})
		if err != nil {
			return fmt.Errorf("scan stale deliveries: %w", err)
		}
		n = len(tasks)
		if n > 0 {
			if err := publishAndMark(ctx, tx, r.pub, tasks); err != nil {
				return err
			}
			metrics.OutboxRelayed.Add(float64(n))
			r.log.Info("outbox relay republished deliveries", "deliveries", n)
		}
		if pass.Settles && n < r.Batch {
			oldest, err = duescan.Oldest(ctx, tx, pass, oldestSQL, oldestSinceSQL)
			if err != nil {
				return fmt.Errorf("select the oldest stale delivery: %w", err)
			}
		}
		return nil
	})
	if err == nil {
		r.Scan.Done(pass, due, n, r.Batch, oldest)
	}
	if errors.Is(err, context.Canceled) {
		return n, nil
	}
	return n, err
}

// observeBacklog sets the backlog's gauges from the deliveries the relay's
// next pass reads: while its passes fail (the broker is down), they go on
// reading from the last one that succeeded, and so count every delivery
// due since.
func (r *Relay) observeBacklog(ctx context.Context) {
	var count int64
	var lag float64
	sql, args := backlogSQL, []any{}
	if p := r.Scan.Start(time.Now()); !p.Full() {
		sql, args = backlogSinceSQL, []any{p.Since}
	}
	if err := r.pool.QueryRow(ctx, sql, args...).Scan(&count, &lag); err != nil {
		return
	}
	metrics.OutboxBacklog.Set(float64(count))
	metrics.OutboxLag.Set(lag)
}
