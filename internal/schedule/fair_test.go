package schedule

import (
	"context"
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

func TestAloneATenantUsesEverySlotButTheReserve(t *testing.T) {
	t.Parallel()
	g := NewGate(GateConfig{Slots: 10, Reserve: 2, Wait: time.Millisecond})
	a := uuid.New()
	enterN(t, g, a, 8)
	require.Nil(t, g.Enter(context.Background(), a), "the reserve is not for a tenant alone")
	require.Equal(t, 8, g.InFlight(a))
}

func TestTheReserveIsThereForANewTenantAtOnce(t *testing.T) {
	t.Parallel()
	g := NewGate(GateConfig{Slots: 10, Reserve: 2, Wait: time.Millisecond})
	a, b := uuid.New(), uuid.New()
	enterN(t, g, a, 8)
	enterN(t, g, b, 2)
	require.Nil(t, g.Enter(context.Background(), b), "every slot is taken")
}

func TestATenantOverItsShareCannotTakeTheReserve(t *testing.T) {
	t.Parallel()
	g := NewGate(GateConfig{Slots: 10, Reserve: 4, Wait: time.Millisecond})
	a, b := uuid.New(), uuid.New()
	held := enterN(t, g, a, 6)
	enterN(t, g, b, 1)
	// a holds 6 of 10 with b active: its share is 5, and 3 free slots are
	// not more than the reserve.
	require.Nil(t, g.Enter(context.Background(), a))
	// b, under its share, takes the free slots.
	enterN(t, g, b, 3)
	// Once a is back under its share, it may take a free slot again, up to
	// its share.
	held[0].Done()
	held[1].Done()
	enterN(t, g, a, 1)
	require.Nil(t, g.Enter(context.Background(), a), "a is at its share and only the reserve is free")
}

func TestUnderItsShareATenantTakesAnyFreeSlot(t *testing.T) {
	t.Parallel()
	g := NewGate(GateConfig{Slots: 10, Reserve: 4, Wait: time.Millisecond})
	a, b := uuid.New(), uuid.New()
	enterN(t, g, a, 4)
	enterN(t, g, b, 1)
	// a (4) is under its share (5): it may take a slot although only the
	// reserve's worth is left beyond it.
	enterN(t, g, a, 1)
	require.Nil(t, g.Enter(context.Background(), a), "at its share, with no more than the reserve free")
}

func TestAWaiterGetsTheNextFreedSlot(t *testing.T) {
	t.Parallel()
	g := NewGate(GateConfig{Slots: 2, Reserve: 0, Wait: time.Minute})
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
	g := NewGate(GateConfig{Slots: 1, Reserve: 0, Wait: time.Minute})
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
	g := NewGate(GateConfig{Slots: 1, Reserve: 0, MaxWaiters: 2, Wait: time.Minute})
	a := uuid.New()
	enterN(t, g, a, 1)
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

func TestDeferHandsOutTheTenantsNextSlotsOneAfterTheOther(t *testing.T) {
	t.Parallel()
	g := NewGate(GateConfig{Slots: 4, Reserve: 0, Wait: time.Millisecond})
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	g.now = func() time.Time { return now }
	a := uuid.New()
	held := enterN(t, g, a, 4)
	// Each slot is held 8 s: the moving average reaches 8 s from its 100 ms
	// start only slowly, so set it through many slots.
	for range 25 {
		now = now.Add(8 * time.Second)
		for i := range held {
			held[i].Done()
			held[i] = g.Enter(context.Background(), a)
			require.NotNil(t, held[i])
		}
	}
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

func TestAnIdleTenantIsForgotten(t *testing.T) {
	t.Parallel()
	g := NewGate(GateConfig{Slots: 4, Reserve: 1, Wait: time.Millisecond})
	a, b := uuid.New(), uuid.New()
	for _, s := range append(enterN(t, g, a, 2), enterN(t, g, b, 1)...) {
		s.Done()
	}
	require.Equal(t, Stats{InFlight: 0, Tenants: 0, Share: 4}, g.Stats())
}

func TestTheReserveIsAtMostHalfTheSlots(t *testing.T) {
	t.Parallel()
	g := NewGate(GateConfig{Slots: 4, Reserve: 100, Wait: time.Millisecond})
	enterN(t, g, uuid.New(), 2)
}

// TestSharesUnderContention runs many tenants through a small gate at once
// and checks the invariants at every entry: never more slots than the
// gate has, never a tenant above all but the reserve.
func TestSharesUnderContention(t *testing.T) {
	t.Parallel()
	const slots, reserve = 16, 4
	g := NewGate(GateConfig{Slots: slots, Reserve: reserve, Wait: 5 * time.Millisecond})
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
				if inFlight.Add(1) > slots || perTenant[i].Add(1) > slots-reserve {
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
