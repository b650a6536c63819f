package delivery

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/breaker"
	"github.com/hookline/hookline/internal/ratelimit"
	"github.com/hookline/hookline/internal/redistest"
	"github.com/hookline/hookline/internal/retry"
	"github.com/hookline/hookline/internal/schedule"
	"github.com/hookline/hookline/internal/webhook"
	"github.com/hookline/hookline/internal/wire"
)

// guardFixture is a Guard on a Redis key prefix of its own, for a webhook
// whose bucket holds one token refilled once a minute.
type guardFixture struct {
	ctx    context.Context
	rdb    *redis.Client
	prefix string
	guard  *Guard
	limits *ratelimit.Limiter
	task   wire.Task
	job    job
}

func newGuardFixture(t *testing.T) *guardFixture {
	t.Helper()
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: redistest.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	prefix := redistest.Prefix(t)
	limits := ratelimit.New(rdb, prefix)
	f := &guardFixture{ctx: context.Background(), rdb: rdb, prefix: prefix, limits: limits,
		guard: NewGuard(breaker.New(rdb, prefix), limits, nil, slog.New(slog.DiscardHandler)),
		task:  wire.Task{DeliveryID: uuid.New(), WebhookID: uuid.New(), TenantID: uuid.New(), Attempt: 1},
		job:   job{Breaker: webhook.DefaultBreakerConfig(), RateLimit: webhook.RateLimit{RequestsPerMinute: 1, Burst: 1}}}
	f.job.Breaker.Enabled = true
	return f
}

func (f *guardFixture) admit(now time.Time) admission {
	return f.guard.admit(f.ctx, f.task, f.job, now, false)
}

// bucketHasToken reserves the webhook bucket's next slot directly, and
// reports whether it is now.
func (f *guardFixture) bucketHasToken(t *testing.T, now time.Time) bool {
	t.Helper()
	at, err := f.limits.Reserve(f.ctx, now, bucketsOf(f.task, f.job)...)
	require.NoError(t, err)
	return !at.After(now)
}

// The breaker check and the bucket take go to Redis together; an open
// circuit refuses the attempt and gives the token back, so that it spends
// none.
func TestGuardOpenCircuitSpendsNoToken(t *testing.T) {
	f := newGuardFixture(t)
	now := time.UnixMilli(1_700_000_000_000)
	state := f.prefix + "breaker:{" + f.task.WebhookID.String() + "}:state"
	require.NoError(t, f.rdb.HSet(f.ctx, state, "state", "open", "opened_at", now.UnixMilli(), "sleep_ms", 60_000).Err())
	for i := range 3 {
		adm := f.admit(now.Add(time.Duration(i) * time.Second))
		require.False(t, adm.allowed)
		require.Equal(t, schedule.CircuitOpen, adm.reason)
		require.Equal(t, now.Add(time.Minute), adm.until, "parked until the half-open time")
	}
	require.True(t, f.bucketHasToken(t, now.Add(3*time.Second)), "the open circuit spent the bucket's token")
}

// With the circuit closed the attempt takes the token, and the next one
// gets its own slot, a minute later; the one after that, the slot after.
func TestGuardReservesEachDeliveryItsOwnSlot(t *testing.T) {
	f := newGuardFixture(t)
	now := time.UnixMilli(1_700_000_000_000)
	require.True(t, f.admit(now).allowed)
	for i := 1; i <= 3; i++ {
		adm := f.admit(now)
		require.False(t, adm.allowed)
		require.Equal(t, schedule.RateLimited, adm.reason)
		require.True(t, adm.reserved)
		require.Equal(t, now.Add(time.Duration(i)*time.Minute), adm.until)
	}
	require.False(t, f.bucketHasToken(t, now))
}

// A delivery that comes back at its reserved slot goes without drawing from
// the bucket again.
func TestGuardHonoursAReservedSlot(t *testing.T) {
	f := newGuardFixture(t)
	now := time.UnixMilli(1_700_000_000_000)
	require.True(t, f.admit(now).allowed)
	adm := f.admit(now)
	require.Equal(t, now.Add(time.Minute), adm.until)
	require.True(t, f.guard.admit(f.ctx, f.task, f.job, adm.until, true).allowed)
	next := f.admit(adm.until)
	require.Equal(t, now.Add(2*time.Minute), next.until, "the reserved slot was not drawn twice")
}

// Without a breaker (disabled) the bucket alone decides.
func TestGuardWithoutBreakerUsesTheBucket(t *testing.T) {
	f := newGuardFixture(t)
	f.job.Breaker.Enabled = false
	now := time.UnixMilli(1_700_000_000_000)
	require.True(t, f.admit(now).allowed)
	require.Equal(t, schedule.RateLimited, f.admit(now).reason)
}

// With Run running, the calls of concurrent deliveries share pipelines,
// and each still reads its own answer: of many deliveries at the same
// moment, exactly the bucket's burst is let in and every other one gets a
// slot of its own.
func TestSharedPipelinesGiveEachDeliveryItsOwnAnswer(t *testing.T) {
	f := newGuardFixture(t)
	f.job.RateLimit = webhook.RateLimit{RequestsPerMinute: 600, Burst: 10}
	ctx, cancel := context.WithCancel(f.ctx)
	done := make(chan struct{})
	go func() { _ = f.guard.Run(ctx); close(done) }()
	require.Eventually(t, f.guard.pipes.Running, 5*time.Second, time.Millisecond)

	now := time.Now()
	results := make([]admission, 50)
	var wg sync.WaitGroup
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = f.admit(now)
		}()
	}
	wg.Wait()
	allowed := 0
	slots := map[time.Time]bool{}
	for _, adm := range results {
		if adm.allowed {
			allowed++
			continue
		}
		require.Equal(t, schedule.RateLimited, adm.reason)
		require.False(t, slots[adm.until], "two deliveries were given the same slot")
		slots[adm.until] = true
	}
	require.Equal(t, 10, allowed)
	cancel()
	<-done
	require.False(t, f.guard.pipes.Running())
}

// While Run runs, successes let through a closed circuit are counted
// locally and reach the breaker's window with the next flush; failures are
// recorded at once.
func TestSuccessesOfClosedCircuitsAreSentTogether(t *testing.T) {
	f := newGuardFixture(t)
	f.job.RateLimit = webhook.RateLimit{}
	b := breaker.New(f.rdb, f.prefix)
	hook := f.task.WebhookID.String()
	snapshot := func() breaker.Snapshot {
		s, err := b.Snapshot(f.ctx, hook, breakerConfig(f.job), time.Now())
		require.NoError(t, err)
		return s
	}
	ok := Response{StatusCode: 200}
	failed := Response{StatusCode: 500, Category: retry.ServerError}

	// Without Run, each outcome is recorded as it comes.
	adm := f.admit(time.Now())
	require.Equal(t, breaker.Closed, adm.state)
	f.guard.observe(f.ctx, f.task, f.job, ok, false, adm.state, time.Now())
	require.Equal(t, 1, snapshot().Successes)

	ctx, cancel := context.WithCancel(f.ctx)
	done := make(chan struct{})
	go func() { _ = f.guard.Run(ctx); close(done) }()
	require.Eventually(t, f.guard.pipes.Running, 5*time.Second, time.Millisecond)
	for range 3 {
		adm := f.admit(time.Now())
		f.guard.observe(f.ctx, f.task, f.job, ok, false, adm.state, time.Now())
	}
	// Counted here, not yet in the window (unless a flush came between).
	require.Eventually(t, func() bool { return snapshot().Successes == 4 }, 5*time.Second, 10*time.Millisecond)
	f.guard.successMu.Lock()
	require.Empty(t, f.guard.successes, "every count was sent")
	f.guard.successMu.Unlock()

	// Failures go to the breaker at once.
	for range 3 {
		adm := f.admit(time.Now())
		f.guard.observe(f.ctx, f.task, f.job, failed, false, adm.state, time.Now())
	}
	require.Equal(t, 3, snapshot().Failures)

	// A success counted as Run stops is sent before Run returns.
	require.True(t, f.guard.countSuccess(f.task.WebhookID, breakerConfig(f.job), time.Now()))
	cancel()
	<-done
	require.Equal(t, 5, snapshot().Successes)
	require.False(t, f.guard.countSuccess(f.task.WebhookID, breakerConfig(f.job), time.Now()), "no counting without Run")
}

// openCircuit opens the fixture's circuit in Redis, as another worker's
// failures would, with a sleep window of a minute from now.
func (f *guardFixture) openCircuit(t *testing.T, now time.Time) {
	t.Helper()
	state := f.prefix + "breaker:{" + f.task.WebhookID.String() + "}:state"
	require.NoError(t, f.rdb.HSet(f.ctx, state, "state", "open", "opened_at", now.UnixMilli(), "sleep_ms", 60_000).Err())
}

// Slots come from the worker's lease, and each renewal of the lease checks
// the circuit in the same round trip: 100 deliveries need 7 round trips
// (leases of 1, 2, 4, 8, 16, 32 and 64 slots).
func TestGuardLeasesSlotsAndChecksTheCircuitWithTheRenewal(t *testing.T) {
	f := newGuardFixture(t)
	counter := &redistest.Counter{}
	f.rdb.AddHook(counter)
	f.job.RateLimit = webhook.RateLimit{RequestsPerMinute: 60_000, Burst: 1000}
	now := time.UnixMilli(1_700_000_000_000)
	for i := range 100 {
		adm := f.admit(now)
		require.True(t, adm.allowed, "delivery %d", i+1)
		require.Equal(t, breaker.Closed, adm.state)
	}
	require.Equal(t, int64(7), counter.Pipelines())
	require.Equal(t, int64(14), counter.Scripts(), "a lease and a circuit check per round trip")
}

// A circuit found closed is taken as closed for closedFor: a circuit that
// another worker opened meanwhile is seen once that has passed. An open
// circuit is asked about every time.
func TestGuardTakesACircuitFoundClosedAsClosedForAMoment(t *testing.T) {
	f := newGuardFixture(t)
	f.job.RateLimit = webhook.RateLimit{}
	counter := &redistest.Counter{}
	f.rdb.AddHook(counter)
	now := time.UnixMilli(1_700_000_000_000)
	require.True(t, f.admit(now).allowed)
	require.Equal(t, int64(1), counter.Scripts())
	f.openCircuit(t, now)

	adm := f.admit(now.Add(closedFor - time.Millisecond))
	require.True(t, adm.allowed)
	require.Equal(t, breaker.Closed, adm.state)
	require.Equal(t, int64(1), counter.Scripts(), "not asked")

	for i := range 2 {
		adm = f.admit(now.Add(closedFor))
		require.False(t, adm.allowed)
		require.Equal(t, schedule.CircuitOpen, adm.reason)
		require.Equal(t, int64(2+i), counter.Scripts(), "asked")
	}
}

// This worker's own failure returns the circuit's state: a circuit opened
// elsewhere is seen at once, without waiting for closedFor.
func TestGuardLearnsTheCircuitFromItsOwnFailures(t *testing.T) {
	f := newGuardFixture(t)
	f.job.RateLimit = webhook.RateLimit{}
	now := time.UnixMilli(1_700_000_000_000)
	adm := f.admit(now)
	require.True(t, adm.allowed)
	f.openCircuit(t, now)
	f.guard.observe(f.ctx, f.task, f.job, Response{StatusCode: 500, Category: retry.ServerError}, false, adm.state, now)
	adm = f.admit(now)
	require.False(t, adm.allowed)
	require.Equal(t, schedule.CircuitOpen, adm.reason)
}

// A closed answer that arrives after an open one, to a question sent
// before the open answer arrived, may have been read before the circuit
// opened: the guard keeps asking Redis. A closed answer to a later
// question is kept.
func TestAStaleClosedAnswerDoesNotHideAnOpenCircuit(t *testing.T) {
	t.Parallel()
	g := &Guard{}
	hook := uuid.New()
	now := time.Now()
	early := g.ask()
	g.noteCircuit(hook, breaker.Open, now, g.ask())
	g.noteCircuit(hook, breaker.Closed, now, early)
	require.False(t, g.knownClosed(hook, now), "a closed answer read before the opening is not kept")

	g.noteCircuit(hook, breaker.Closed, now, g.ask())
	require.True(t, g.knownClosed(hook, now), "a closed answer asked after the opening is kept")
	g.noteCircuit(hook, breaker.HalfOpen, now, g.ask())
	require.False(t, g.knownClosed(hook, now))

	// Entries older than the sweep before last are dropped.
	g.noteCircuit(hook, breaker.Open, now, g.ask())
	g.sweep(now.Add(2 * time.Minute))
	g.sweep(now.Add(4 * time.Minute))
	require.NotContains(t, g.notClosed, hook)
}
