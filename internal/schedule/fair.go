package schedule

import (
	"context"
	"sync"
	"time"

	"github.com/google/uuid"
)

// Gate shares one worker's delivery slots fairly between tenants.
//
// Each tenant with work in this worker is owed its fair share: the slots
// divided by the tenants with work here. A tenant below its share is always
// let in, even when others hold every slot; a tenant at or above its share
// only while the worker has a free slot. So a tenant alone may use every
// slot; as soon as a second tenant has work, it gets its share at once,
// without waiting for the first one's attempts to end (they may hang until
// their timeout), and the first cannot take a freed slot while the worker
// is full. Slots are never taken away from a delivery in flight: a tenant
// over its share shrinks as its attempts end. Attempts in flight stay
// below twice the slots: those of tenants over their share take free
// slots only, and the shares together are the slots.
//
// A delivery that finds no slot waits for one while its tenant is alone
// (deferring it would help nobody), else a little (bounded per tenant, so
// that one tenant's waiting messages cannot fill the worker's prefetch),
// then is deferred to its tenant's estimated next free slot (Defer): the tenant's
// measured slot time divided by its share, one slot after the other, like a
// reservation. The estimate only decides when a parked delivery is looked
// at again; whether it may then go is decided here again.
type Gate struct {
	slots      int
	maxWaiters int
	wait       time.Duration
	now        func() time.Time

	mu       sync.Mutex
	inFlight int
	// active counts the tenants with a slot or a waiter here.
	active  int
	tenants map[uuid.UUID]*tenantSlots
	// changed is closed and replaced whenever a slot is freed, waking the
	// waiters to look again.
	changed chan struct{}
}

type tenantSlots struct {
	inFlight, waiting int
	// hold is the moving average of how long this tenant's deliveries
	// hold a slot; started are the slots in flight.
	hold    time.Duration
	started map[*Slot]struct{}
	// backlog counts the tenant's deferred deliveries still waiting for a
	// slot, served one every step (see Defer) at its current pace.
	backlog Backlog
	// next is the latest free slot handed out by Defer.
	next time.Time
}

// GateConfig sizes a Gate.
type GateConfig struct {
	// Slots is the worker's concurrency.
	Slots int
	// MaxWaiters bounds the deliveries of one tenant waiting for a slot in
	// memory while other tenants have work. Default 8.
	MaxWaiters int
	// Wait is how long a delivery waits for a slot before it is deferred.
	// Default 250ms.
	Wait time.Duration
}

// Handlers is how many message handlers a worker with slots runs: twice
// the slots (attempts in flight stay below that, see Gate), and a quarter
// more that take in the messages of tenants over their share (and defer
// them) while the rest are busy, so that other tenants' messages behind
// them are reached.
func Handlers(slots int) int { return 2*slots + max(slots/4, 16) }

// initialHold is the slot time assumed for a tenant not measured yet.
const initialHold = 100 * time.Millisecond

// NewGate returns a gate of cfg.Slots slots.
func NewGate(cfg GateConfig) *Gate {
	g := &Gate{slots: max(cfg.Slots, 1), maxWaiters: cfg.MaxWaiters, wait: cfg.Wait, now: time.Now,
		tenants: map[uuid.UUID]*tenantSlots{}, changed: make(chan struct{})}
	if g.maxWaiters <= 0 {
		g.maxWaiters = 8
	}
	if g.wait <= 0 {
		g.wait = 250 * time.Millisecond
	}
	return g
}

// Slot is a taken slot; Done gives it back.
type Slot struct {
	g      *Gate
	tenant uuid.UUID
	start  time.Time
}

// Done frees the slot and feeds its duration into the tenant's estimate.
func (s *Slot) Done() { s.g.done(s) }

// Enter takes a slot for tenant, waiting for one while that harms no one:
// as long as the tenant is the only one with work here (up to Slots
// waiters: its messages fill the prefetch, but nobody else's are behind
// them), else up to the gate's wait and MaxWaiters. It returns nil when
// none came free in time (or ctx ended): the caller defers the delivery.
func (g *Gate) Enter(ctx context.Context, tenant uuid.UUID) *Slot {
	g.mu.Lock()
	ts := g.tenant(tenant)
	if g.allowed(ts) {
		return g.take(tenant, ts)
	}
	if ts.waiting >= g.maxWaitersOf(ts) {
		g.forget(tenant, ts)
		g.mu.Unlock()
		return nil
	}
	g.change(ts, 0, +1)
	var deadline <-chan time.Time // none while the tenant is alone
	for {
		if deadline == nil && !g.alone(ts) {
			timer := time.NewTimer(g.wait)
			defer timer.Stop()
			deadline = timer.C
		}
		changed := g.changed
		g.mu.Unlock()
		select {
		case <-changed:
		case <-deadline:
			return g.giveUp(tenant, ts)
		case <-ctx.Done():
			return g.giveUp(tenant, ts)
		}
		g.mu.Lock()
		if g.allowed(ts) {
			g.change(ts, 0, -1)
			return g.take(tenant, ts)
		}
		if ts.waiting > g.maxWaitersOf(ts) {
			// Another tenant has work now: this one's extra waiters make
			// room for its messages.
			g.mu.Unlock()
			return g.giveUp(tenant, ts)
		}
	}
}

// alone reports whether ts is the only tenant with work here; g.mu is held.
func (g *Gate) alone(ts *tenantSlots) bool {
	return g.active == 1 && (ts.inFlight > 0 || ts.waiting > 0)
}

// maxWaitersOf is how many deliveries of ts may wait for a slot: as many as
// the slots while it is alone, MaxWaiters once others have work; g.mu is
// held.
func (g *Gate) maxWaitersOf(ts *tenantSlots) int {
	if g.active == 0 || g.alone(ts) {
		return g.slots
	}
	return g.maxWaiters
}

// Defer returns when a delivery of tenant that found no slot should be
// looked at again: the tenant's next estimated free slot after those
// reserved before it and still waiting.
func (g *Gate) Defer(tenant uuid.UUID) time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	ts := g.tenant(tenant)
	now := g.now()
	// The tenant frees a slot every hold/inFlight on average. Until its
	// slots come back (endpoints that hang), the age of the oldest one
	// stands for hold.
	hold := ts.hold
	for s := range ts.started {
		hold = max(hold, now.Sub(s.start))
	}
	step := max(hold, time.Millisecond) / time.Duration(max(ts.inFlight, 1))
	due := ts.backlog.Reserve(now, step)
	ts.next = maxTime(ts.next, due)
	g.forget(tenant, ts)
	return due
}

// allowed applies the sharing rule to ts; g.mu is held.
func (g *Gate) allowed(ts *tenantSlots) bool {
	return ts.inFlight < g.shareLocked() || g.inFlight < g.slots
}

// shareLocked is the fair share: the slots divided by the tenants with
// work here (in flight or waiting); g.mu is held.
func (g *Gate) shareLocked() int {
	return g.slots / max(g.active, 1)
}

// change moves ts's counts, keeping the count of active tenants; g.mu is
// held.
func (g *Gate) change(ts *tenantSlots, inFlight, waiting int) {
	was := ts.inFlight > 0 || ts.waiting > 0
	ts.inFlight += inFlight
	ts.waiting += waiting
	g.inFlight += inFlight
	if is := ts.inFlight > 0 || ts.waiting > 0; is != was {
		if is {
			g.active++
			// The waiters of a tenant that was alone look again: they
			// are no longer free to wait without limit.
			g.broadcast()
		} else {
			g.active--
		}
	}
}

func (g *Gate) tenant(id uuid.UUID) *tenantSlots {
	ts, ok := g.tenants[id]
	if !ok {
		ts = &tenantSlots{hold: initialHold, started: map[*Slot]struct{}{}}
		g.tenants[id] = ts
	}
	return ts
}

// take hands out a slot and unlocks g.mu.
func (g *Gate) take(tenant uuid.UUID, ts *tenantSlots) *Slot {
	g.change(ts, +1, 0)
	s := &Slot{g: g, tenant: tenant, start: g.now()}
	ts.started[s] = struct{}{}
	g.mu.Unlock()
	return s
}

func (g *Gate) giveUp(tenant uuid.UUID, ts *tenantSlots) *Slot {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.change(ts, 0, -1)
	g.forget(tenant, ts)
	return nil
}

func (g *Gate) done(s *Slot) {
	g.mu.Lock()
	defer g.mu.Unlock()
	ts := g.tenants[s.tenant]
	delete(ts.started, s)
	held := g.now().Sub(s.start)
	g.change(ts, -1, 0)
	// An exponential moving average over about the last eight slots.
	ts.hold += (held - ts.hold) / 8
	g.forget(s.tenant, ts)
	g.broadcast()
}

// broadcast wakes every waiter to look again; g.mu is held.
func (g *Gate) broadcast() {
	close(g.changed)
	g.changed = make(chan struct{})
}

// forget drops the state of a tenant with no work here and no estimate
// still ahead, so that the map holds only the tenants of the moment.
func (g *Gate) forget(tenant uuid.UUID, ts *tenantSlots) {
	if ts.inFlight == 0 && ts.waiting == 0 && !ts.next.After(g.now()) {
		delete(g.tenants, tenant)
	}
}

// Stats is a snapshot of the gate, for metrics and tests.
type Stats struct {
	InFlight int
	Tenants  int
	Share    int
}

// Stats returns the gate's state.
func (g *Gate) Stats() Stats {
	g.mu.Lock()
	defer g.mu.Unlock()
	return Stats{InFlight: g.inFlight, Tenants: len(g.tenants), Share: g.shareLocked()}
}

// InFlight returns how many slots tenant holds.
func (g *Gate) InFlight(tenant uuid.UUID) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	if ts, ok := g.tenants[tenant]; ok {
		return ts.inFlight
	}
	return 0
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
