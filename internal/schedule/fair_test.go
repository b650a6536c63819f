package schedule

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// enterN takes n slots for tenant, requiring each.
func enterN(t *testing.T, g *Gate, tenant uuid.UUID, n int) []*Slot {
	t.Helper()
	out := make([]*Slot, n)
	for i := range out {
		out[i] = g.Enter(context.Background(), tenant)
		require.NotNil(t, out[i], "slot %d of tenant %s", i, tenant)
	}
	return out
}

func TestAloneATenantUsesEverySlotAndWaitsForMore(t *testing.T) {
	t.Parallel()
	g := NewGate(GateConfig{Slots: 3, MaxWaiters: 1, Wait: time.Millisecond})
	a := uuid.New()
	held := enterN(t, g, a, 3)
	// Alone, it waits for a slot however long (deferring it would help
	// nobody), as many deliveries as there are slots.
	got := make(chan *Slot, 3)
	for range 3 {
		go func() { got <- g.Enter(context.Background(), a) }()
	}
	require.Eventually(t, func() bool { return waiting(g, a) == 3 }, 5*time.Second, time.Millisecond)
	require.Nil(t, g.Enter(context.Background(), a), "beyond as many waiters as slots")
	held[0].Done()
	require.NotNil(t, <-got)
	require.Equal(t, 3, g.InFlight(a))
	require.Equal(t, 2, waiting(g, a))

	// Another tenant's work ends the open-ended wait: the waiters beyond
	// MaxWaiters give up (to be deferred), the rest wait their usual time.
	b := uuid.New()
	enterN(t, g, b, 1)
	require.Nil(t, <-got)
	require.Nil(t, <-got, "the last waiter's own wait ran out")
	require.Zero(t, waiting(g, a))
}

func TestANewTenantGetsItsShareAtOnceWhenEverySlotIsHeld(t *testing.T) {
	t.Parallel()
	g := NewGate(GateConfig{Slots: 10, Wait: time.Millisecond})
	a, b := uuid.New(), uuid.New()
	enterN(t, g, a, 10)
	// b's share is 5: let in beyond the slots, up to it.
	enterN(t, g, b, 5)
	require.Nil(t, g.Enter(context.Background(), b), "b is at its share and nothing is free")
	require.Nil(t, g.Enter(context.Background(), a), "a is over its share and nothing is free")
	require.Equal(t, 15, g.Stats().InFlight)
}

func TestATenantOverItsShareTakesOnlyFreeSlots(t *testing.T) {
	t.Parallel()
	g := NewGate(GateConfig{Slots: 10, Wait: time.Millisecond})
	a, b := uuid.New(), uuid.New()
	held := enterN(t, g, a, 8)
	enterN(t, g, b, 1)
	// a holds 8 of 10 with b active (share 5): it may take the one free slot.
	enterN(t, g, a, 1)
	require.Nil(t, g.Enter(context.Background(), a), "over its share with the worker full")
	// b, under its share, is let in although the worker is full.
	enterN(t, g, b, 4)
	// Slots a gives back do not go back to a while the worker is still full.
	held[0].Done()
	held[1].Done()
	require.Nil(t, g.Enter(context.Background(), a), "13 in flight of 10: nothing is free")
	// Once a is back under its share, it is let in again.
	for _, s := range held[2:6] {
		s.Done()
	}
	require.Equal(t, 3, g.InFlight(a))
	enterN(t, g, a, 2)
}

func TestSharesFollowTheTenantsWithWork(t *testing.T) {
	t.Parallel()
	g := NewGate(GateConfig{Slots: 12, Wait: time.Millisecond})
	a, b, c := uuid.New(), uuid.New(), uuid.New()
	enterN(t, g, a, 12)
	enterN(t, g, b, 6)
	cs := enterN(t, g, c, 4) // three tenants: 4 each
	require.Nil(t, g.Enter(context.Background(), c))
	require.Equal(t, 4, g.Stats().Share)
	for _, s := range cs {
		s.Done()
	}
	require.Equal(t, 6, g.Stats().Share, "c has no work left: two tenants share")
}

func TestAWaiterGetsTheNextFreedSlot(t *testing.T) {
	t.Parallel()
	g := NewGate(GateConfig{Slots: 2, Wait: time.Minute})
	a := uuid.New()
	held := enterN(t, g, a, 2)
	got := make(chan *Slot)
	go func() { got <- g.Enter(context.Background(), a) }()
	require.Eventually(t, func() bool { return g.Stats().Tenants == 1 && waiting(g, a) == 1 }, 5*time.Second, time.Millisecond)
	held[0].Done()
	select {
	case s := <-got:
		require.NotNil(t, s)
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter did not get the freed slot")
	}
}

func TestAWaiterGivesUpWhenItsContextEnds(t *testing.T) {
	t.Parallel()
	g := NewGate(GateConfig{Slots: 1, Wait: time.Minute})
	a := uuid.New()
	enterN(t, g, a, 1)
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan *Slot)
	go func() { got <- g.Enter(ctx, a) }()
	require.Eventually(t, func() bool { return waiting(g, a) == 1 }, 5*time.Second, time.Millisecond)
	cancel()
	require.Nil(t, <-got)
	require.Zero(t, waiting(g, a))
}

func TestWaitersPerTenantAreBounded(t *testing.T) {
	t.Parallel()
	g := NewGate(GateConfig{Slots: 2, MaxWaiters: 2, Wait: time.Minute})
	a, b := uuid.New(), uuid.New()
	enterN(t, g, a, 1)
	enterN(t, g, b, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for range 2 {
		go g.Enter(ctx, a)
	}
	require.Eventually(t, func() bool { return waiting(g, a) == 2 }, 5*time.Second, time.Millisecond)
	start := time.Now()
	require.Nil(t, g.Enter(context.Background(), a), "a third waiter is turned away at once")
	require.Less(t, time.Since(start), 30*time.Second)
}

// turnOver gives back every slot of held and takes a new one for tenant in
// its place, rounds times, moving the gate's clock with tick before each
// round.
func turnOver(t *testing.T, g *Gate, tenant uuid.UUID, held []*Slot, rounds int, tick func()) {
	t.Helper()
	for range rounds {
		tick()
		for i := range held {
			held[i].Done()
			held[i] = g.Enter(context.Background(), tenant)
			require.NotNil(t, held[i])
		}
	}
}

func TestDeferHandsOutTheTenantsNextSlotsOneAfterTheOther(t *testing.T) {
	t.Parallel()
	g := NewGate(GateConfig{Slots: 4, Wait: time.Millisecond})
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	g.now = func() time.Time { return now }
	a := uuid.New()
	held := enterN(t, g, a, 4)
	// Each slot is held 8 s: the moving average reaches 8 s from its 100 ms
	// start only slowly, so set it through many slots.
	turnOver(t, g, a, held, 25, func() { now = now.Add(8 * time.Second) })
	hold := g.tenants[a].hold
	require.InDelta(t, float64(8*time.Second), float64(hold), float64(50*time.Millisecond))
	// 4 slots of about 8 s: one frees every 2 s.
	first := g.Defer(a)
	second := g.Defer(a)
	require.Equal(t, now.Add(hold/4), first)
	require.Equal(t, first.Add(hold/4), second)

	// Slots that do not come back (a hanging endpoint) stretch the
	// estimate as they age.
	now = now.Add(time.Minute)
	third := g.Defer(a)
	require.Equal(t, now.Add(time.Minute/4), third)
}

// Reservations are counted at the tenant's current pace: those handed out
// while its slots looked long (a stall), at that pace, do not put a
// delivery deferred once they are short again behind them.
func TestDeferFollowsTheTenantsCurrentPace(t *testing.T) {
	t.Parallel()
	g := NewGate(GateConfig{Slots: 4, Wait: time.Millisecond})
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	g.now = func() time.Time { return now }
	a := uuid.New()
	held := enterN(t, g, a, 4)
	g.tenants[a].hold = 4 * time.Millisecond
	// A 2-s stall: its four slots look 2 s long, one frees every 500 ms.
	now = now.Add(2 * time.Second)
	var last time.Time
	for range 20 {
		last = g.Defer(a)
	}
	require.Equal(t, now.Add(10*time.Second), last)

	// The stall is over: for 100 ms its slots come back every 4 ms, and
	// the moving average forgets the stall.
	turnOver(t, g, a, held, 25, func() { now = now.Add(4 * time.Millisecond) })
	require.InDelta(t, float64(4*time.Millisecond), float64(g.tenants[a].hold), float64(time.Millisecond))
	g.tenants[a].hold = 4 * time.Millisecond
	// One every 1 ms at its pace now: the 20 were served in the 100 ms.
	require.Equal(t, now.Add(time.Millisecond), g.Defer(a))
	require.Equal(t, now.Add(2*time.Millisecond), g.Defer(a))
}

func TestAnIdleTenantIsForgotten(t *testing.T) {
	t.Parallel()
	g := NewGate(GateConfig{Slots: 4, Wait: time.Millisecond})
	a, b := uuid.New(), uuid.New()
	for _, s := range append(enterN(t, g, a, 2), enterN(t, g, b, 1)...) {
		s.Done()
	}
	require.Equal(t, Stats{InFlight: 0, Tenants: 0, Share: 4}, g.Stats())
}

// TestSharesUnderContention runs many tenants through a small gate at once
// and checks the invariants at every entry: never twice the slots in
// flight, never a tenant above the slots.
func TestSharesUnderContention(t *testing.T) {
	t.Parallel()
	const slots = 16
	g := NewGate(GateConfig{Slots: slots, Wait: 5 * time.Millisecond})
	tenants := make([]uuid.UUID, 6)
	for i := range tenants {
		tenants[i] = uuid.New()
	}
	var inFlight atomic.Int64
	perTenant := make([]atomic.Int64, len(tenants))
	var violations, entered atomic.Int64
	var wg sync.WaitGroup
	for w := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			i := w % len(tenants)
			for range 200 {
				s := g.Enter(context.Background(), tenants[i])
				if s == nil {
					continue
				}
				entered.Add(1)
				if inFlight.Add(1) >= 2*slots || perTenant[i].Add(1) > slots {
					violations.Add(1)
				}
				perTenant[i].Add(-1)
				inFlight.Add(-1)
				s.Done()
			}
		}()
	}
	wg.Wait()
	require.Zero(t, violations.Load())
	require.Positive(t, entered.Load())
	require.Equal(t, Stats{Share: slots}, g.Stats())
}

func waiting(g *Gate, tenant uuid.UUID) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	if ts, ok := g.tenants[tenant]; ok {
		return ts.waiting
	}
	return 0
}

// BenchmarkGateManyTenants measures one Enter and Done with 10,000
// tenants holding slots at once: the gate's cost per delivery does not
// grow with the tenants.
func BenchmarkGateManyTenants(b *testing.B) {
	for _, n := range []int{10, 10_000} {
		b.Run(fmt.Sprintf("tenants=%d", n), func(b *testing.B) {
			g := NewGate(GateConfig{Slots: 2 * n, Wait: time.Millisecond})
			tenants := make([]uuid.UUID, n)
			for i := range tenants {
				tenants[i] = uuid.New()
				g.Enter(context.Background(), tenants[i]) // each holds one slot
			}
			b.ResetTimer()
			for i := range b.N {
				if s := g.Enter(context.Background(), tenants[i%n]); s != nil {
					s.Done()
				}
			}
		})
	}
}
