package history

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/google/uuid"
)

// The statements of Tally.Flush: one per rollup table, each adding the
// rows it is given in their order (Tally sorts them as the triggers lock
// them) to one shard, and one for the webhooks' last attempts. A
// statement and a commit each, not one: a flush holds the row locks of
// one table at a time, as the triggers do.
const (
	flushDeliveriesSQL = `INSERT INTO delivery_rollups AS r (scope_id, hourly, at, shard, created, retrying, succeeded,
    exhausted, cancelled)
SELECT x.scope_id, x.hourly, x.at, $4, x.created, x.retrying, x.succeeded, x.exhausted, x.cancelled
FROM unnest($1::uuid[], $2::bool[], $3::timestamptz[], $5::bigint[], $6::bigint[], $7::bigint[], $8::bigint[], $9::bigint[])
    WITH ORDINALITY AS x (scope_id, hourly, at, created, retrying, succeeded, exhausted, cancelled, n)
ORDER BY x.n
ON CONFLICT (scope_id, hourly, at, shard) DO UPDATE SET
    created = r.created + excluded.created, retrying = r.retrying + excluded.retrying,
    succeeded = r.succeeded + excluded.succeeded, exhausted = r.exhausted + excluded.exhausted,
    cancelled = r.cancelled + excluded.cancelled`

	flushAttemptsSQL = `INSERT INTO attempt_rollups AS r (scope_id, hourly, at, shard, attempts, successes, errors, latency,
    last_success_at)
SELECT x.scope_id, x.hourly, x.at, $4, x.attempts, x.successes, x.errors::jsonb, x.latency::jsonb, x.last_success_at
FROM unnest($1::uuid[], $2::bool[], $3::timestamptz[], $5::bigint[], $6::bigint[], $7::text[], $8::text[], $9::timestamptz[])
    WITH ORDINALITY AS x (scope_id, hourly, at, attempts, successes, errors, latency, last_success_at, n)
ORDER BY x.n
ON CONFLICT (scope_id, hourly, at, shard) DO UPDATE SET
    attempts = r.attempts + excluded.attempts, successes = r.successes + excluded.successes,
    errors = CASE WHEN excluded.errors = '{}' THEN r.errors ELSE jsonb_add_counts(r.errors, excluded.errors) END,
    latency = jsonb_add_counts(r.latency, excluded.latency),
    last_success_at = greatest(r.last_success_at, excluded.last_success_at)`

	// flushLastSQL keeps each webhook's latest attempt (migration 000018);
	// a webhook deleted since its attempt (its tenant's removal deletes
	// it) is skipped.
	flushLastSQL = `INSERT INTO webhook_last_attempts AS l (webhook_id, tenant_id, executed_at, status_code, error)
SELECT x.webhook_id, x.tenant_id, x.executed_at, nullif(x.status_code, 0), nullif(x.error, '')
FROM unnest($1::uuid[], $2::uuid[], $3::timestamptz[], $4::int[], $5::text[])
    AS x (webhook_id, tenant_id, executed_at, status_code, error)
JOIN webhooks w ON w.id = x.webhook_id
ORDER BY x.webhook_id
ON CONFLICT (webhook_id) DO UPDATE SET executed_at = excluded.executed_at, status_code = excluded.status_code,
    error = excluded.error
WHERE excluded.executed_at > l.executed_at`
)

// flushDeliveries adds counts to delivery_rollups in shard.
func (t *Tally) flushDeliveries(ctx context.Context, counts map[tallyKey]*deliveryCounts, shard int16) error {
	rows := map[periodKey]*deliveryCounts{}
	for k, c := range counts {
		for _, p := range periodsOf(k) {
			r := rows[p]
			if r == nil {
				r = &deliveryCounts{}
				rows[p] = r
			}
			r.created += c.created
			r.retrying += c.retrying
			r.succeeded += c.succeeded
			r.exhausted += c.exhausted
			r.cancelled += c.cancelled
		}
	}
	keys := sortedPeriods(rows)
	n := len(keys)
	scopes, hourly, at := make([]uuid.UUID, n), make([]bool, n), make([]time.Time, n)
	created, retrying, succeeded := make([]int64, n), make([]int64, n), make([]int64, n)
	exhausted, cancelled := make([]int64, n), make([]int64, n)
	for i, k := range keys {
		r := rows[k]
		scopes[i], hourly[i], at[i] = k.scope, k.hourly, k.at
		created[i], retrying[i], succeeded[i] = r.created, r.retrying, r.succeeded
		exhausted[i], cancelled[i] = r.exhausted, r.cancelled
	}
	if _, err := t.pool.Exec(ctx, flushDeliveriesSQL, scopes, hourly, at, shard, created, retrying, succeeded,
		exhausted, cancelled); err != nil {
		return fmt.Errorf("flush delivery rollups: %w", err)
	}
	return nil
}

// flushAttempts adds counts to attempt_rollups in shard.
func (t *Tally) flushAttempts(ctx context.Context, counts map[tallyKey]*attemptCounts, shard int16) error {
	rows := map[periodKey]*attemptCounts{}
	for k, c := range counts {
		for _, p := range periodsOf(k) {
			r := rows[p]
			if r == nil {
				r = &attemptCounts{errors: map[string]int64{}, latency: histogram{}}
				rows[p] = r
			}
			r.merge(c)
		}
	}
	keys := sortedPeriods(rows)
	n := len(keys)
	scopes, hourly, at := make([]uuid.UUID, n), make([]bool, n), make([]time.Time, n)
	attempts, successes := make([]int64, n), make([]int64, n)
	errs, latency := make([]string, n), make([]string, n)
	last := make([]*time.Time, n)
	for i, k := range keys {
		r := rows[k]
		scopes[i], hourly[i], at[i] = k.scope, k.hourly, k.at
		attempts[i], successes[i] = r.attempts, r.successes
		e, err := json.Marshal(r.errors)
		if err != nil {
			return fmt.Errorf("encode failure counts: %w", err)
		}
		l, err := json.Marshal(r.latency)
		if err != nil {
			return fmt.Errorf("encode latency histogram: %w", err)
		}
		errs[i], latency[i] = string(e), string(l)
		if !r.lastSuccess.IsZero() {
			s := r.lastSuccess
			last[i] = &s
		}
	}
	if _, err := t.pool.Exec(ctx, flushAttemptsSQL, scopes, hourly, at, shard, attempts, successes, errs, latency,
		last); err != nil {
		return fmt.Errorf("flush attempt rollups: %w", err)
	}
	return nil
}

// flushLast writes each webhook's latest attempt of last, in webhook
// order (the order in which concurrent flushes lock the rows).
func (t *Tally) flushLast(ctx context.Context, last map[uuid.UUID]lastAttempt) error {
	hooks := slices.SortedFunc(maps.Keys(last), func(a, b uuid.UUID) int { return bytes.Compare(a[:], b[:]) })
	n := len(hooks)
	tenants, executed := make([]uuid.UUID, n), make([]time.Time, n)
	codes, errs := make([]int32, n), make([]string, n)
	for i, h := range hooks {
		l := last[h]
		//nolint:gosec // an HTTP status code
		tenants[i], executed[i], codes[i], errs[i] = l.tenant, l.executedAt, int32(l.statusCode), l.err
	}
	if _, err := t.pool.Exec(ctx, flushLastSQL, hooks, tenants, executed, codes, errs); err != nil {
		return fmt.Errorf("flush last attempts: %w", err)
	}
	return nil
}
