package event

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookline/hookline/internal/filter"
	"github.com/hookline/hookline/internal/metrics"
	"github.com/hookline/hookline/internal/webhook"
)

// Payload filters on the publish path.
//
// Fan-out itself is one SQL statement (see publishSQL), but a webhook's
// payload filter is a CEL expression only Go can evaluate. So before an
// event joins the group commit, the publish evaluates the filters of its
// tenant's webhooks as a filterView knows them, and the statement is told
// which webhooks refused it. Views are cached per tenant, and programs per
// expression, so that a filter is compiled once per version, not per event.
//
// A cached view may be out of date: another api may have changed a filter
// since. The statement therefore also receives the version (updated_at,
// which every update moves forward) of every filtered webhook the view
// holds, and checks, in the same snapshot as the fan-out, that the tenant
// has no other active filtered webhook and no other version. An event
// whose view is stale is not inserted; its publish loads the view afresh
// and tries again. Every delivery is thus decided by the filters in force
// at the commit, whichever api serves the publish, at the price of one
// index lookup per tenant and commit.

// filterView is one tenant's active webhooks with a filter, as loaded at
// one moment.
type filterView struct {
	tenantID uuid.UUID
	hooks    []filteredHook
}

// filteredHook is one webhook of a view: the version of its filter, its
// event types, and the compiled filter (nil if it no longer compiles: the
// rules tightened since it was registered; it then matches nothing).
type filteredHook struct {
	id        uuid.UUID
	updatedAt time.Time
	events    []string
	program   *filter.Program
}

// maxViews bounds the tenants whose views are cached; past it an arbitrary
// one makes room (and is loaded again at its tenant's next publish).
const maxViews = 10_000

// filterViews caches a view per tenant.
type filterViews struct {
	pool     *pgxpool.Pool
	programs *filter.Cache
	log      *slog.Logger

	mu    sync.Mutex
	views map[uuid.UUID]*filterView
}

func newFilterViews(pool *pgxpool.Pool, log *slog.Logger) *filterViews {
	return &filterViews{pool: pool, programs: filter.NewCache(0), log: log, views: map[uuid.UUID]*filterView{}}
}

const loadViewSQL = `SELECT id, updated_at, events, filter FROM webhooks
WHERE tenant_id = $1 AND filter <> '' AND active AND deleted_at IS NULL`

// view returns the tenant's view: the cached one, unless fresh asks for
// one loaded now (the cached one was found stale).
func (f *filterViews) view(ctx context.Context, tenantID uuid.UUID, fresh bool) (*filterView, error) {
	if !fresh {
		f.mu.Lock()
		v, ok := f.views[tenantID]
		f.mu.Unlock()
		if ok {
			return v, nil
		}
	}
	v, err := f.load(ctx, tenantID)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.views[tenantID]; !ok && len(f.views) >= maxViews {
		for k := range f.views {
			delete(f.views, k)
			break
		}
	}
	f.views[tenantID] = v
	return v, nil
}

// loadWait bounds the load of a view. Like the commit (see
// committer.submit), it does not end with the caller's context: a publish
// whose client is gone still reaches its commit.
const loadWait = 10 * time.Second

func (f *filterViews) load(ctx context.Context, tenantID uuid.UUID) (*filterView, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), loadWait)
	defer cancel()
	rows, err := f.pool.Query(ctx, loadViewSQL, tenantID)
	if err != nil {
		return nil, fmt.Errorf("load webhook filters: %w", err)
	}
	v := &filterView{tenantID: tenantID}
	var h filteredHook
	var expr string
	_, err = pgx.ForEachRow(rows, []any{&h.id, &h.updatedAt, &h.events, &expr}, func() error {
		p, err := f.programs.Program(expr)
		if err != nil {
			f.log.Warn("webhook filter does not compile: it matches nothing", "webhook_id", h.id.String(), "error", err)
		}
		v.hooks = append(v.hooks, filteredHook{id: h.id, updatedAt: h.updatedAt, events: h.events, program: p})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("load webhook filters: %w", err)
	}
	return v, nil
}

// refused evaluates the view's filters on the event and returns the
// webhooks whose filter does not let it through: false, or failing at run
// time (counted in hookline_filter_errors_total). Webhooks whose event
// types do not match are left to fan-out. Each distinct program is
// evaluated once, and the payload decoded once, and only if some filter
// is to be evaluated.
func (v *filterView) refused(eventType, source string, data []byte, log *slog.Logger) []uuid.UUID {
	var out []uuid.UUID
	var ev *filter.Event
	var decodeErr error
	results := map[*filter.Program]bool{}
	for _, h := range v.hooks {
		if !webhook.MatchAny(h.events, eventType) {
			continue
		}
		if ev == nil && decodeErr == nil {
			ev = &filter.Event{EventType: eventType, Source: source}
			ev.Data, decodeErr = filter.DecodeData(data)
		}
		ok, seen := results[h.program]
		if !seen {
			ok = evaluate(h.program, ev, decodeErr, h.id, log)
			results[h.program] = ok
		}
		if !ok {
			out = append(out, h.id)
		}
	}
	return out
}

// errNoProgram is the run-time error of a filter that no longer compiles.
var errNoProgram = errors.New("the filter does not compile")

// evaluate runs p on ev; a program that does not compile (nil), a payload
// that cannot be decoded, and a run-time error are no match.
func evaluate(p *filter.Program, ev *filter.Event, decodeErr error, hook uuid.UUID, log *slog.Logger) bool {
	err := decodeErr
	ok := false
	switch {
	case err != nil:
	case p == nil:
		err = errNoProgram
	default:
		ok, err = p.Match(ev)
	}
	if err != nil {
		reason := filter.Reason(err)
		metrics.FilterErrors.WithLabelValues(reason).Inc()
		log.Debug("webhook filter failed on an event: no match", "webhook_id", hook.String(), "event_type", ev.EventType,
			"reason", reason, "error", err)
		return false
	}
	return ok
}

// viewArgs are the views of a commit's events as publishSQL takes them:
// each view once, numbered, with the version of each of its webhooks.
type viewArgs struct {
	number       map[*filterView]int32
	numbers      []int32
	tenants      []uuid.UUID
	knownView    []int32
	knownHook    []uuid.UUID
	knownVersion []time.Time
}

func newViewArgs() *viewArgs {
	return &viewArgs{number: map[*filterView]int32{}}
}

func (a *viewArgs) add(v *filterView) {
	if _, ok := a.number[v]; ok {
		return
	}
	n := int32(len(a.numbers)) //nolint:gosec // a commit holds at most maxCommitBatch views
	a.number[v] = n
	a.numbers, a.tenants = append(a.numbers, n), append(a.tenants, v.tenantID)
	for _, h := range v.hooks {
		a.knownView, a.knownHook, a.knownVersion = append(a.knownView, n), append(a.knownHook, h.id), append(a.knownVersion, h.updatedAt)
	}
}

// of returns the view number of each event of batch.
func (a *viewArgs) of(batch []*pending) []int32 {
	out := make([]int32, len(batch))
	for i, p := range batch {
		out[i] = a.number[p.view]
	}
	return out
}

// markStale marks the events of view number n stale.
func (a *viewArgs) markStale(batch []*pending, n int32) {
	for _, p := range batch {
		if a.number[p.view] == n {
			p.stale = true
		}
	}
}
