package dlq

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/hookline/hookline/internal/metrics"
	"github.com/hookline/hookline/internal/tracing"
	"github.com/hookline/hookline/internal/webhook"
	"github.com/hookline/hookline/internal/wire"
)

// How the runner runs a recovery (see recover.go): a snapshot fixes its
// sets, then chunks give the failed deliveries their retries (the chunks
// of a batch retry, on the recovery's set) and, once those are done, the
// missed events their deliveries.

// recoverChunkSQL selects a chunk of a recovery's failed deliveries, as
// chunkSQL does a batch retry's.
const recoverChunkSQL = chunkSelect + recoveryFailedWhere + chunkOrder

// selection is the statement and arguments selecting up to limit
// deliveries of c to retry after its checkpoint.
func (c *claim) selection(limit int) (string, pgx.NamedArgs) {
	if c.kind == KindRecover {
		args := c.recovery.args(c.tenantID, c.startedAt)
		args["upto"], args["after"], args["limit"] = *c.upto, c.last, limit
		return recoverChunkSQL, args
	}
	args := c.filter.Args(c.tenantID)
	args["started_at"], args["upto"], args["after"], args["limit"] = c.startedAt, *c.upto, c.last, limit
	return chunkSQL, args
}

// retryingFailed reports whether c still has failed deliveries to walk: a
// recovery's first phase (a batch retry has no other).
func (c *claim) retryingFailed() bool {
	return c.upto != nil && (c.last == nil || *c.last != *c.upto)
}

const snapshotRecoverySQL = `UPDATE batch_operations SET upto_delivery_id = $3, upto_event_id = $4, total = $5,
    recovery = recovery || jsonb_build_object('failed', $6::int, 'missed', $7::int),
    enqueued_all_at = CASE WHEN $5 = 0 THEN now() END,
    state = CASE WHEN $5 = 0 THEN 'completed' ELSE state END,
    finished_at = CASE WHEN $5 = 0 THEN now() END
WHERE id = $1 AND claimed_by = $2 AND state = 'running'`

// snapshotRecovery fixes what the recovery covers, as it is when it
// starts: its total, the counts in its recovery, and the last failed
// delivery and missed event it walks to. It reports whether there was
// nothing to do (the recovery is then completed).
func (r *Runner) snapshotRecovery(ctx context.Context, c *claim) (bool, error) {
	failed, missed, lastFailed, lastMissed, err := countRecovery(ctx, r.pool, r.filterCheck(), c.tenantID, c.recovery, c.startedAt)
	if err != nil {
		return false, err
	}
	var nFailed, nMissed *int
	if c.recovery.includes(IncludeFailed) {
		nFailed = &failed
	}
	if c.recovery.includes(IncludeMissed) {
		nMissed = &missed
	}
	tag, err := r.pool.Exec(ctx, snapshotRecoverySQL, c.id, r.ID, lastFailed, lastMissed, failed+missed, nFailed, nMissed)
	if err != nil {
		return false, fmt.Errorf("fix the recovery's sets: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return false, errLost
	}
	c.upto, c.uptoEvent = lastFailed, lastMissed
	c.recovery.Failed, c.recovery.Missed = nFailed, nMissed
	return failed+missed == 0, nil
}

const endFailedSQL = `UPDATE batch_operations SET last_delivery_id = upto_delivery_id, heartbeat_at = now()
WHERE id = $1 AND claimed_by = $2 AND state = 'running'`

// endFailed moves a recovery's checkpoint past its failed deliveries: the
// next chunk starts on the missed events.
func (r *Runner) endFailed(ctx context.Context, tx pgx.Tx, c *claim) (int, bool, error) {
	if _, err := tx.Exec(ctx, endFailedSQL, c.id, r.ID); err != nil {
		return 0, false, fmt.Errorf("checkpoint: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, false, fmt.Errorf("commit chunk: %w", err)
	}
	c.last = c.upto
	return 0, true, nil
}

// lockMissedSQL is held by a chunk that gives missed events of webhook $1
// their deliveries, until it commits: two recoveries of one webhook take
// turns, and insertMissedSQL, a statement after the lock, sees what the
// one before committed. No unique index is needed, so none spans the
// history.
const lockMissedSQL = `SELECT pg_advisory_xact_lock(hashtext('hookline.recover_missed'), hashtext($1::text))`

// insertMissedSQL gives each missed event one delivery to the webhook,
// unless it has one: one made meanwhile (the webhook's own, or another
// recovery's, committed before this chunk took lockMissedSQL).
var insertMissedSQL = `INSERT INTO deliveries (id, tenant_id, event_id, webhook_id, priority, batch_operation_id, created_at, order_key)
SELECT uuidv7(), $1, e.id, w.id, $2, $3, $4, ` + webhook.OrderKeySQL("w", "e.event_type") + `
FROM unnest($5::uuid[]) AS t(event_id) JOIN events e ON e.id = t.event_id JOIN webhooks w ON w.id = $6
WHERE NOT EXISTS (SELECT 1 FROM deliveries x WHERE x.event_id = e.id AND x.webhook_id = w.id)
RETURNING id, event_id, coalesce(order_key, '')`

const missedCheckpointSQL = `UPDATE batch_operations SET last_event_id = $3, processed = processed + $4,
    skipped = skipped + $5, heartbeat_at = now()
WHERE id = $1 AND claimed_by = $2 AND state = 'running'`

// missedChunk gives up to limit missed events of the recovery their
// deliveries in tx, with the checkpoint, and enqueues them after the
// commit. While the webhook is disabled again or deleted, they are
// skipped.
func (r *Runner) missedChunk(ctx context.Context, tx pgx.Tx, c *claim, limit int) (int, bool, error) {
	page, err := r.missedPage(ctx, tx, c, limit)
	if err != nil {
		return 0, false, err
	}
	if len(page) == 0 {
		if _, err := tx.Exec(ctx, finishEnqueueSQL, c.id, r.ID); err != nil {
			return 0, false, fmt.Errorf("finish recovery: %w", err)
		}
		return 0, false, tx.Commit(ctx)
	}
	var usable bool
	var expr string
	if err := tx.QueryRow(ctx, hookFilterSQL, c.recovery.WebhookID).Scan(&usable, &expr); err != nil {
		return 0, false, fmt.Errorf("read the webhook's filter: %w", err)
	}
	// Events the filter refuses are not in the recovery's set (its count
	// applied the filter too); those of the set it cannot deliver now are
	// skipped.
	check := r.filterCheck()
	var ids []uuid.UUID
	corr := map[uuid.UUID]string{}
	for _, ev := range page {
		if check.passesMissed(expr, ev, c.recovery.WebhookID) {
			ids = append(ids, ev.id)
			corr[ev.id] = ev.corr
			tracing.LinkFrom(ctx, tracing.Parent{TraceParent: ev.traceParent, TraceState: ev.traceState})
		}
	}
	var tasks []wire.Task
	if usable {
		if tasks, err = r.insertMissed(ctx, tx, c, ids, corr); err != nil {
			return 0, false, err
		}
	}
	last := page[len(page)-1].id
	if _, err := tx.Exec(ctx, missedCheckpointSQL, c.id, r.ID, last, len(tasks), len(ids)-len(tasks)); err != nil {
		return 0, false, fmt.Errorf("checkpoint: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, false, fmt.Errorf("commit chunk: %w", err)
	}
	c.lastEvent = &last
	r.dispatch.Enqueue(tasks...)
	metrics.BatchReenqueued.Add(float64(len(tasks)))
	return len(page), true, nil
}

// missedPage reads the next missed events of c after its checkpoint; none
// when it covers none.
func (r *Runner) missedPage(ctx context.Context, tx pgx.Tx, c *claim, limit int) ([]missedEvent, error) {
	if c.uptoEvent == nil {
		return nil, nil
	}
	args := c.recovery.args(c.tenantID, c.startedAt)
	args["after"], args["upto"], args["limit"] = c.lastEvent, *c.uptoEvent, limit
	rows, err := tx.Query(ctx, missedPageSQL, pageMode, args)
	if err != nil {
		return nil, fmt.Errorf("select missed events: %w", err)
	}
	page, err := scanMissed(rows)
	if err != nil {
		return nil, fmt.Errorf("select missed events: %w", err)
	}
	return page, nil
}

func (r *Runner) insertMissed(ctx context.Context, tx pgx.Tx, c *claim, ids []uuid.UUID, corr map[uuid.UUID]string) ([]wire.Task, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	hook := c.recovery.WebhookID
	if _, err := tx.Exec(ctx, lockMissedSQL, hook); err != nil {
		return nil, fmt.Errorf("deliver missed events: %w", err)
	}
	rows, err := tx.Query(ctx, insertMissedSQL, c.tenantID, c.priority, c.id, now, ids, hook)
	if err != nil {
		return nil, fmt.Errorf("deliver missed events: %w", err)
	}
	var keys []string
	tasks, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (wire.Task, error) {
		t := wire.Task{TenantID: c.tenantID, WebhookID: hook, Priority: c.priority, Attempt: 1, CreatedAt: now}
		var key string
		err := row.Scan(&t.DeliveryID, &t.EventID, &key)
		t.CorrelationID = corr[t.EventID]
		keys = append(keys, key)
		return t, err
	})
	if err != nil {
		return nil, fmt.Errorf("deliver missed events: %w", err)
	}
	if err := lowerOrderFloors(ctx, tx, keys, tasks); err != nil {
		return nil, err
	}
	return tasks, nil
}
