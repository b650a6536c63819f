package retention

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/hookline/hookline/internal/eventlog"
)

// pruneDeliveries deletes the old deliveries that are done with from the
// partitions of deliveries that are not weeks (the weeks go whole, see
// dropDeliveryPartitions), and those a dropped week kept once they are.
func (j *Job) pruneDeliveries(ctx context.Context, c cutoffs, rep *Report) error {
	names, err := j.rowPartitions(ctx, "deliveries")
	if err != nil {
		return err
	}
	queries := make([]string, len(names))
	for i, name := range names {
		queries[i] = fmt.Sprintf(pruneDeliveriesSQL, name)
	}
	return j.fromFloor(ctx, "deliveries", revisitDeliveriesSQL, queries, c.now, c.attempts, &rep.Deliveries)
}

// rowPartitions lists the partitions of parent that are not weeks.
func (j *Job) rowPartitions(ctx context.Context, parent string) ([]string, error) {
	return j.partitionNames(ctx, parent, rowPartitionsSQL, parent)
}

// pruneEvents deletes the old events left without deliveries from the
// partitions of the event log that are not weeks, holding off the retries
// and recoveries that could give one a delivery meanwhile
// (eventlog.HoldSQL), a page at a time.
func (j *Job) pruneEvents(ctx context.Context, c cutoffs, rep *Report) error {
	names, err := j.rowPartitions(ctx, "events")
	if err != nil {
		return err
	}
	for _, name := range names {
		if err := j.byLockedPages(ctx, eventlog.LockDropsSQL, fmt.Sprintf(pruneEventsSQL, name), c.attempts, &rep.Events); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}

// prunePayloads clears the payloads of old, fully delivered events.
func (j *Job) prunePayloads(ctx context.Context, c cutoffs, rep *Report) error {
	return j.fromFloor(ctx, "payloads", revisitPayloadsSQL, []string{prunePayloadsSQL}, c.now, c.payloads, &rep.Payloads)
}

// pruneSessions deletes the portal sessions over for a day.
func (j *Job) pruneSessions(ctx context.Context, _ cutoffs, rep *Report) error {
	return j.untilNone(ctx, &rep.PortalSessions, pruneSessionsSQL, j.cfg.BatchSize)
}

// prunePauses deletes the webhook pauses that ended before the attempt
// cutoff.
func (j *Job) prunePauses(ctx context.Context, c cutoffs, rep *Report) error {
	return j.untilNone(ctx, &rep.Pauses, prunePausesSQL, c.attempts, j.cfg.BatchSize)
}

// pruneRollups deletes the rollups older than the attempt cutoff.
func (j *Job) pruneRollups(ctx context.Context, c cutoffs, rep *Report) error {
	for _, q := range []string{pruneDeliveryRollupsSQL, pruneAttemptRollupsSQL, pruneDeadLetterRollupsSQL} {
		if err := j.untilNone(ctx, &rep.Rollups, q, c.attempts, j.cfg.BatchSize); err != nil {
			return err
		}
	}
	return nil
}

// untilNone runs a deleting statement that removes a page at a time until
// it removes nothing, adding what it removed to n.
func (j *Job) untilNone(ctx context.Context, n *int64, query string, args ...any) error {
	for {
		tag, err := j.pool.Exec(ctx, query, args...)
		if err != nil {
			return err
		}
		*n += tag.RowsAffected()
		if tag.RowsAffected() == 0 {
			return nil
		}
	}
}

// revisitEvery is how often a step looks again at the rows it kept: they
// go once resolved or finished, which is rare, so they may wait a day.
const revisitEvery = 24 * time.Hour

// fromFloor runs a step that reads each old row once: the batch
// statements queries (one for each table the step reads) over the rows
// created before cutoff from the step's floor on, which it moves to the
// cutoff's id once they read them all; and,
// once every revisitEvery (by now, the run's time), the batch statement
// revisit over the rows the step kept (retention_kept). Rows with an id
// below the floor were handled: removed, or kept and listed.
func (j *Job) fromFloor(ctx context.Context, step, revisit string, queries []string, now, cutoff time.Time, n *int64) error {
	bound := idBound(cutoff)
	var floor uuid.UUID
	var revisited *time.Time
	if err := j.pool.QueryRow(ctx, floorSQL, step).Scan(&floor, &revisited); err != nil {
		return fmt.Errorf("read the floor: %w", err)
	}
	if revisited == nil || now.Sub(*revisited) >= revisitEvery {
		if err := j.pages(ctx, "", revisit, uuid.Nil, bound, cutoff, n); err != nil {
			return fmt.Errorf("kept rows: %w", err)
		}
		if _, err := j.pool.Exec(ctx, revisitedSQL, step, now); err != nil {
			return fmt.Errorf("record the look at kept rows: %w", err)
		}
	}
	for _, query := range queries {
		if err := j.pages(ctx, "", query, floor, bound, cutoff, n); err != nil {
			return err
		}
	}
	if _, err := j.pool.Exec(ctx, setFloorSQL, step, bound); err != nil {
		return fmt.Errorf("move the floor: %w", err)
	}
	return nil
}

// byLockedPages runs a batch statement (see sql.go) over the rows created
// before cutoff, a page at a time in id order, adding the rows it changed
// to n, until a page comes back empty. Each page is its own transaction,
// so no lock is held longer than one page takes, and runs lock first,
// unless it is empty: the page's statement, taking its snapshot after,
// sees what the transactions the lock waited for committed.
func (j *Job) byLockedPages(ctx context.Context, lock, query string, cutoff time.Time, n *int64) error {
	return j.pages(ctx, lock, query, uuid.Nil, idBound(cutoff), cutoff, n)
}

// pages runs the pages of a batch statement with ids in (after, bound).
func (j *Job) pages(ctx context.Context, lock, query string, after, bound uuid.UUID, cutoff time.Time, n *int64) error {
	for {
		var last *uuid.UUID
		var changed int64
		if err := j.page(ctx, lock, query, after, bound, cutoff).Scan(&last, &changed); err != nil {
			return fmt.Errorf("page after %s: %w", after, err)
		}
		*n += changed
		if last == nil {
			return nil
		}
		after = *last
	}
}

// page runs one page of a batch statement, after lock in the same
// transaction when there is one.
func (j *Job) page(ctx context.Context, lock, query string, after, bound uuid.UUID, cutoff time.Time) pgx.Row {
	if lock == "" {
		return j.pool.QueryRow(ctx, query, after, bound, j.cfg.BatchSize, cutoff)
	}
	b := &pgx.Batch{}
	b.Queue(lock)
	b.Queue(query, after, bound, j.cfg.BatchSize, cutoff)
	return &batchRow{results: j.pool.SendBatch(ctx, b)}
}

// batchRow is the row of the last statement of a two-statement batch.
type batchRow struct{ results pgx.BatchResults }

func (r *batchRow) Scan(dest ...any) error {
	defer r.results.Close()
	if _, err := r.results.Exec(); err != nil {
		return err
	}
	if err := r.results.QueryRow().Scan(dest...); err != nil {
		return err
	}
	return r.results.Close()
}

// pruneDefaultPartition deletes the old rows of the default attempt
// partition, but those of kept deliveries, a page at a time.
func (j *Job) pruneDefaultPartition(ctx context.Context, c cutoffs, rep *Report) error {
	afterID, afterNumber := uuid.Nil, int32(0)
	for {
		var lastID *uuid.UUID
		var lastNumber *int32
		var deleted int64
		err := j.pool.QueryRow(ctx, pruneDefaultSQL, afterID, afterNumber, c.attempts, j.cfg.BatchSize).
			Scan(&lastID, &lastNumber, &deleted)
		if err != nil {
			return fmt.Errorf("page after %s/%d: %w", afterID, afterNumber, err)
		}
		rep.Attempts += deleted
		if lastID == nil || lastNumber == nil {
			return nil
		}
		afterID, afterNumber = *lastID, *lastNumber
	}
}

// idBound returns the smallest UUIDv7 of the millisecond t falls in: every
// UUIDv7 made in an earlier millisecond sorts below it, every other one at
// or above it. Postgres orders uuids byte by byte, so `id < idBound(t)`
// selects by the primary key the rows whose UUIDv7 id was made before t
// (to the millisecond). Times before 1970 give the nil UUID, below every
// UUIDv7.
func idBound(t time.Time) uuid.UUID {
	ms := t.UnixMilli()
	if ms < 0 {
		return uuid.Nil
	}
	var u uuid.UUID
	var ts [8]byte
	binary.BigEndian.PutUint64(ts[:], uint64(ms))
	copy(u[:6], ts[2:]) // 48 bits of unix milliseconds
	u[6] = 0x70         // version 7, then the lowest random bits
	return u
}
