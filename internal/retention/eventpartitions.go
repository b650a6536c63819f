package retention

import (
	"context"
	"fmt"

	"github.com/hookline/hookline/internal/eventlog"
)

// dropEventPartitions drops every week of the event log entirely older
// than the cutoff and than the oldest week of deliveries left (heldBack).
// The events that deliveries still name (in flight, or exhausted and kept
// for the DLQ) move to the default partition first,
// where pruneEvents deletes them once their last delivery is gone. A week
// whose lock is not obtained in time is left for the next run.
func (j *Job) dropEventPartitions(ctx context.Context, c cutoffs, rep *Report) error {
	cutoff, err := j.heldBack(ctx, c.attempts)
	if err != nil {
		return err
	}
	names, err := j.oldWeeks(ctx, "events", idBound(cutoff))
	if err != nil {
		return err
	}
	return dropEach(ctx, j, "event partition", names, func(name string) string { return name },
		func(name string) error { return j.dropEventPartition(ctx, name, rep) }, rep)
}

// dropEventPartition drops one week in one transaction. It first waits for
// the retries and recoveries adding deliveries to stored events, and keeps
// new ones off until it commits (eventlog.LockDropsSQL), so that the
// events it keeps are all those that deliveries name. The event log's own
// lock, which the drop takes last, is waited for at most lockTimeout.
func (j *Job) dropEventPartition(ctx context.Context, name string, rep *Report) error {
	tx, err := j.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("drop event partition %s: %w", name, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit

	if _, err := tx.Exec(ctx, eventlog.LockDropsSQL); err != nil {
		return fmt.Errorf("drop event partition %s: %w", name, err)
	}
	if err := j.limitLockWait(ctx, tx); err != nil {
		return fmt.Errorf("drop event partition %s: %w", name, err)
	}
	var kept int64
	if err := tx.QueryRow(ctx, dropEventPartitionSQL, name).Scan(&kept); err != nil {
		return fmt.Errorf("drop event partition %s: %w", name, lockError(err))
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("drop event partition %s: commit: %w", name, err)
	}
	rep.EventPartitions++
	rep.EventsKept += kept
	return nil
}
