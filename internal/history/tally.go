package history

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookline/hookline/internal/supervisor"
	"github.com/hookline/hookline/internal/wire"
)

// A Tally keeps, in the process, the rollups (delivery_rollups and
// attempt_rollups) of the rows its hot statements write, the api's publish
// commits and the worker's attempt records, and each webhook's last
// attempt (webhook_last_attempts), and adds them to Postgres once every
// TallyEvery, for every delivery and attempt of that second in one
// statement, instead of the rollup triggers adding them inside each
// statement (which cost a fifth of Postgres's CPU per delivery). Those
// statements turn the triggers off for themselves (MarkTallied); every
// other writer of deliveries and attempts (retries, recoveries, the dlq,
// an operator's SQL) is still counted by the triggers, and the DLQ's
// rollups are kept by the triggers whoever writes.
//
// What a process tallied but had not added when it died (SIGKILL, a lost
// host) is missing from the stats and charts: at most TallyEvery of its
// deliveries and attempts, plus what it could not add while Postgres was
// unreachable. A flush that fails keeps its counts for the next one; Run
// flushes once more when it stops. Until both the api's and the worker's
// tallies are flushed, a delivery may show as succeeded before it shows as
// created: Stats counts such a delivery as none pending, not fewer.
type Tally struct {
	pool *pgxpool.Pool
	log  *slog.Logger

	mu         sync.Mutex
	deliveries map[tallyKey]*deliveryCounts
	attempts   map[tallyKey]*attemptCounts
	// last is each webhook's latest attempt, for webhook_last_attempts.
	last map[uuid.UUID]lastAttempt
	// lastWarned limits failed flushes to one warning a minute.
	lastWarned time.Time
}

// TallyEvery is how often a Tally adds what it counted to the rollups.
const TallyEvery = time.Second

// tallySetting is the setting by which a statement tells the rollup
// triggers that its process tallies it (migration 000014).
const tallySetting = "hookline.rollups"

// tallyKey is a webhook's minute: the rollups of its tenant and of every
// tenant, and the hours, are derived from it when flushed.
type tallyKey struct {
	webhook, tenant uuid.UUID
	minute          time.Time
}

type deliveryCounts struct {
	created, retrying, succeeded, exhausted, cancelled int64
}

// lastAttempt is the latest attempt counted for a webhook.
type lastAttempt struct {
	tenant     uuid.UUID
	executedAt time.Time
	statusCode int
	err        string
}

type attemptCounts struct {
	attempts, successes int64
	errors              map[string]int64
	latency             histogram
	lastSuccess         time.Time
}

// NewTally returns a Tally that flushes to pool.
func NewTally(pool *pgxpool.Pool, log *slog.Logger) *Tally {
	return &Tally{pool: pool, log: log, deliveries: map[tallyKey]*deliveryCounts{}, attempts: map[tallyKey]*attemptCounts{},
		last: map[uuid.UUID]lastAttempt{}}
}

// MarkTallied queues, ahead of the statements b already holds or will
// hold, the setting that keeps the delivery and attempt rollup triggers
// from counting the rows those statements write: b's statements run in one
// transaction, and the setting ends with it. The caller must then count
// what they wrote (Created, Attempted).
func MarkTallied(b *pgx.Batch) {
	b.Queue(`SELECT set_config('` + tallySetting + `', 'process', true)`)
}

// Created counts n deliveries to webhook, created at createdAt.
func (t *Tally) Created(webhook, tenant uuid.UUID, createdAt time.Time, n int) {
	t.mu.Lock()
	t.deliveryCounts(webhook, tenant, createdAt).created += int64(n)
	t.mu.Unlock()
}

// A TalliedAttempt is one recorded attempt, and the state it moved its delivery
// from and to.
type TalliedAttempt struct {
	Webhook, Tenant   uuid.UUID
	DeliveryCreatedAt time.Time
	From, To          wire.Status
	ExecutedAt        time.Time
	OK                bool
	FailureCategory   string
	Duration          time.Duration
	// StatusCode is the endpoint's answer, 0 for none; Error the error
	// recorded with the attempt, "" for none.
	StatusCode int
	Error      string
}

// Attempted counts a.
func (t *Tally) Attempted(a TalliedAttempt) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if a.From != a.To {
		d := t.deliveryCounts(a.Webhook, a.Tenant, a.DeliveryCreatedAt)
		*d.of(a.From)--
		*d.of(a.To)++
	}
	k := tallyKey{webhook: a.Webhook, tenant: a.Tenant, minute: a.ExecutedAt.Truncate(time.Minute)}
	c := t.attempts[k]
	if c == nil {
		c = &attemptCounts{errors: map[string]int64{}, latency: histogram{}}
		t.attempts[k] = c
	}
	c.attempts++
	if a.OK {
		c.successes++
		if a.ExecutedAt.After(c.lastSuccess) {
			c.lastSuccess = a.ExecutedAt
		}
	}
	if a.FailureCategory != "" {
		c.errors[a.FailureCategory]++
	}
	c.latency[latencyBucket(int(a.Duration.Milliseconds()))]++
	t.noteLast(a.Webhook, lastAttempt{tenant: a.Tenant, executedAt: a.ExecutedAt, statusCode: a.StatusCode, err: a.Error})
}

// noteLast keeps l as webhook's last attempt unless a later one is kept.
// t.mu is held.
func (t *Tally) noteLast(webhook uuid.UUID, l lastAttempt) {
	if kept, ok := t.last[webhook]; !ok || l.executedAt.After(kept.executedAt) {
		t.last[webhook] = l
	}
}

func (t *Tally) deliveryCounts(webhook, tenant uuid.UUID, createdAt time.Time) *deliveryCounts {
	return t.deliveryCountsAt(tallyKey{webhook: webhook, tenant: tenant, minute: createdAt.Truncate(time.Minute)})
}

// of is the counter of deliveries in state s; pending is not counted
// (created less the others), so it goes to a counter of its own.
func (d *deliveryCounts) of(s wire.Status) *int64 {
	switch s {
	case wire.Retrying:
		return &d.retrying
	case wire.Succeeded:
		return &d.succeeded
	case wire.Exhausted:
		return &d.exhausted
	case wire.Cancelled:
		return &d.cancelled
	default:
		var pending int64
		return &pending
	}
}

// Run flushes every TallyEvery until ctx ends, then once more, within
// flushStopWithin.
func (t *Tally) Run(ctx context.Context) error {
	err := supervisor.Every(ctx, TallyEvery, TallyEvery, func(ctx context.Context) {
		if err := t.Flush(ctx); err != nil && ctx.Err() == nil {
			t.warn(err)
		}
	})
	stop, cancel := context.WithTimeout(context.WithoutCancel(ctx), flushStopWithin)
	defer cancel()
	if ferr := t.Flush(stop); ferr != nil {
		t.log.Warn("rollup counts lost at shutdown", "error", ferr)
	}
	return err
}

const flushStopWithin = 5 * time.Second

func (t *Tally) warn(err error) {
	t.mu.Lock()
	now := time.Now()
	quiet := now.Sub(t.lastWarned) < time.Minute
	if !quiet {
		t.lastWarned = now
	}
	t.mu.Unlock()
	if !quiet {
		t.log.Warn("rollup counts not flushed; kept for the next flush", "error", err)
	}
}

// Flush adds what was counted since the last flush to the rollups. What a
// statement failed to add is kept, added to what comes next.
func (t *Tally) Flush(ctx context.Context) error {
	t.mu.Lock()
	deliveries, attempts, last := t.deliveries, t.attempts, t.last
	t.deliveries, t.attempts, t.last = map[tallyKey]*deliveryCounts{}, map[tallyKey]*attemptCounts{}, map[uuid.UUID]lastAttempt{}
	t.mu.Unlock()
	//nolint:gosec // a shard spreads row locks; it is no secret
	shard := int16(rand.IntN(rollupShards))
	var derr, aerr, lerr error
	if len(deliveries) > 0 {
		if derr = t.flushDeliveries(ctx, deliveries, shard); derr == nil {
			deliveries = nil
		}
	}
	if len(attempts) > 0 {
		if aerr = t.flushAttempts(ctx, attempts, shard); aerr == nil {
			attempts = nil
		}
	}
	if len(last) > 0 {
		if lerr = t.flushLast(ctx, last); lerr == nil {
			last = nil
		}
	}
	t.restore(deliveries, attempts, last)
	return errors.Join(derr, aerr, lerr)
}

// rollupShards is the number of shards of a rollup row (migration 000012).
const rollupShards = 4

// restore adds counts a failed flush took back to what was counted since.
func (t *Tally) restore(deliveries map[tallyKey]*deliveryCounts, attempts map[tallyKey]*attemptCounts,
	last map[uuid.UUID]lastAttempt) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for webhook, l := range last {
		t.noteLast(webhook, l)
	}
	for k, d := range deliveries {
		c := t.deliveryCountsAt(k)
		c.created += d.created
		c.retrying += d.retrying
		c.succeeded += d.succeeded
		c.exhausted += d.exhausted
		c.cancelled += d.cancelled
	}
	for k, a := range attempts {
		c := t.attempts[k]
		if c == nil {
			t.attempts[k] = a
			continue
		}
		c.merge(a)
	}
}

func (t *Tally) deliveryCountsAt(k tallyKey) *deliveryCounts {
	d := t.deliveries[k]
	if d == nil {
		d = &deliveryCounts{}
		t.deliveries[k] = d
	}
	return d
}

func (c *attemptCounts) merge(o *attemptCounts) {
	c.attempts += o.attempts
	c.successes += o.successes
	for k, n := range o.errors {
		c.errors[k] += n
	}
	c.latency.add(o.latency)
	if o.lastSuccess.After(c.lastSuccess) {
		c.lastSuccess = o.lastSuccess
	}
}

// periodKey is a rollup row: a scope's minute, or its hour when hourly.
type periodKey struct {
	scope  uuid.UUID
	hourly bool
	at     time.Time
}

// periodsOf is the six rollup rows a webhook's minute adds to: the
// webhook's, its tenant's and every tenant's, each by minute and by hour.
func periodsOf(k tallyKey) [6]periodKey {
	var out [6]periodKey
	hour := k.minute.Truncate(time.Hour)
	for i, scope := range [3]uuid.UUID{k.webhook, k.tenant, allTenants} {
		out[2*i] = periodKey{scope: scope, at: k.minute}
		out[2*i+1] = periodKey{scope: scope, hourly: true, at: hour}
	}
	return out
}

// sortedPeriods orders rollup rows as the triggers lock them (scope,
// hourly, at), so that a flush and a trigger never wait on each other in
// opposite orders.
func sortedPeriods[V any](m map[periodKey]V) []periodKey {
	keys := make([]periodKey, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b periodKey) int {
		if c := slices.Compare(a.scope[:], b.scope[:]); c != 0 {
			return c
		}
		if a.hourly != b.hourly {
			if a.hourly {
				return 1
			}
			return -1
		}
		return a.at.Compare(b.at)
	})
	return keys
}
