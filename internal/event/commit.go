package event

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookline/hookline/internal/batch"
	"github.com/hookline/hookline/internal/db"
	"github.com/hookline/hookline/internal/history"
	"github.com/hookline/hookline/internal/metrics"
	"github.com/hookline/hookline/internal/tracing"
	"github.com/hookline/hookline/internal/wire"
)

// pending is one event waiting for its commit. The committer fills the
// result fields.
type pending struct {
	tenantID  uuid.UUID
	req       Request
	hash      []byte
	id        uuid.UUID
	createdAt time.Time
	// trace is the publish's trace context, stored with the event; zero
	// with tracing off.
	trace tracing.Parent
	// view is the tenant's filtered webhooks the event was evaluated
	// against, and refused those whose filter refused it.
	view    *filterView
	refused []uuid.UUID

	// claim is the event id its key names (claimedID): its own id when
	// the key is generated, uuid.Nil when the key names none.
	claim uuid.UUID

	inserted bool
	// stale: not inserted, the view being out of date.
	stale bool
	tasks []wire.Task
}

// newPending is r (normalized, hashed) as a new event of tenantID, created
// at createdAt: it gets its id, and its generated key when r has none.
func newPending(tenantID uuid.UUID, r Request, hash []byte, createdAt time.Time) *pending {
	p := &pending{tenantID: tenantID, req: r, hash: hash, id: uuid.Must(uuid.NewV7()), createdAt: createdAt}
	if p.req.IdempotencyKey == "" {
		p.req.IdempotencyKey, p.claim = generatedKey(p.id), p.id
	} else if id, ok := claimedID(p.req.IdempotencyKey); ok {
		p.claim = id
	}
	return p
}

// committer is the group commit of the publish path: events published at
// the same moment are committed together by one statement (see
// internal/batch), so the number of commits (and WAL flushes) per event
// falls as load rises.
type committer struct {
	pool *pgxpool.Pool
	// hot runs the commits while the committer runs: a pool of its own,
	// one connection per runner, each prepared before the first publish
	// (db.HotPool); pool otherwise.
	hot   *pgxpool.Pool
	batch *batch.Batcher[*pending, struct{}]
	// tally counts the deliveries the commits create for the rollups.
	tally *history.Tally
	log   *slog.Logger
}

const (
	maxCommitBatch = 256
	commitWorkers  = 4
)

// DefaultCommitWindow is how long a publish waits, by default, for other
// events to share its commit (Service.WithCommitWindow).
const DefaultCommitWindow = 5 * time.Millisecond

func newCommitter(pool *pgxpool.Pool, log *slog.Logger) *committer {
	c := &committer{pool: pool, hot: pool, tally: history.NewTally(pool, log), log: log}
	c.window(DefaultCommitWindow)
	return c
}

// window makes each commit wait up to d after its first event for others
// to share it: fewer, larger commits, each event answered up to d later.
// While publishes come on average 3/4 of d apart or more, a commit does
// not wait (it takes only the events that arrive while other commits run):
// the window would seldom find a second event, and every publish would be
// answered later for it. With d = 0 no commit waits.
func (c *committer) window(d time.Duration) {
	c.batch = batch.New(c.commit, maxCommitBatch, commitWorkers)
	if d > 0 {
		c.batch.Window(d).Sparse(d * 3 / 4)
	}
}

// submit commits p with the others waiting and fills its results. Once
// submitted, the commit is not the caller's to cancel: a request whose
// client gives up after its event is queued still learns the real outcome
// (and a committed event is never reported as failed, which would invite
// a retry that publishes it twice). commitWait bounds the wait, should the
// committer have stopped.
func (c *committer) submit(ctx context.Context, p *pending) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), commitWait)
	defer cancel()
	_, err := c.batch.Do(ctx, p)
	return err
}

// commitWait is the longest a publish waits for its group commit.
const commitWait = 30 * time.Second

// commitAll commits batch by one statement of its own on the api's pool,
// beside the group commit: a batch published as one is one commit. As
// with submit, the caller cannot cancel it once it started.
func (c *committer) commitAll(ctx context.Context, batch []*pending) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), commitWait)
	defer cancel()
	return c.exec(ctx, c.pool, batch)
}

// run commits until ctx ends, then commits what is still waiting; the
// tally of the deliveries created is flushed meanwhile, and a last time
// after the last commit.
func (c *committer) run(ctx context.Context) error {
	tallyCtx, stopTally := context.WithCancel(context.WithoutCancel(ctx))
	tallied := make(chan error, 1)
	go func() { tallied <- c.tally.Run(tallyCtx) }()
	defer func() {
		stopTally()
		if err := <-tallied; err != nil {
			c.log.Warn("rollup tally stopped", "error", err)
		}
	}()
	hot, err := db.OpenHot(c.pool, db.HotPool{MaxConns: commitWorkers, Ready: commitWorkers, Prepare: c.prepare, IndexScans: true}, c.log)
	if err != nil {
		c.log.Warn("publish commits share the api's pool", "error", err)
		return c.batch.Run(ctx)
	}
	c.hot = hot
	defer hot.Close()
	return c.batch.Run(ctx)
}

// prepare runs both forms of the publish statement on a new connection of
// the hot pool, with no event to insert.
func (c *committer) prepare(ctx context.Context, conn *pgx.Conn) error {
	for _, sql := range []string{publishSQL, publishOwnKeysSQL} {
		if err := c.send(ctx, conn, sql, nil); err != nil {
			return err
		}
	}
	return nil
}

func (c *committer) commit(ctx context.Context, batch []*pending) ([]struct{}, error) {
	if err := c.exec(ctx, c.hot, batch); err != nil {
		return nil, err
	}
	metrics.PublishCommitEvents.Observe(float64(len(batch)))
	return make([]struct{}, len(batch)), nil
}

// batchSender runs a pgx.Batch: a pool, or one of its connections.
type batchSender interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// exec commits batch by publishOwnKeysSQL when every event of it has its
// own generated key, by publishSQL otherwise.
func (c *committer) exec(ctx context.Context, q batchSender, batch []*pending) error {
	return c.send(ctx, q, publishStatementFor(batch), batch)
}

// publishStatementFor is the form of the publish statement batch needs.
func publishStatementFor(batch []*pending) string {
	for _, p := range batch {
		if p.claim != p.id {
			return publishSQL
		}
	}
	return publishOwnKeysSQL
}

// send commits batch by sql (publishSQL or publishOwnKeysSQL), and counts
// the deliveries it created in the tally (the statement keeps the rollup
// triggers from counting them: history.MarkTallied).
func (c *committer) send(ctx context.Context, q batchSender, sql string, batch []*pending) error {
	n := len(batch)
	ids, tenants := make([]uuid.UUID, n), make([]uuid.UUID, n)
	types, sources, keys := make([]string, n), make([]string, n), make([]string, n)
	hashes := make([][]byte, n)
	prios, data, corr := make([]string, n), make([]string, n), make([]string, n)
	parents, states := make([]string, n), make([]string, n)
	created := make([]time.Time, n)
	claims := make([]*uuid.UUID, n)
	byID := make(map[uuid.UUID]*pending, n)
	views := newViewArgs()
	var refusedEvents, refusedHooks []uuid.UUID
	for i, p := range batch {
		ids[i], tenants[i] = p.id, p.tenantID
		types[i], sources[i], keys[i] = p.req.EventType, p.req.Source, p.req.IdempotencyKey
		hashes[i] = p.hash
		prios[i], data[i], corr[i] = p.req.Priority, string(p.req.Data), p.req.CorrelationID
		parents[i], states[i] = p.trace.TraceParent, p.trace.TraceState
		created[i] = p.createdAt
		if p.claim != uuid.Nil {
			claims[i] = &p.claim
		}
		byID[p.id] = p
		p.inserted, p.stale, p.tasks = false, false, nil
		views.add(p.view)
		for _, h := range p.refused {
			refusedEvents, refusedHooks = append(refusedEvents, p.id), append(refusedHooks, h)
		}
	}
	b := &pgx.Batch{}
	history.MarkTallied(b)
	b.Queue(sql, ids, tenants, types, sources, keys, hashes, prios, data, corr, created,
		parents, states, views.of(batch), views.numbers, views.tenants, views.knownView, views.knownHook, views.knownVersion,
		refusedEvents, refusedHooks, claims)
	results := q.SendBatch(ctx, b)
	if err := c.scan(results, batch, byID, views); err != nil {
		_ = results.Close()
		return err
	}
	if err := results.Close(); err != nil {
		return fmt.Errorf("insert events: %w", err)
	}
	for _, p := range batch {
		for _, t := range p.tasks {
			c.tally.Created(t.WebhookID, t.TenantID, t.CreatedAt, 1)
		}
	}
	return nil
}

// scan reads what publishSQL returned into batch.
func (c *committer) scan(results pgx.BatchResults, batch []*pending, byID map[uuid.UUID]*pending, views *viewArgs) error {
	if _, err := results.Exec(); err != nil {
		return fmt.Errorf("insert events: %w", err)
	}
	rows, err := results.Query()
	if err != nil {
		return fmt.Errorf("insert events: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var evID, delID, hookID *uuid.UUID
		var stale *int32
		if err := rows.Scan(&evID, &delID, &hookID, &stale); err != nil {
			return fmt.Errorf("scan fan-out: %w", err)
		}
		if stale != nil {
			views.markStale(batch, *stale)
			continue
		}
		p := byID[*evID]
		if p == nil {
			continue
		}
		p.inserted = true
		if delID != nil {
			p.tasks = append(p.tasks, wire.Task{DeliveryID: *delID, EventID: p.id, WebhookID: *hookID, TenantID: p.tenantID,
				Priority: p.req.Priority, Attempt: 1, CreatedAt: p.createdAt, CorrelationID: p.req.CorrelationID})
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("insert events: %w", err)
	}
	return nil
}
