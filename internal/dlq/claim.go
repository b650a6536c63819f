package dlq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/hookline/hookline/internal/history"
)

// Claiming a batch shares the batch slots of every dlq process between
// tenants: at most ConcurrencyPerTenant batches of one tenant run at once,
// and the tenant with the fewest running batches goes first, so that one
// tenant's slow batches cannot hold every slot for hours.
//
// The cap has to hold across processes claiming at the same moment, and a
// single statement cannot count and claim safely: it sees the table as of
// its start, so two processes claiming for one tenant would each miss the
// other's claim and take two different batches (SKIP LOCKED lets them).
// So a claim takes a transaction-level advisory lock on the tenant first,
// then counts and claims in the next statement, which (READ COMMITTED)
// sees every claim committed before the lock was granted; the lock is held
// until commit, so the next claimer for the tenant sees this one. The lock
// is per tenant so that claims for different tenants do not wait for each
// other, and tried rather than waited for: a process finding the tenant
// being claimed moves on to the next tenant (its batch is claimed at a
// later poll), and never waits while holding a lock.

// claim is a batch as its runner needs it.
type claim struct {
	id        uuid.UUID
	tenantID  uuid.UUID
	filter    history.DeadLetterFilter
	rps       int
	priority  string
	upto      *uuid.UUID
	startedAt time.Time
	last      *uuid.UUID
	// kind is KindRetry or KindRecover. A recovery's parameters are in
	// recovery; it walks its failed deliveries (upto, last), then its
	// missed events (uptoEvent, lastEvent).
	kind                 string
	recovery             Recovery
	uptoEvent, lastEvent *uuid.UUID
}

// A batch counts against its tenant's cap while its claimant heartbeats
// and it has retries left to enqueue. One whose claimant went quiet for
// the claim timeout is abandoned (its process died or stalled) and is
// claimable again; one that has enqueued every retry holds no runner slot
// while its outcomes are counted.
const runningWhere = `b.state = 'running' AND b.enqueued_all_at IS NULL
    AND b.heartbeat_at >= now() - @timeout::interval`

// A batch is claimable while pending, or running but abandoned: the exact
// complement of runningWhere among batches with retries left to enqueue.
const claimableWhere = `b.enqueued_all_at IS NULL
    AND (b.state = 'pending' OR (b.state = 'running' AND b.heartbeat_at < now() - @timeout::interval))`

// claimTenantsSQL lists the tenants with a claimable batch and room under
// the cap, fairest first: fewest running batches, then oldest waiting
// batch. It only orders the attempts; claimSQL decides. The limit bounds a
// poll's work when many tenants wait; the rest come at later polls.
const claimTenantsSQL = `WITH running AS (
    SELECT b.tenant_id, count(*) AS n FROM batch_operations b
    WHERE ` + runningWhere + `
    GROUP BY b.tenant_id)
SELECT b.tenant_id
FROM batch_operations b LEFT JOIN running r ON r.tenant_id = b.tenant_id
WHERE ` + claimableWhere + ` AND coalesce(r.n, 0) < @per_tenant
GROUP BY b.tenant_id, r.n
ORDER BY coalesce(r.n, 0), min(b.created_at)
LIMIT 20`

// lockTenantSQL takes the tenant's claim lock until the transaction ends.
// The two-key form keeps it apart from the one-key advisory locks of
// retention and delivery ordering; two tenants whose ids hash alike merely
// skip each other's claims now and then.
const lockTenantSQL = `SELECT pg_try_advisory_xact_lock(hashtext('hookline.batch_claim'), hashtext(@tenant::text))`

// claimSQL claims the tenant's oldest claimable batch if the tenant is
// still under the cap; it runs under the tenant's claim lock.
const claimSQL = `UPDATE batch_operations SET state = 'running', claimed_by = @runner, heartbeat_at = now(),
    started_at = coalesce(started_at, now())
WHERE id = (
    SELECT b.id FROM batch_operations b
    WHERE b.tenant_id = @tenant AND ` + claimableWhere + `
    ORDER BY b.created_at
    LIMIT 1
    FOR UPDATE SKIP LOCKED)
  AND (SELECT count(*) FROM batch_operations b WHERE b.tenant_id = @tenant AND ` + runningWhere + `) < @per_tenant
RETURNING id, tenant_id, filter, requests_per_second, priority, upto_delivery_id, started_at, last_delivery_id,
    kind, recovery, upto_event_id, last_event_id`

// claim takes the next batch this runner may run; ok is false when no
// tenant with a claimable batch has room under the cap.
func (r *Runner) claim(ctx context.Context) (claim, bool, error) {
	args := pgx.NamedArgs{"timeout": r.ClaimTimeout, "per_tenant": r.ConcurrencyPerTenant, "runner": r.ID}
	rows, err := r.pool.Query(ctx, claimTenantsSQL, args)
	if err != nil {
		return claim{}, false, fmt.Errorf("list tenants with claimable batches: %w", err)
	}
	tenants, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return claim{}, false, fmt.Errorf("list tenants with claimable batches: %w", err)
	}
	for _, tenantID := range tenants {
		args["tenant"] = tenantID
		c, ok, err := r.claimOf(ctx, args)
		if err != nil || ok {
			return c, ok, err
		}
	}
	return claim{}, false, nil
}

// claimOf claims a batch of args' tenant, unless another process is
// claiming for it right now or it reached the cap meanwhile.
func (r *Runner) claimOf(ctx context.Context, args pgx.NamedArgs) (claim, bool, error) {
	tx, err := r.pool.Begin(ctx)
	if err != nil {
		return claim{}, false, fmt.Errorf("begin claim: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit
	var locked bool
	if err := tx.QueryRow(ctx, lockTenantSQL, args).Scan(&locked); err != nil {
		return claim{}, false, fmt.Errorf("lock tenant's batch claims: %w", err)
	}
	if !locked {
		return claim{}, false, nil
	}
	var c claim
	var filter, recovery []byte
	err = tx.QueryRow(ctx, claimSQL, args).Scan(&c.id, &c.tenantID, &filter, &c.rps, &c.priority,
		&c.upto, &c.startedAt, &c.last, &c.kind, &recovery, &c.uptoEvent, &c.lastEvent)
	if errors.Is(err, pgx.ErrNoRows) {
		return claim{}, false, nil
	}
	if err != nil {
		return claim{}, false, fmt.Errorf("claim batch operation: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return claim{}, false, fmt.Errorf("commit batch claim: %w", err)
	}
	if err := json.Unmarshal(filter, &c.filter); err != nil {
		r.fail(ctx, c.id, "the batch's filter cannot be read: "+err.Error())
		return claim{}, false, nil
	}
	if c.kind == KindRecover {
		if err := json.Unmarshal(recovery, &c.recovery); err != nil {
			r.fail(ctx, c.id, "the recovery's parameters cannot be read: "+err.Error())
			return claim{}, false, nil
		}
	}
	return c, true, nil
}
