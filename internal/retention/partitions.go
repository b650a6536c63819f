package retention

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// errBusy means a partition could not be locked in time; it is left for
// the next run.
var errBusy = errors.New("attempt log busy")

// partition is a daily partition of the attempt log, holding the attempts
// of the deliveries created in [lo, hi). lo is nil for a partition open
// below.
type partition struct {
	name string
	lo   *time.Time
	hi   time.Time
}

// dropPartitions drops every partition of the attempt log entirely older
// than the cutoff and than the oldest week of deliveries left (heldBack),
// after keeping the attempts its kept deliveries need. A partition whose
// lock is not obtained in time is left for the next run.
func (j *Job) dropPartitions(ctx context.Context, c cutoffs, rep *Report) error {
	cutoff, err := j.heldBack(ctx, c.attempts)
	if err != nil {
		return err
	}
	rows, err := j.pool.Query(ctx, oldPartitionsSQL, cutoff, lowerBoundPattern, upperBoundPattern)
	if err != nil {
		return fmt.Errorf("list attempt partitions: %w", err)
	}
	parts, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (partition, error) {
		var p partition
		err := row.Scan(&p.name, &p.lo, &p.hi)
		return p, err
	})
	if err != nil {
		return fmt.Errorf("list attempt partitions: %w", err)
	}
	return dropEach(ctx, j, "attempt partition", parts, func(p partition) string { return p.name },
		func(p partition) error { return j.dropPartition(ctx, p, rep) }, rep)
}

// dropEach drops each of parts with drop, oldest first. A partition whose
// lock is not obtained in time (errBusy) is left for the next run, with a
// warning naming its kind; the others are dropped whatever the errors of
// the rest, which it returns joined.
func dropEach[P any](ctx context.Context, j *Job, kind string, parts []P, name func(P) string, drop func(P) error, rep *Report) error {
	var errs []error
	for _, p := range parts {
		err := drop(p)
		switch {
		case errors.Is(err, errBusy):
			rep.PartitionsSkipped++
			j.log.Warn(kind+" left for the next run", "partition", name(p), "error", err)
		case err != nil:
			errs = append(errs, err)
			if ctx.Err() != nil {
				return errors.Join(errs...)
			}
		}
	}
	return errors.Join(errs...)
}

// dropPartition drops one partition in one transaction: it copies the
// attempts of the partition's kept deliveries into
// delivery_attempts_retained (without blocking anyone), then locks the
// attempt log for at most lockTimeout, copies what deliveries still in
// flight added meanwhile, and drops the partition. Readers never see an
// attempt twice: the copies appear when the partition disappears.
func (j *Job) dropPartition(ctx context.Context, p partition, rep *Report) error {
	tx, err := j.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("drop partition %s: %w", p.name, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit

	inFlight, err := j.inFlight(ctx, tx, p)
	if err != nil {
		return fmt.Errorf("drop partition %s: in-flight deliveries: %w", p.name, err)
	}
	var total int64
	if err := tx.QueryRow(ctx, fmt.Sprintf(countPartitionSQL, p.name)).Scan(&total); err != nil {
		return fmt.Errorf("drop partition %s: count: %w", p.name, err)
	}
	tag, err := tx.Exec(ctx, fmt.Sprintf(copyKeptSQL, p.name))
	if err != nil {
		return fmt.Errorf("drop partition %s: keep attempts: %w", p.name, err)
	}
	copied := tag.RowsAffected()

	if err := j.limitLockWait(ctx, tx); err != nil {
		return fmt.Errorf("drop partition %s: %w", p.name, err)
	}
	if _, err := tx.Exec(ctx, lockAttemptsSQL); err != nil {
		return fmt.Errorf("drop partition %s: %w", p.name, lockError(err))
	}
	if len(inFlight) > 0 {
		tag, err := tx.Exec(ctx, fmt.Sprintf(copyDeliveriesSQL, p.name), inFlight)
		if err != nil {
			return fmt.Errorf("drop partition %s: keep attempts in flight: %w", p.name, err)
		}
		copied += tag.RowsAffected()
	}
	if _, err := tx.Exec(ctx, dropPartitionSQL, p.name); err != nil {
		return fmt.Errorf("drop partition %s: %w", p.name, lockError(err))
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("drop partition %s: commit: %w", p.name, err)
	}
	rep.AttemptPartitions++
	rep.AttemptsRetained += copied
	rep.Attempts += max(total-copied, 0)
	return nil
}

// inFlight returns the partition's deliveries still pending or retrying.
// No delivery can join them (a new one is created now, not on an old
// day), so these are all that can add attempts to the partition until it
// is locked.
func (j *Job) inFlight(ctx context.Context, tx pgx.Tx, p partition) ([]uuid.UUID, error) {
	// Ids and creation times are made a moment apart, and not always by
	// the same clock; a day either side is ample.
	from := uuid.Nil
	if p.lo != nil {
		from = idBound(p.lo.Add(-24 * time.Hour))
	}
	rows, err := tx.Query(ctx, inFlightSQL, from, idBound(p.hi.Add(24*time.Hour)), p.lo, p.hi)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
}

// Postgres error codes of lock waits that gave up.
const (
	lockNotAvailable = "55P03"
	deadlockDetected = "40P01"
)

// lockError marks as errBusy the errors of a lock not obtained in time, or
// of a deadlock Postgres broke by cancelling this transaction.
func lockError(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == lockNotAvailable || pgErr.Code == deadlockDetected) {
		return fmt.Errorf("%w: %w", errBusy, err)
	}
	return err
}
