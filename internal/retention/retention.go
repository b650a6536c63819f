// Package retention removes old data (docs/DESIGN.md §14). On each run it
// drops the weekly partitions of deliveries entirely older than the
// attempts age (moving the deliveries still in flight, exhausted or
// retrying another to the default partition, or, when they are many, to
// a partition of their own in the week's place), deletes the deliveries of
// the other partitions that are done with, drops the daily partitions of
// the attempt log and the weekly ones of the event log of the days whose
// deliveries went (moving the events that deliveries still name to the
// event log's default partition), deletes the events of that default
// partition left without deliveries, and clears the payload of fully
// delivered events older than the payload age. Exhausted deliveries that
// no retry has resolved are kept whatever their age, with their attempts
// and their event's payload, so that the DLQ can still show and retry
// them.
package retention

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookline/hookline/internal/config"
	"github.com/hookline/hookline/internal/metrics"
	"github.com/hookline/hookline/internal/supervisor"
)

// ErrRunning means another process holds the retention lock and is running
// the job at this moment; this run did nothing.
var ErrRunning = errors.New("retention is running in another process")

// Job is the retention job. It is safe to run in several dlq processes: a
// Postgres advisory lock lets one run at a time.
type Job struct {
	pool *pgxpool.Pool
	cfg  config.Retention
	log  *slog.Logger
	// startDelay is the wait before the first run of Run, so that a
	// starting process gets ready before it prunes.
	startDelay time.Duration
	// lockTimeout bounds the wait for the lock that dropping a partition
	// takes on the attempt log; inserts of attempts queue behind it.
	lockTimeout time.Duration
	// moveAtMost is the most kept deliveries a partition of deliveries
	// moves to the default partition under the lock of deliveries (about
	// 50 us each); one with more is swapped for a partition of them.
	moveAtMost int64
}

// New returns a Job that prunes according to cfg, which must be valid
// (config.Validate).
func New(pool *pgxpool.Pool, cfg config.Retention, log *slog.Logger) *Job {
	return &Job{pool: pool, cfg: cfg, log: log, startDelay: 30 * time.Second, lockTimeout: 2 * time.Second,
		moveAtMost: 10000}
}

// Report counts what one run removed.
type Report struct {
	// Attempts is the attempt rows removed: those of dropped partitions,
	// less the ones kept, and those deleted from the default partition.
	Attempts int64
	// AttemptPartitions is the daily partitions dropped.
	AttemptPartitions int64
	// Deliveries is the deliveries deleted one by one: those of the
	// partitions of deliveries that are not weeks.
	Deliveries int64
	// DeliveryPartitions is the weeks of deliveries dropped (and the
	// partitions of kept deliveries moved to the default one), and
	// DeliveriesKept the deliveries they held that were kept (in flight,
	// exhausted, or retries): moved to the default partition, or, when
	// more than Job.moveAtMost, left in a partition of their own that
	// took the week's place.
	DeliveryPartitions int64
	DeliveriesKept     int64
	// Payloads is the event payloads cleared.
	Payloads int64
	// Events is the events deleted one by one: those of the default
	// partition of the event log.
	Events int64
	// EventPartitions is the weeks of the event log dropped, and
	// EventsKept the events they held that deliveries still named, moved
	// to the default partition.
	EventPartitions int64
	EventsKept      int64
	// AttemptsRetained is the attempts copied out of dropped partitions
	// because their delivery is kept.
	AttemptsRetained int64
	// PartitionsSkipped is the old partitions left for the next run because
	// their lock was not obtained in time.
	PartitionsSkipped int64
	// PortalSessions is the portal sessions deleted a day after they
	// ended; Pauses the webhook pauses older than the attempt cutoff.
	PortalSessions int64
	Pauses         int64
	// Rollups is the summary rows (stats, health, charts, DLQ counts) of
	// minutes older than the attempt cutoff.
	Rollups int64
}

// Run runs the job shortly after it starts, then every cfg.Interval, until
// ctx ends. A failed run is logged and does not stop it.
func (j *Job) Run(ctx context.Context) error {
	return supervisor.Every(ctx, min(j.startDelay, j.cfg.Interval.D()), j.cfg.Interval.D(), func(ctx context.Context) {
		// Once logs its own outcome.
		_, _ = j.Once(ctx, time.Now())
	})
}

// cutoffs are the times before which data goes, and the run's time.
type cutoffs struct {
	now time.Time
	// attempts: attempts, deliveries and events created before it.
	attempts time.Time
	// payloads: payloads of fully delivered events created before it.
	payloads time.Time
}

func cutoffsAt(now time.Time, cfg config.Retention) cutoffs {
	return cutoffs{now: now, attempts: now.Add(-cfg.AttemptsAge.D()), payloads: now.Add(-cfg.PayloadAge.D())}
}

// step is one kind of removal; it adds what it removed to the report as it
// goes, so that counts stay right when it fails half-way.
type step struct {
	name string
	run  func(context.Context, cutoffs, *Report) error
}

// Once runs the job once as if the time were now, and returns what it
// removed. A step that fails is logged and the next ones still run; the
// error returned joins the failures. Deliveries go before the attempt log's
// partitions (fewer attempts to keep) and events after deliveries (their
// last delivery gone).
func (j *Job) Once(ctx context.Context, now time.Time) (Report, error) {
	start := time.Now()
	var rep Report
	release, err := j.lock(ctx)
	if errors.Is(err, ErrRunning) {
		j.log.Info("retention skipped: running in another process")
		return rep, err
	}
	if err != nil {
		j.log.Error("retention failed", "error", err)
		return rep, err
	}
	defer release()

	c := cutoffsAt(now, j.cfg)
	steps := []step{
		{"deliveries", j.pruneDeliveries},
		{"delivery_partitions", j.dropDeliveryPartitions},
		{"attempt_partitions", j.dropPartitions},
		{"default_partition", j.pruneDefaultPartition},
		{"event_partitions", j.dropEventPartitions},
		{"events", j.pruneEvents},
		{"payloads", j.prunePayloads},
		{"portal_sessions", j.pruneSessions},
		{"webhook_pauses", j.prunePauses},
		{"rollups", j.pruneRollups},
	}
	var errs []error
	for _, s := range steps {
		if err := s.run(ctx, c, &rep); err != nil {
			j.log.Error("retention step failed", "step", s.name, "error", err)
			errs = append(errs, fmt.Errorf("retention %s: %w", s.name, err))
			if ctx.Err() != nil {
				break
			}
		}
	}
	err = errors.Join(errs...)
	j.record(rep, now, time.Since(start), err)
	return rep, err
}

// record logs the run's one line and updates the metrics.
func (j *Job) record(rep Report, now time.Time, took time.Duration, err error) {
	for kind, n := range map[string]int64{
		"attempts": rep.Attempts, "attempt_partitions": rep.AttemptPartitions,
		"deliveries": rep.Deliveries, "payloads": rep.Payloads, "events": rep.Events,
		"event_partitions": rep.EventPartitions, "delivery_partitions": rep.DeliveryPartitions, "portal_sessions": rep.PortalSessions, "webhook_pauses": rep.Pauses, "rollups": rep.Rollups,
	} {
		metrics.RetentionPruned.WithLabelValues(kind).Add(float64(n))
	}
	attrs := []any{
		"attempts", rep.Attempts, "attempt_partitions", rep.AttemptPartitions,
		"deliveries", rep.Deliveries, "payloads", rep.Payloads, "events", rep.Events,
		"attempts_retained", rep.AttemptsRetained, "partitions_skipped", rep.PartitionsSkipped,
		"event_partitions", rep.EventPartitions, "events_kept", rep.EventsKept,
		"delivery_partitions", rep.DeliveryPartitions, "deliveries_kept", rep.DeliveriesKept,
		"portal_sessions", rep.PortalSessions, "webhook_pauses", rep.Pauses, "rollups", rep.Rollups,
		"duration_ms", took.Milliseconds(),
	}
	if err != nil {
		j.log.Error("retention run", append(attrs, "error", err)...)
		return
	}
	metrics.RetentionLastSuccess.Set(float64(now.Unix()))
	j.log.Info("retention run", attrs...)
}

// lock takes the session advisory lock that lets one process run the job
// at a time, on a connection held until release is called.
func (j *Job) lock(ctx context.Context) (release func(), err error) {
	conn, err := j.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("retention lock: %w", err)
	}
	var got bool
	if err := conn.QueryRow(ctx, tryLockSQL).Scan(&got); err != nil {
		conn.Release()
		return nil, fmt.Errorf("retention lock: %w", err)
	}
	if !got {
		conn.Release()
		return nil, ErrRunning
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := conn.Exec(ctx, unlockSQL); err != nil {
			// A session lock lives as long as its connection: close it
			// rather than hand a locked connection back to the pool.
			_ = conn.Conn().Close(ctx)
		}
		conn.Release()
	}, nil
}
