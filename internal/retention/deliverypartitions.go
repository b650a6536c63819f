package retention

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// dropDeliveryPartitions drops every week of deliveries entirely older
// than the cutoff, and deliveries_before once it is. The deliveries still
// in flight, the exhausted ones and the retries move to the default
// partition first when they are few (moveAtMost); when they are more, the
// week is swapped for a partition of them, named after it with _kept,
// copied before the lock (see the functions in migrations 33, 34 and 37).
// pruneDeliveries deletes them there once they are done with. A _kept
// partition goes the same way once it keeps at most moveAtMost. A week
// whose lock is not obtained in time is left for the next run.
func (j *Job) dropDeliveryPartitions(ctx context.Context, c cutoffs, rep *Report) error {
	// Weeks a run detached and could not drop after.
	if _, err := j.pool.Exec(ctx, dropDetachedSQL); err != nil {
		return fmt.Errorf("drop detached weeks of deliveries: %w", err)
	}
	names, err := j.oldWeeks(ctx, "deliveries", idBound(c.attempts))
	if err != nil {
		return err
	}
	return dropEach(ctx, j, "delivery partition", names, func(name string) string { return name },
		func(name string) error { return j.dropDeliveryPartition(ctx, name, rep) }, rep)
}

// dropDeliveryPartition detaches one week in one transaction, waiting at
// most lockTimeout for the lock of deliveries, which it holds until the
// week's kept deliveries are in the default partition or the week's
// partition of them is attached; then drops it in another, holding no
// lock but the detached table's while its files are removed. A week with
// many to keep has its partition of them prepared first, in a transaction
// of its own, so that its foreign keys hold the writers of the tables they
// refer to (the worker's attempt records among them) only until that
// commits, not through the wait for the lock.
func (j *Job) dropDeliveryPartition(ctx context.Context, name string, rep *Report) error {
	if err := j.prepareDeliverySwap(ctx, name); err != nil {
		return err
	}
	tx, err := j.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("drop delivery partition %s: %w", name, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit

	if err := j.limitLockWait(ctx, tx); err != nil {
		return fmt.Errorf("drop delivery partition %s: %w", name, err)
	}
	var kept *int64
	if err := tx.QueryRow(ctx, retireDeliveryPartitionSQL, name, j.moveAtMost).Scan(&kept); err != nil {
		return fmt.Errorf("drop delivery partition %s: %w", name, lockError(err))
	}
	if kept == nil {
		return nil // a partition of kept deliveries, left as it is
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("drop delivery partition %s: commit: %w", name, err)
	}
	rep.DeliveryPartitions++
	rep.DeliveriesKept += *kept
	if _, err := j.pool.Exec(ctx, dropDetachedSQL); err != nil {
		return fmt.Errorf("drop delivery partition %s, detached: %w", name, err)
	}
	return nil
}

// oldWeeks lists the range partitions of parent whose upper bound is at
// or below bound, oldest first.
func (j *Job) oldWeeks(ctx context.Context, parent string, bound uuid.UUID) ([]string, error) {
	return j.partitionNames(ctx, parent, oldWeeksSQL, bound, upperBoundPattern, parent)
}

// partitionNames runs query, which lists partitions of parent by name.
func (j *Job) partitionNames(ctx context.Context, parent, query string, args ...any) ([]string, error) {
	rows, err := j.pool.Query(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("list %s partitions: %w", parent, err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list %s partitions: %w", parent, err)
	}
	return names, nil
}

// heldBack returns cutoff, or the start of the oldest week of deliveries
// left when it is earlier: the attempts and the events of a week go once
// its deliveries went, so that a week left for the next run (its lock
// busy) keeps them too, and no drop of theirs copies the attempts or
// moves the events of deliveries about to go.
func (j *Job) heldBack(ctx context.Context, cutoff time.Time) (time.Time, error) {
	var oldest *uuid.UUID
	if err := j.pool.QueryRow(ctx, oldestWeekSQL, lowerBoundPattern).Scan(&oldest); err != nil {
		return time.Time{}, fmt.Errorf("oldest week of deliveries: %w", err)
	}
	if oldest == nil {
		return cutoff, nil
	}
	if t := idTime(*oldest); t.Before(cutoff) {
		return t, nil
	}
	return cutoff, nil
}

// idTime returns the millisecond a UUIDv7 was made in: idBound's inverse.
func idTime(id uuid.UUID) time.Time {
	var ms int64
	for _, b := range id[:6] { // 48 bits of unix milliseconds
		ms = ms<<8 | int64(b)
	}
	return time.UnixMilli(ms).UTC()
}

// prepareDeliverySwap makes, and commits, the partition of week name's
// kept deliveries when they are more than moveAtMost (see the function in
// migration 37); nothing otherwise.
func (j *Job) prepareDeliverySwap(ctx context.Context, name string) error {
	tx, err := j.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("prepare delivery partition %s: %w", name, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit
	if err := j.limitLockWait(ctx, tx); err != nil {
		return fmt.Errorf("prepare delivery partition %s: %w", name, err)
	}
	if _, err := tx.Exec(ctx, prepareDeliverySwapSQL, name, j.moveAtMost); err != nil {
		return fmt.Errorf("prepare delivery partition %s: %w", name, lockError(err))
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("prepare delivery partition %s: commit: %w", name, err)
	}
	return nil
}

// limitLockWait makes tx wait at most lockTimeout for each lock it takes
// from now on.
func (j *Job) limitLockWait(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL lock_timeout = %d", j.lockTimeout.Milliseconds()))
	return err
}
