package dlq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookline/hookline/internal/metrics"
	"github.com/hookline/hookline/internal/supervisor"
	"github.com/hookline/hookline/internal/unfinished"
	"github.com/hookline/hookline/internal/wire"
)

// Sweeper sweeps up what a lost message left behind. It records exhausted
// deliveries whose dead letter never reached the queue (the worker lost
// the broker between exhausting and publishing), and it hands back to the
// outbox relay the deliveries whose message was lost after the broker
// confirmed it: returned for want of a queue before publishes were
// mandatory, purged, or on a queue deleted by hand. Such a delivery is
// pending or retrying, marked enqueued, and untouched long after it was
// due; nothing else would ever send it.
type Sweeper struct {
	pool     *pgxpool.Pool
	dispatch dispatcher
	log      *slog.Logger
	// Interval is how often exhausted deliveries are swept (default a
	// minute), from the sweep's floor, and FullInterval how often from
	// the start (default an hour); Age how long after exhausting (default
	// a minute).
	Interval     time.Duration
	FullInterval time.Duration
	Age          time.Duration
	// LostInterval is how often lost deliveries are looked for (default
	// ten minutes: the query reads every webhook's unfinished floor, and
	// the deliveries of those older than LostAge), LostAge how long one
	// must have been due, enqueued and
	// unchanged (default an hour: far longer than a message waits in any
	// queue).
	LostInterval time.Duration
	LostAge      time.Duration
}

// NewSweeper returns a sweeper with the default timings.
func NewSweeper(pool *pgxpool.Pool, d dispatcher, log *slog.Logger) *Sweeper {
	return &Sweeper{pool: pool, dispatch: d, log: log, Interval: time.Minute, FullInterval: time.Hour, Age: time.Minute,
		LostInterval: 10 * time.Minute, LostAge: time.Hour}
}

// sweepSQL records up to 1,000 exhausted deliveries whose dead letter is
// over $1 late, oldest first, and moves the sweep's floor; with $2 it
// reads from the start instead of the floor.
//
// deliveries_unrecorded_idx holds, by completed_at, the exhausted
// deliveries not yet recorded; an entry stays until a vacuum after its
// delivery was recorded, normally a moment after it was exhausted, so the
// index holds nearly every exhausted delivery in the table's history.
// dead_letter_sweep_floor keeps a time at or before every unrecorded one:
// the sweep reads the index from there. The floor moves to the oldest
// delivery left unrecorded (one another transaction holds, or this sweep
// left for the next), and never past sweepFloorLag before now: a
// delivery's completed_at is the start of the transaction that exhausted
// it, which commits well within that; a transaction that takes longer
// (nothing bounds the worker's) is found by the pass from the start, once
// every FullInterval. The update finds the deliveries it locked by primary
// key, whatever the estimates (= ANY of their array); naming their state
// again would let the planner read the index whole instead (as
// wire.UnfinishedByKey explains), and a locked exhausted delivery stays
// exhausted.
var sweepSQL = fmt.Sprintf(`WITH cur AS (
    SELECT CASE WHEN $2::boolean THEN '-infinity'
                ELSE coalesce((SELECT floor FROM dead_letter_sweep_floor), '-infinity') END AS floor
), due AS (
    SELECT id FROM deliveries
    WHERE status = 'exhausted' AND dead_lettered_at IS NULL
      AND completed_at >= (SELECT floor FROM cur) AND completed_at < now() - $1::interval
    ORDER BY completed_at
    LIMIT 1000
    FOR UPDATE SKIP LOCKED
), swept AS (
    UPDATE deliveries d SET dead_lettered_at = now()
    FROM events e, due
    WHERE d.id = ANY (ARRAY(SELECT id FROM due)) AND d.id = due.id AND d.dead_lettered_at IS NULL AND e.id = d.event_id
    RETURNING `+exhaustedColumns+`
), next AS (
    SELECT least(
        (SELECT min(completed_at) FROM deliveries
         WHERE status = 'exhausted' AND dead_lettered_at IS NULL AND completed_at >= (SELECT floor FROM cur)
           AND id NOT IN (SELECT id FROM swept)),
        now() - interval '%[1]d milliseconds') AS floor
), moved AS (
    INSERT INTO dead_letter_sweep_floor AS f (floor) SELECT floor FROM next
    ON CONFLICT (one) DO UPDATE SET floor = excluded.floor WHERE f.floor < excluded.floor
)
SELECT * FROM swept`, sweepFloorLag.Milliseconds())

// sweepFloorLag is how far before now the sweep's floor stops at the
// latest. It exceeds the sweep's Age, so that a delivery not yet due is
// never behind the floor.
const sweepFloorLag = 5 * time.Minute

// lostBound is the SQL id bound of the lost sweep ($1 its age): a lost
// delivery was created (and its id taken) before it was enqueued, over
// the age ago; a minute's margin is added.
const lostBound = `uuidv7_floor(now() - $1::interval + interval '1 minute')`

// lostWebhooksSQL moves the unfinished floor of each webhook whose floor
// is before lostBound (package unfinished) and returns those whose floor
// stays before it: the webhooks with an unfinished delivery created over
// the age ago, the only ones that can have lost one. A webhook whose
// floor moves to FloorLag before now is left out until its floor is the
// age old again, so most webhooks are looked at once per age.
var lostWebhooksSQL = `WITH ` + unfinished.AdvanceFloors(lostBound) + `
SELECT n.webhook_id, w.tenant_id FROM floors n JOIN webhooks w ON w.id = n.webhook_id
WHERE n.floor < ` + lostBound + `
ORDER BY n.webhook_id`

// lostSQL clears the enqueued mark of webhook $2's (of tenant $3) lost
// deliveries, up to $4, so that the outbox relay publishes them again,
// due now: the relay's passes read from shortly before their last one on
// (package duescan), and only one an hour from the oldest due time. It
// leaves parked deliveries alone (they wait in Postgres, not in a queue,
// and a waker or whoever finishes the one before publishes them) and any
// delivery something touched within the age (a deferral, a park, a
// wake-up, an attempt).
//
// It reads the webhook's unfinished deliveries through its unfinished
// span, which it moves first (unfinished.AdvanceFloor): the old ones by
// id, and the range from the span's head to lostBound. The old unfinished
// delivery that keeps the webhook in the sweep (retrying for a day,
// parked while the webhook is paused) holds its floor, and a read from
// the floor would read every entry deliveries_unfinished_idx kept since
// it, at every sweep. It skips the deliveries another transaction holds
// (a worker recording an attempt, another dlq process sweeping) and waits
// for none. The update finds them by primary key, whatever the estimates
// (= ANY of their array), naming their state so that no other index
// serves (wire.UnfinishedByKey).
var lostSQL = `WITH ` + unfinished.AdvanceFloor("$2", "$3") + `, lost AS MATERIALIZED (
    SELECT id, enqueued_at FROM deliveries
    WHERE id = ANY (ARRAY(
            SELECT id FROM deliveries
            WHERE webhook_id = $2 AND status IN ('pending', 'retrying')
              AND id >= (SELECT head FROM span) AND id < ` + lostBound + `
            UNION ALL
            SELECT unnest((SELECT behind FROM span)::uuid[])))
      AND webhook_id = $2 AND ` + wire.UnfinishedByKey("status") + ` AND parked_at IS NULL
      AND enqueued_at < now() - $1::interval AND updated_at < now() - $1::interval
      AND coalesce(next_attempt_at, created_at) < now() - $1::interval
    ORDER BY id
    LIMIT $4
    FOR UPDATE SKIP LOCKED
)
UPDATE deliveries d SET enqueued_at = NULL, next_attempt_at = now(), updated_at = now()
FROM lost
WHERE d.id = ANY (ARRAY(SELECT id FROM lost)) AND d.id = lost.id AND ` + wire.UnfinishedByKey("d.status") + ` AND d.parked_at IS NULL
  AND d.enqueued_at < now() - $1::interval AND d.updated_at < now() - $1::interval
RETURNING d.id, d.tenant_id, d.attempt_count, lost.enqueued_at`

// lostPerSweep is how many lost deliveries one sweep hands back at most.
const lostPerSweep = 1000

// Run sweeps until ctx ends: exhausted deliveries every Interval, lost
// ones every LostInterval.
func (s *Sweeper) Run(ctx context.Context) error {
	lastLost, lastFull := time.Now(), time.Time{}
	return supervisor.Every(ctx, s.Interval, s.Interval, func(ctx context.Context) {
		full := time.Since(lastFull) >= s.FullInterval
		if err := s.sweepExhausted(ctx, full); err != nil && ctx.Err() == nil {
			s.log.Warn("dead-letter sweep failed", "error", err)
		} else if full {
			lastFull = time.Now()
		}
		if time.Since(lastLost) < s.LostInterval {
			return
		}
		lastLost = time.Now()
		if err := s.sweepLost(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("lost delivery sweep failed", "error", err)
		}
	})
}

// Sweep runs each sweep once: exhausted deliveries (from the start), then
// lost ones.
func (s *Sweeper) Sweep(ctx context.Context) error {
	if err := s.sweepExhausted(ctx, true); err != nil {
		return err
	}
	return s.sweepLost(ctx)
}

// sweepLost hands the lost deliveries, up to lostPerSweep, back to the
// outbox relay, one log line each: one statement finds the webhooks that
// can have any, then one per webhook, each its own transaction. It
// returns the errors of the webhooks that failed, after trying the rest.
func (s *Sweeper) sweepLost(ctx context.Context) error {
	rows, err := s.pool.Query(ctx, lostWebhooksSQL, s.LostAge)
	if err != nil {
		return fmt.Errorf("sweep lost deliveries: %w", err)
	}
	type webhookOf struct{ webhook, tenant uuid.UUID }
	hooks, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (webhookOf, error) {
		var h webhookOf
		return h, row.Scan(&h.webhook, &h.tenant)
	})
	if err != nil {
		return fmt.Errorf("sweep lost deliveries: %w", err)
	}
	left := lostPerSweep
	var errs []error
	for _, h := range hooks {
		if left == 0 || ctx.Err() != nil {
			break
		}
		// A webhook that fails does not keep the sweep from the ones after it.
		n, err := s.sweepLostOf(ctx, h.webhook, h.tenant, left)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		left -= n
	}
	return errors.Join(errs...)
}

// sweepLostOf hands up to limit lost deliveries of webhook back to the
// outbox relay and returns how many.
func (s *Sweeper) sweepLostOf(ctx context.Context, webhook, tenant uuid.UUID, limit int) (int, error) {
	rows, err := s.pool.Query(ctx, lostSQL, s.LostAge, webhook, tenant, limit)
	if err != nil {
		return 0, fmt.Errorf("sweep lost deliveries of webhook %s: %w", webhook, err)
	}
	var id, tenantID uuid.UUID
	var attempts int
	var enqueuedAt time.Time
	n, err := pgx.ForEachRow(rows, []any{&id, &tenantID, &attempts, &enqueuedAt}, func() error {
		s.log.Warn("delivery enqueued but never taken: handed back to the outbox relay", "delivery_id", id.String(),
			"tenant_id", tenantID.String(), "attempt", attempts+1, "enqueued_at", enqueuedAt.UTC().Format(time.RFC3339))
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("sweep lost deliveries of webhook %s: %w", webhook, err)
	}
	metrics.LostDeliveriesResent.Add(float64(n.RowsAffected()))
	return int(n.RowsAffected()), nil
}

// sweepExhausted records, with their owner notifications, the exhausted
// deliveries whose dead letter is over Age late, up to 1,000 at a time,
// read from the sweep's floor or, when full, from the start.
func (s *Sweeper) sweepExhausted(ctx context.Context, full bool) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit
	rows, err := tx.Query(ctx, sweepSQL, s.Age, full)
	if err != nil {
		return err
	}
	swept, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (exhausted, error) {
		var x exhausted
		return x, row.Scan(x.fields()...)
	})
	if err != nil {
		return err
	}
	var tasks []wire.Task
	for _, x := range swept {
		t, err := notifyExhausted(ctx, tx, s.log, x)
		if err != nil {
			return err
		}
		tasks = append(tasks, t...)
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	s.dispatch.Enqueue(tasks...)
	if n := len(swept); n > 0 {
		metrics.DeadLettered.WithLabelValues("swept").Add(float64(n))
		s.log.Info("recorded exhausted deliveries whose dead letter was lost", "deliveries", n)
	}
	return nil
}
