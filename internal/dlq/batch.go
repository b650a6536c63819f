package dlq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/hookline/hookline/internal/eventlog"
	"github.com/hookline/hookline/internal/filter"
	"github.com/hookline/hookline/internal/history"
	"github.com/hookline/hookline/internal/metrics"
	"github.com/hookline/hookline/internal/supervisor"
	"github.com/hookline/hookline/internal/tracing"
	"github.com/hookline/hookline/internal/webhook"
	"github.com/hookline/hookline/internal/wire"
)

// Runner runs batch operations (batch retries and recoveries, see
// recover.go) in a dlq process. Several dlq processes may
// run: each batch is claimed by one, which heartbeats while it works; a
// batch whose heartbeat stops for ClaimTimeout is taken over by another
// (or the restarted) process and resumes from its checkpoint.
//
// A batch works in chunks, each one transaction that creates the new
// deliveries and moves the checkpoint past the exhausted ones it handled;
// the new deliveries are enqueued after the commit (and by the outbox relay
// if the process dies first). A delivery is thus given its retry exactly
// once, however often the process is killed.
type Runner struct {
	pool     *pgxpool.Pool
	dispatch dispatcher
	log      *slog.Logger
	// Tracer makes each chunk a span, linked to the traces of the events
	// it retries (whose attempts the retries continue); the zero Tracer:
	// none.
	Tracer tracing.Tracer
	// ID names this process in claimed_by.
	ID string
	// Concurrency is how many batches this process runs at once.
	Concurrency int
	// ConcurrencyPerTenant is how many batches of one tenant run at once
	// across every dlq process (see claim.go); at least 1. NewRunner sets
	// it to 1, the config's default.
	ConcurrencyPerTenant int
	// ClaimTimeout is how stale a claim must be to be taken over.
	ClaimTimeout time.Duration
	// Poll is how often the runner looks for work and updates outcomes.
	Poll time.Duration
	// CountEvery is how often the gauges of finished batches are counted
	// again (reading every batch ever made); those of pending and running
	// ones are counted at every poll. NewRunner sets a minute.
	CountEvery time.Duration
	// countedAt is when the finished batches were last counted.
	countedAt time.Time

	// programs holds the compiled payload filters of the webhooks whose
	// deliveries the runner retries.
	programs *filter.Cache
}

// NewRunner returns a runner named after the host and process id, running
// one batch per tenant at a time.
func NewRunner(pool *pgxpool.Pool, d dispatcher, log *slog.Logger, concurrency int, claimTimeout time.Duration) *Runner {
	host, _ := os.Hostname()
	return &Runner{pool: pool, dispatch: d, log: log, ID: fmt.Sprintf("%s/%d/%s", host, os.Getpid(), uuid.NewString()[:8]),
		Concurrency: concurrency, ConcurrencyPerTenant: 1, ClaimTimeout: claimTimeout, Poll: time.Second, CountEvery: time.Minute,
		programs: filter.NewCache(0)}
}

// Run claims and runs batches, and keeps their outcome counts current,
// until ctx ends. Batches in progress stop at their next chunk; their
// checkpoint lets the next claimant resume.
func (r *Runner) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	slots := make(chan struct{}, r.Concurrency)
	return supervisor.Every(ctx, 0, r.Poll, func(ctx context.Context) {
		if err := r.TrackOutcomes(ctx); err != nil && ctx.Err() == nil {
			r.log.Warn("batch outcomes not updated", "error", err)
		}
		// Claim while a slot is free and a batch is waiting.
		for {
			select {
			case slots <- struct{}{}:
			default:
				return
			}
			c, ok, err := r.claim(ctx)
			if err != nil || !ok {
				<-slots
				if err != nil && ctx.Err() == nil {
					r.log.Warn("batch operations not claimed", "error", err)
				}
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-slots }()
				r.run(ctx, c)
			}()
		}
	})
}

// errLost means the batch was cancelled, or claimed by another process
// after this one stalled.
var errLost = errors.New("batch operation cancelled or claimed elsewhere")

// run works on one claimed batch until it has handled every delivery, is
// cancelled, loses its claim, or ctx ends.
func (r *Runner) run(ctx context.Context, c claim) {
	log := r.log.With("batch_operation_id", c.id.String(), "tenant_id", c.tenantID.String())
	if c.upto == nil && c.uptoEvent == nil {
		snapshot := r.snapshot
		if c.kind == KindRecover {
			snapshot = r.snapshotRecovery
		}
		done, err := snapshot(ctx, &c)
		if err != nil {
			r.stop(ctx, log, err)
			return
		}
		if done {
			log.Info("batch operation matched no delivery")
			return
		}
	}
	log.Info("batch operation running", "requests_per_second", c.rps, "resumed_after", c.last)
	chunk := max(1, c.rps/10)
	paced := 0
	start := time.Now()
	for {
		n, more, err := r.tracedChunk(ctx, &c, chunk)
		if err != nil {
			r.stop(ctx, log, err)
			return
		}
		if !more {
			log.Info("batch operation enqueued every retry")
			return
		}
		paced += n
		due := start.Add(time.Duration(paced) * time.Second / time.Duration(c.rps))
		if !sleepUntil(ctx, due) {
			return
		}
	}
}

// stop logs why run gave up; the claim goes stale and the batch resumes
// later, here or elsewhere.
func (r *Runner) stop(ctx context.Context, log *slog.Logger, err error) {
	switch {
	case ctx.Err() != nil:
		log.Info("batch operation paused by shutdown")
	case errors.Is(err, errLost):
		log.Info("batch operation stopped: " + err.Error())
	default:
		log.Warn("batch operation interrupted; it resumes once its claim times out", "error", err)
	}
}

func sleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}

// The batch's set: exhausted deliveries matching its filter, exhausted by
// the time it started and not retried then, no newer than upto. The
// snapshot fixes upto and the total; the chunks walk the set in id order.
const setWhere = history.DeadLetterWhere + `
  AND d.completed_at <= @started_at AND ` + history.NotRetried

const snapshotSQL = `UPDATE batch_operations b SET upto_delivery_id = s.upto, total = s.n,
    enqueued_all_at = CASE WHEN s.n = 0 THEN now() END,
    state = CASE WHEN s.n = 0 THEN 'completed' ELSE b.state END,
    finished_at = CASE WHEN s.n = 0 THEN now() END
FROM (SELECT max(d.id::text COLLATE "C")::uuid AS upto, count(*) AS n
      FROM deliveries d JOIN events e ON e.id = d.event_id
      WHERE ` + setWhere + `) s
WHERE b.id = @batch_id AND b.claimed_by = @runner AND b.state = 'running'
RETURNING s.upto, s.n`

func (r *Runner) snapshot(ctx context.Context, c *claim) (bool, error) {
	args := c.filter.Args(c.tenantID)
	args["started_at"], args["batch_id"], args["runner"] = c.startedAt, c.id, r.ID
	var n int
	err := r.pool.QueryRow(ctx, snapshotSQL, args).Scan(&c.upto, &n)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, errLost
	}
	if err != nil {
		return false, fmt.Errorf("count the batch's deliveries: %w", err)
	}
	return n == 0, nil
}

const heartbeatSQL = `UPDATE batch_operations SET heartbeat_at = now()
WHERE id = $1 AND claimed_by = $2 AND state = 'running'`

// A chunk selects the next deliveries d to retry after the checkpoint
// (@after), up to the batch's last one (@upto): chunkSelect, the
// condition of the batch's set, then chunkOrder.
//
// The pages of a batch (chunkSQL, recoverChunkSQL, missedPageSQL) are
// planned with each page's values (pageMode), never from a generic plan:
// a generic plan, blind to whether @after is NULL, cannot start its index
// scan at the checkpoint, and reads every delivery of the set before it
// at each page (3,094 buffers against 384 for a page of 1,000 in a DLQ of
// 2,000), so that a batch cost its pages times its set.
const (
	chunkSelect = `SELECT d.id, d.event_id, d.webhook_id, e.correlation_id,
    w.active AND w.deleted_at IS NULL AND e.data IS NOT NULL, coalesce(e.traceparent, ''), coalesce(e.tracestate, ''),
    ` + filterColumnsSQL + `
FROM deliveries d JOIN events e ON e.id = d.event_id JOIN webhooks w ON w.id = d.webhook_id
WHERE `
	chunkOrder = `
  AND d.id <= @upto AND (@after::uuid IS NULL OR d.id > @after::uuid)
ORDER BY d.id
LIMIT @limit`
	chunkSQL = chunkSelect + setWhere + chunkOrder
)

// pageMode runs a page's statement planned with its values (see chunkSQL).
const pageMode = pgx.QueryExecModeDescribeExec

// lockEntriesSQL locks the entries a page retries, in id order (so that
// two chunks never wait for each other in a circle), before
// insertBatchRetriesSQL looks for their unfinished retries (see
// insertRetrySQL).
var lockEntriesSQL = `SELECT id FROM deliveries WHERE ` + wire.IDsIn("id", "$1") + ` ORDER BY id FOR NO KEY UPDATE`

// insertBatchRetriesSQL creates the retries of a page, but for entries
// given one meanwhile that is still unfinished, each with the order key
// its webhook's ordering gives it now (the rule publishing uses), so that
// a retried delivery of an ordered webhook keeps its place.
var insertBatchRetriesSQL = `INSERT INTO deliveries (id, tenant_id, event_id, webhook_id, priority, retry_of, batch_operation_id, created_at, order_key)
SELECT uuidv7(), $1, t.event_id, t.webhook_id, $2, t.retry_of, $3, $4, ` + webhook.OrderKeySQL("w", "e.event_type") + `
FROM unnest($5::uuid[], $6::uuid[], $7::uuid[]) AS t(event_id, webhook_id, retry_of)
JOIN webhooks w ON w.id = t.webhook_id JOIN events e ON e.id = t.event_id
WHERE NOT EXISTS (SELECT 1 FROM deliveries r WHERE r.retry_of = t.retry_of AND r.status IN ('pending', 'retrying'))
RETURNING id, event_id, webhook_id, retry_of, coalesce(order_key, '')`

const checkpointSQL = `UPDATE batch_operations SET last_delivery_id = $3, processed = processed + $4,
    skipped = skipped + $5, heartbeat_at = now()
WHERE id = $1 AND claimed_by = $2 AND state = 'running'`

const finishEnqueueSQL = `UPDATE batch_operations SET enqueued_all_at = now(), total = greatest(total, processed + skipped),
    skipped = greatest(total, processed + skipped) - processed, heartbeat_at = now()
WHERE id = $1 AND claimed_by = $2 AND state = 'running'`

// tracedChunk is chunk as a span of its own: hookline.batch_retry, or
// hookline.recovery for a recovery's.
func (r *Runner) tracedChunk(ctx context.Context, c *claim, limit int) (int, bool, error) {
	name := "hookline.batch_retry"
	if c.kind == KindRecover {
		name = "hookline.recovery"
	}
	ctx, span := r.Tracer.Start(ctx, name, trace.SpanKindInternal)
	defer span.End()
	n, more, err := r.chunk(ctx, c, limit)
	if span.IsRecording() {
		span.SetAttributes(tracing.TenantID.String(c.tenantID.String()), attribute.String("hookline.batch_operation_id", c.id.String()),
			attribute.Int("hookline.deliveries", n))
		if c.kind == KindRecover {
			span.SetAttributes(tracing.WebhookID.String(c.recovery.WebhookID.String()))
		}
		tracing.Fail(span, err)
	}
	return n, more, err
}

// chunk gives up to limit deliveries of the batch their retries in one
// transaction, with the checkpoint, and enqueues them after the commit. It
// returns how many it handled and whether any were left to handle.
func (r *Runner) chunk(ctx context.Context, c *claim, limit int) (int, bool, error) {
	tx, err := r.pool.Begin(ctx)
	if err != nil {
		return 0, false, fmt.Errorf("begin chunk: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit
	// Retries and recoveries add deliveries to stored events: not while
	// retention drops a week of them.
	if _, err := tx.Exec(ctx, eventlog.HoldSQL); err != nil {
		return 0, false, fmt.Errorf("begin chunk: %w", err)
	}
	// The heartbeat: it locks the batch row, so a cancel or a takeover
	// waits for this chunk or makes it stop.
	tag, err := tx.Exec(ctx, heartbeatSQL, c.id, r.ID)
	if err != nil {
		return 0, false, fmt.Errorf("heartbeat: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return 0, false, errLost
	}
	if c.kind == KindRecover && !c.retryingFailed() {
		return r.missedChunk(ctx, tx, c, limit)
	}
	query, args := c.selection(limit)
	rows, err := tx.Query(ctx, query, pageMode, args)
	if err != nil {
		return 0, false, fmt.Errorf("select chunk: %w", err)
	}
	type cand struct {
		id, event, webhook uuid.UUID
		corr               string
		deliverable        bool
		origin             tracing.Parent
		filtered           filteredEvent
	}
	cands, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (cand, error) {
		var k cand
		return k, row.Scan(&k.id, &k.event, &k.webhook, &k.corr, &k.deliverable, &k.origin.TraceParent, &k.origin.TraceState,
			&k.filtered.expr, &k.filtered.eventType, &k.filtered.source, &k.filtered.data)
	})
	if err != nil {
		return 0, false, fmt.Errorf("select chunk: %w", err)
	}
	if len(cands) == 0 {
		if c.kind == KindRecover {
			return r.endFailed(ctx, tx, c)
		}
		if _, err := tx.Exec(ctx, finishEnqueueSQL, c.id, r.ID); err != nil {
			return 0, false, fmt.Errorf("finish batch: %w", err)
		}
		return 0, false, tx.Commit(ctx)
	}
	var events, hooks, origs []uuid.UUID
	corr := map[uuid.UUID]string{}
	for _, k := range cands {
		// A delivery whose webhook's filter refuses its event now is
		// skipped, like one whose webhook is inactive.
		if k.deliverable && r.filterCheck().passes(k.filtered, k.webhook) {
			events, hooks, origs = append(events, k.event), append(hooks, k.webhook), append(origs, k.id)
			corr[k.event] = k.corr
			tracing.LinkFrom(ctx, k.origin)
		}
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	var tasks []wire.Task
	if len(origs) > 0 {
		if _, err := tx.Exec(ctx, lockEntriesSQL, origs); err != nil {
			return 0, false, fmt.Errorf("lock entries: %w", err)
		}
		rows, err := tx.Query(ctx, insertBatchRetriesSQL, c.tenantID, c.priority, c.id, now, events, hooks, origs)
		if err != nil {
			return 0, false, fmt.Errorf("create retries: %w", err)
		}
		var keys []string
		tasks, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (wire.Task, error) {
			t := wire.Task{TenantID: c.tenantID, Priority: c.priority, Attempt: 1, CreatedAt: now}
			var orig uuid.UUID
			var key string
			err := row.Scan(&t.DeliveryID, &t.EventID, &t.WebhookID, &orig, &key)
			t.CorrelationID = corr[t.EventID]
			keys = append(keys, key)
			return t, err
		})
		if err != nil {
			return 0, false, fmt.Errorf("create retries: %w", err)
		}
		if err := lowerOrderFloors(ctx, tx, keys, tasks); err != nil {
			return 0, false, err
		}
	}
	last := cands[len(cands)-1].id
	if _, err := tx.Exec(ctx, checkpointSQL, c.id, r.ID, last, len(tasks), len(cands)-len(tasks)); err != nil {
		return 0, false, fmt.Errorf("checkpoint: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, false, fmt.Errorf("commit chunk: %w", err)
	}
	c.last = &last
	r.dispatch.Enqueue(tasks...)
	metrics.BatchReenqueued.Add(float64(len(tasks)))
	return len(cands), true, nil
}

const failBatchSQL = `UPDATE batch_operations SET state = 'failed', error = $2, finished_at = now()
WHERE id = $1 AND state IN ('pending', 'running')`

func (r *Runner) fail(ctx context.Context, id uuid.UUID, reason string) {
	if _, err := r.pool.Exec(ctx, failBatchSQL, id, reason); err != nil {
		r.log.Warn("batch operation not marked failed", "batch_operation_id", id.String(), "error", err)
		return
	}
	r.log.Error("batch operation failed", "batch_operation_id", id.String(), "reason", reason)
}

// trackSQL brings the succeeded and failed counts of the open batches
// (running, and cancelled with retries still under way, whose enqueued
// retries go on) up to date, and completes a running batch once every
// retry it enqueued has an outcome.
//
// The counts are the sums of the batch's counters in batch_outcomes, to
// which each statement that ends retries adds them (the trigger
// deliveries_batch_outcomes, migration 29): a few rows a batch, never
// its deliveries. The open batches are found through two partial indexes
// (batch_operations_open_idx, batch_operations_cancelled_idx), and
// updated by primary key whatever the estimates (= ANY of their array),
// not by reading every batch ever made.
const trackSQL = `WITH open AS (
    SELECT id FROM batch_operations WHERE state = 'running'
    UNION ALL
    SELECT id FROM batch_operations WHERE state = 'cancelled' AND succeeded + failed < processed
), outcomes AS (
    SELECT o.id, coalesce(sum(c.succeeded), 0) AS succeeded, coalesce(sum(c.failed), 0) AS failed
    FROM open o LEFT JOIN batch_outcomes c ON c.batch_operation_id = o.id
    GROUP BY o.id
)
UPDATE batch_operations b SET succeeded = o.succeeded, failed = o.failed,
    state = CASE WHEN b.state = 'running' AND b.enqueued_all_at IS NOT NULL
                  AND o.succeeded + o.failed >= b.processed THEN 'completed' ELSE b.state END,
    finished_at = CASE WHEN b.state = 'running' AND b.enqueued_all_at IS NOT NULL
                  AND o.succeeded + o.failed >= b.processed THEN now() ELSE b.finished_at END
FROM outcomes o
WHERE b.id = ANY (ARRAY(SELECT id FROM open)) AND b.id = o.id AND (b.succeeded <> o.succeeded OR b.failed <> o.failed
    OR (b.state = 'running' AND b.enqueued_all_at IS NOT NULL AND o.succeeded + o.failed >= b.processed))
RETURNING b.id, b.state`

// openStatesSQL counts the batches waiting or running, through
// batch_operations_open_idx; batchStatesSQL counts them all, reading every
// batch ever made.
const (
	openStatesSQL  = `SELECT state, count(*) FROM batch_operations WHERE state IN ('pending', 'running') GROUP BY state`
	batchStatesSQL = `SELECT state, count(*) FROM batch_operations GROUP BY state`
)

// TrackOutcomes brings the succeeded and failed counts of open batches up
// to date, completes those whose retries all have an outcome, and refreshes
// the batch gauges: those of pending and running batches at every call,
// those of finished ones at most once every CountEvery.
func (r *Runner) TrackOutcomes(ctx context.Context) error {
	rows, err := r.pool.Query(ctx, trackSQL)
	if err != nil {
		return fmt.Errorf("track batch outcomes: %w", err)
	}
	var id uuid.UUID
	var state string
	_, err = pgx.ForEachRow(rows, []any{&id, &state}, func() error {
		if state == "completed" {
			r.log.Info("batch operation completed", "batch_operation_id", id.String())
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("track batch outcomes: %w", err)
	}
	all := time.Since(r.countedAt) >= r.CountEvery
	query, counts := openStatesSQL, map[string]int{"pending": 0, "running": 0}
	if all {
		query, counts = batchStatesSQL, map[string]int{"pending": 0, "running": 0, "completed": 0, "cancelled": 0, "failed": 0}
	}
	rows, err = r.pool.Query(ctx, query)
	if err != nil {
		return fmt.Errorf("count batch operations: %w", err)
	}
	var n int
	if _, err := pgx.ForEachRow(rows, []any{&state, &n}, func() error { counts[state] = n; return nil }); err != nil {
		return fmt.Errorf("count batch operations: %w", err)
	}
	for s, n := range counts {
		metrics.BatchOperations.WithLabelValues(s).Set(float64(n))
	}
	if all {
		r.countedAt = time.Now()
	}
	return nil
}
