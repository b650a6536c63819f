package delivery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/hookline/hookline/internal/breaker"
	"github.com/hookline/hookline/internal/metrics"
	"github.com/hookline/hookline/internal/notify"
	"github.com/hookline/hookline/internal/ratelimit"
	"github.com/hookline/hookline/internal/redisbatch"
	"github.com/hookline/hookline/internal/retry"
	"github.com/hookline/hookline/internal/schedule"
	"github.com/hookline/hookline/internal/wire"
)

// Guard decides, before an attempt, whether the endpoint may be tried now
// (operator override, circuit breaker, token buckets) and feeds the breaker
// with each outcome. Redis holds the live breaker and buckets; when it is
// unreachable the breaker falls back to the state last persisted in
// Postgres (if younger than 5 minutes, else closed) and the buckets let
// everything through.
type Guard struct {
	breaker *breaker.Breaker
	limits  *ratelimit.Limiter
	pool    *pgxpool.Pool
	log     *slog.Logger
	// fallbackLogged limits the fallback warning to one a minute.
	fallbackLogged atomic.Int64
	// pipes: see Run.
	pipes *redisbatch.Pipelines
	// successes holds the healthy outcomes counted locally and not yet
	// sent (see observe); counting is true while Run sends them.
	successMu sync.Mutex
	successes map[successKey]*successCount
	counting  bool
	// closed holds, by webhook, until when its circuit is taken as closed
	// without asking Redis (see closedFor); swept is when expired entries
	// were last removed. asks numbers the questions to Redis about
	// circuits, and notClosed holds, by webhook, the number drawn when an
	// answer other than closed last arrived (see noteCircuit); entries
	// drawn by the sweep before last (sweptAsk, the number then) are gone.
	closedMu  sync.Mutex
	closed    map[uuid.UUID]time.Time
	swept     time.Time
	asks      atomic.Uint64
	notClosed map[uuid.UUID]uint64
	sweptAsk  uint64
}

// A circuit this worker found closed (the breaker's answer to a check or
// to an outcome it recorded) is taken as closed for closedFor without
// asking Redis again. Only another worker can open it meanwhile: this
// worker records its own failures at once and learns the state from the
// answer. So a circuit opened elsewhere is seen here within closedFor, or
// at this worker's next failure or lease renewal, whichever comes first;
// until then this worker may send the endpoint what it would have sent had
// the circuit opened closedFor later. Open and half-open circuits are
// always asked: probes are handed out by Redis alone.
const closedFor = time.Second

// Most outcomes are successes of deliveries let through a closed circuit.
// Such an outcome cannot move the circuit (only failures open it, and
// only probes decide a half-open period), so it needs no answer: while
// Run runs, the guard counts them locally, by webhook and second, and
// sends the counts to the breakers' windows every successFlush, in one
// pipeline, instead of one round trip each. The breaker's failure rate
// may then miss up to successFlush of a webhook's latest successes, which
// errs towards opening a circuit a little early, never late.
const successFlush = 200 * time.Millisecond

// successFlushTimeout bounds one flush; counts it could not send are
// dropped (Redis is down: the breakers fall back to Postgres meanwhile).
const successFlushTimeout = time.Second

type successKey struct {
	webhook uuid.UUID
	second  int64
}

type successCount struct {
	n   int
	cfg breaker.Config
}

// NewGuard returns a guard; breakers and buckets are Redis keys under the
// caller's prefix.
func NewGuard(b *breaker.Breaker, l *ratelimit.Limiter, pool *pgxpool.Pool, log *slog.Logger) *Guard {
	return &Guard{breaker: b, limits: l, pool: pool, log: log, pipes: redisbatch.New(b.Redis(), 0)}
}

// Run lets the Redis calls of deliveries in flight at the same moment share
// pipelines (see redisbatch), and sends the successes counted locally
// every successFlush, until ctx ends; then it sends what is counted.
// Without it each delivery sends its own calls and records each outcome.
// The worker runs it beside its handlers.
func (g *Guard) Run(ctx context.Context) error {
	g.setCounting(true)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(successFlush)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				g.flushSuccesses(ctx)
			}
		}
	}()
	err := g.pipes.Run(ctx)
	<-done
	g.setCounting(false)
	g.flushSuccesses(context.WithoutCancel(ctx))
	return err
}

func (g *Guard) setCounting(on bool) {
	g.successMu.Lock()
	g.counting = on
	g.successMu.Unlock()
}

// countSuccess counts a healthy outcome of webhook at now locally, and
// reports whether it did (false: Run is not running, record it).
func (g *Guard) countSuccess(webhook uuid.UUID, cfg breaker.Config, now time.Time) bool {
	g.successMu.Lock()
	defer g.successMu.Unlock()
	if !g.counting {
		return false
	}
	if g.successes == nil {
		g.successes = map[successKey]*successCount{}
	}
	k := successKey{webhook: webhook, second: now.Unix()}
	c := g.successes[k]
	if c == nil {
		c = &successCount{}
		g.successes[k] = c
	}
	c.n++
	c.cfg = cfg
	return true
}

// flushSuccesses sends the counted successes to the breakers' windows.
func (g *Guard) flushSuccesses(ctx context.Context) {
	g.successMu.Lock()
	counts := g.successes
	g.successes = nil
	g.successMu.Unlock()
	if len(counts) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, successFlushTimeout)
	defer cancel()
	pipe := g.breaker.Pipeline()
	calls := make([]*breaker.SuccessesCall, 0, len(counts))
	for k, c := range counts {
		call, err := g.breaker.QueueSuccesses(ctx, pipe, k.webhook.String(), c.cfg, k.second, c.n)
		if err != nil {
			g.log.Warn("successes not counted", "webhook_id", k.webhook.String(), "error", err)
			continue
		}
		calls = append(calls, call)
	}
	_, _ = pipe.Exec(ctx)
	for _, call := range calls {
		if err := call.Err(); err != nil {
			g.fallback(err)
			return
		}
	}
	if len(calls) > 0 {
		g.redisAnswered()
	}
}

// knownClosed reports whether webhook's circuit was found closed less than
// closedFor before now.
func (g *Guard) knownClosed(webhook uuid.UUID, now time.Time) bool {
	g.closedMu.Lock()
	defer g.closedMu.Unlock()
	return now.Before(g.closed[webhook])
}

// ask numbers a question to Redis about a circuit, drawn before it is
// sent, for noteCircuit.
func (g *Guard) ask() uint64 { return g.asks.Add(1) }

// noteCircuit remembers the state of webhook's circuit the breaker
// answered at now to the question numbered asked: closed is taken as
// closed until closedFor later; any other state is asked again next time.
//
// Answers arrive out of order (two pipelines in flight, or a cluster's
// nodes answering a pipeline's parts separately): a closed answer to a
// question sent before another answer said the circuit was open or
// half-open may have been read before that change, and is not kept, lest
// the worker take an open circuit as closed for closedFor.
func (g *Guard) noteCircuit(webhook uuid.UUID, state breaker.State, now time.Time, asked uint64) {
	g.closedMu.Lock()
	defer g.closedMu.Unlock()
	if g.closed == nil {
		g.closed, g.notClosed = map[uuid.UUID]time.Time{}, map[uuid.UUID]uint64{}
	}
	if now.Sub(g.swept) > time.Minute {
		g.sweep(now)
	}
	if state != breaker.Closed {
		delete(g.closed, webhook)
		g.notClosed[webhook] = g.asks.Add(1)
		return
	}
	if asked < g.notClosed[webhook] {
		return
	}
	g.closed[webhook] = now.Add(closedFor)
}

// sweep removes the expired entries of closed, and those of notClosed
// older than the previous sweep (no question is in flight that long).
func (g *Guard) sweep(now time.Time) {
	for k, until := range g.closed {
		if !now.Before(until) {
			delete(g.closed, k)
		}
	}
	for k, n := range g.notClosed {
		if n <= g.sweptAsk {
			delete(g.notClosed, k)
		}
	}
	g.swept, g.sweptAsk = now, g.asks.Load()
}

// forgetCircuit makes the next check of webhook's circuit ask Redis.
func (g *Guard) forgetCircuit(webhook uuid.UUID) {
	g.closedMu.Lock()
	defer g.closedMu.Unlock()
	delete(g.closed, webhook)
}

// pipeline runs the calls that queue puts on a pipeline; each call's
// outcome (and error) is read from its own result.
func (g *Guard) pipeline(ctx context.Context, queue func(redis.Pipeliner)) { g.pipes.Do(ctx, queue) }

// halfOpenNoProbe is how long a delivery waits while Redis is unreachable
// and the persisted circuit is open.
const halfOpenNoProbe = 5 * time.Second

// admission is the guard's verdict.
type admission struct {
	allowed bool
	probe   bool
	// until is when a delivery not allowed may be looked at again; zero
	// with reason circuit_open: until an operator acts.
	until  time.Time
	reason schedule.Reason // circuit_open or rate_limited when not allowed
	// reserved: until is the delivery's own reserved rate-limit slot.
	reserved bool
	// state is the circuit's state as the breaker answered; empty when it
	// was not asked (disabled, overridden, or Redis unreachable).
	state breaker.State
}

// admit decides about attempt t.Attempt of j at now. reserved is true when
// the message carries a rate-limit slot reserved for it that has come:
// nothing more is drawn from the buckets.
func (g *Guard) admit(ctx context.Context, t wire.Task, j job, now time.Time, reserved bool) admission {
	forced, forcedUntil, overridden := j.Circuit.Override(now)
	if overridden && forced == breaker.Open {
		var until time.Time // held until an operator acts
		if forcedUntil != nil {
			until = *forcedUntil
		}
		return admission{until: until, reason: schedule.CircuitOpen}
	}
	forcedClosed := overridden && forced == breaker.Closed
	asked := g.ask()
	// The breaker check and the slot reservation travel to Redis together,
	// in one round trip, and neither is needed for most deliveries: slots
	// come from the worker's lease on the buckets (ratelimit.ReserveLeased),
	// and a circuit this worker found closed a moment ago is taken as
	// closed (see closedFor). A slot reserved for an attempt the breaker
	// refuses is given back, so that an open circuit spends none.
	var allow *breaker.AllowCall
	var allowErr error
	checkCircuit := j.Breaker.Enabled && !forcedClosed
	knownClosed := checkCircuit && g.knownClosed(t.WebhookID, now)
	queueAllow := func(pipe redis.Pipeliner) {
		allow, allowErr = g.breaker.QueueAllow(ctx, pipe, t.WebhookID.String(), breakerConfig(j), now)
	}
	buckets := bucketsOf(t, j)
	reserving := !reserved && len(buckets) > 0
	slot := now // no bucket, or a slot already reserved: now
	var reserveErr error
	if reserving {
		// A renewal of the lease asks about the circuit too, at no cost.
		renewed := false
		slot, _, reserveErr = g.limits.ReserveLeased(ctx, now, func(queue func(redis.Pipeliner)) {
			renewed = true
			g.pipeline(ctx, func(pipe redis.Pipeliner) {
				queue(pipe)
				if checkCircuit {
					queueAllow(pipe)
				}
			})
		}, buckets...)
		switch {
		case reserveErr != nil:
			slot = now
		case renewed:
			g.redisAnswered()
		}
	}
	if checkCircuit && !knownClosed && allow == nil && allowErr == nil {
		g.pipeline(ctx, queueAllow)
	}
	cancel := func() {
		// A leased slot goes back to the buckets too: kept in the lease,
		// it would be lost if no other delivery came for it.
		if reserving && reserveErr == nil {
			if err := g.limits.CancelReservation(context.WithoutCancel(ctx), now, slot, buckets...); err != nil {
				g.fallback(err)
			}
		}
	}

	probe := false
	var state breaker.State
	switch {
	case allow != nil || allowErr != nil:
		v, tr, err := breaker.Verdict{}, breaker.NoTransition, allowErr
		if err == nil {
			v, tr, err = allow.Result()
		}
		switch {
		case err != nil:
			g.forgetCircuit(t.WebhookID)
			g.fallback(err)
			if j.Circuit.Fallback(now) == breaker.Open {
				cancel()
				return admission{until: now.Add(halfOpenNoProbe), reason: schedule.CircuitOpen}
			}
		default:
			g.redisAnswered()
			metrics.CircuitState.Set(t.WebhookID, circuitGauge(v.State), now)
			g.noteCircuit(t.WebhookID, v.State, now, asked)
			g.transition(ctx, t, j, tr, now)
			if !v.Allowed {
				cancel()
				return admission{until: now.Add(v.RetryIn), reason: schedule.CircuitOpen, state: v.State}
			}
			probe, state = v.Probe, v.State
		}
	case knownClosed:
		state = breaker.Closed
	}
	switch {
	case errors.Is(reserveErr, ratelimit.ErrLeasePaused):
		// Failing open; the failure that paused the lease was reported.
	case reserveErr != nil:
		g.fallback(reserveErr)
	case slot.Sub(now) > reservedSlack:
		if probe {
			g.release(ctx, t)
		}
		metrics.RateLimitHits.WithLabelValues("delivery").Inc()
		return admission{until: slot, reason: schedule.RateLimited, reserved: true, state: state}
	}
	return admission{allowed: true, probe: probe, state: state}
}

// reservedSlack is how far in the future a reserved slot may be and still
// be taken as now: closer than that, waiting through the broker would only
// be later.
const reservedSlack = 20 * time.Millisecond

// release gives back a probe that will not be sent.
func (g *Guard) release(ctx context.Context, t wire.Task) {
	if err := g.breaker.Release(context.WithoutCancel(ctx), t.WebhookID.String()); err != nil {
		g.fallback(err)
	}
}

// observe feeds an attempt's outcome to the breaker, and exports the state
// the breaker answers (a webhook whose breaker is disabled has a circuit
// that is always closed). Client errors other than 408 and 429 say nothing
// about the endpoint's health and count as successes. state is the
// circuit's state as admit found it: a success let through a closed
// circuit, not a probe, is counted locally (see successFlush).
func (g *Guard) observe(ctx context.Context, t wire.Task, j job, res Response, probe bool, state breaker.State, now time.Time) {
	if !j.Breaker.Enabled {
		metrics.CircuitState.Set(t.WebhookID, metrics.CircuitClosed, now)
		return
	}
	if state == breaker.Closed && !probe && healthy(res) && g.countSuccess(t.WebhookID, breakerConfig(j), now) {
		metrics.CircuitState.Set(t.WebhookID, metrics.CircuitClosed, now)
		return
	}
	var rec *breaker.RecordCall
	var err error
	asked := g.ask()
	g.pipeline(ctx, func(pipe redis.Pipeliner) {
		rec, err = g.breaker.QueueRecord(ctx, pipe, t.WebhookID.String(), breakerConfig(j), now, healthy(res), probe)
	})
	var tr breaker.Transition
	if err == nil {
		state, tr, err = rec.Result()
	}
	if err != nil {
		g.forgetCircuit(t.WebhookID)
		g.fallback(err)
		return
	}
	g.redisAnswered()
	g.noteCircuit(t.WebhookID, state, now, asked)
	metrics.CircuitState.Set(t.WebhookID, circuitGauge(state), now)
	g.transition(ctx, t, j, tr, now)
}

// circuitGauge is the value of hookline_circuit_breaker_state for s.
func circuitGauge(s breaker.State) float64 {
	switch s {
	case breaker.Open:
		return metrics.CircuitOpen
	case breaker.HalfOpen:
		return metrics.CircuitHalfOpen
	}
	return metrics.CircuitClosed
}

func healthy(res Response) bool {
	switch res.Category {
	case "", retry.ClientError, retry.PayloadTooLarge:
		return res.StatusCode != 408
	}
	return false
}

// persistSQL keeps the last state of a circuit in Postgres, the fallback
// for a Redis outage. updated_at is the moment the transition was decided,
// and an older decision never overwrites a newer one (two workers may
// persist in the opposite order of their decisions). Operator overrides in
// the same row are left alone.
const persistSQL = `INSERT INTO circuit_breaker_states (webhook_id, state, opened_at, sleep_window_ms, updated_at)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (webhook_id) DO UPDATE SET state = $2, opened_at = $3, sleep_window_ms = $4, updated_at = $5
WHERE circuit_breaker_states.updated_at <= $5`

// transition records a state change: Postgres, the transitions counter and
// a log line (the state gauge is the caller's, set from every answer of
// the breaker).
func (g *Guard) transition(ctx context.Context, t wire.Task, j job, tr breaker.Transition, now time.Time) {
	if tr == breaker.NoTransition {
		return
	}
	metrics.CircuitTransitions.WithLabelValues(string(tr)).Inc()
	state := "closed"
	switch tr {
	case breaker.Opened, breaker.Reopened:
		state = "open"
	case breaker.HalfOpened:
		state = "half_open"
	}
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.AddEvent("circuit_transition", trace.WithAttributes(attribute.String("hookline.transition", string(tr)),
			attribute.String("hookline.circuit_state", state)))
	}
	var openedAt *time.Time
	var sleepMS int64
	if snap, err := g.breaker.Snapshot(ctx, t.WebhookID.String(), breakerConfig(j), now); err == nil && state != "closed" {
		openedAt, sleepMS = &snap.OpenedAt, snap.SleepWindow.Milliseconds()
	}
	if _, err := g.pool.Exec(context.WithoutCancel(ctx), persistSQL, t.WebhookID, state, openedAt, sleepMS, now); err != nil {
		g.log.WarnContext(ctx, "circuit state not persisted", "webhook_id", t.WebhookID.String(), "error", err)
	}
	g.moveParked(ctx, t, tr, openedAt, sleepMS)
	g.countReopens(ctx, t, tr)
	if tr == breaker.Opened || tr == breaker.ClosedAgain {
		g.recordOwnerEvent(ctx, t, j, tr, now, sleepMS)
	}
	g.log.WarnContext(ctx, "circuit breaker transition", "tenant_id", t.TenantID.String(), "webhook_id", t.WebhookID.String(),
		"transition", string(tr), "state", state, "sleep_window_ms", sleepMS)
}

// reopensSQL counts a webhook's circuit re-openings in a row ($2 true: one
// more; false: it closed, none), which can disable it (package
// autodisable).
const reopensSQL = `UPDATE webhooks SET circuit_reopens = CASE WHEN $2 THEN circuit_reopens + 1 ELSE 0 END
WHERE id = $1 AND ($2 OR circuit_reopens > 0)`

// countReopens keeps the count of re-openings in a row of t's circuit.
func (g *Guard) countReopens(ctx context.Context, t wire.Task, tr breaker.Transition) {
	if tr != breaker.Reopened && tr != breaker.ClosedAgain {
		return
	}
	if _, err := g.pool.Exec(context.WithoutCancel(ctx), reopensSQL, t.WebhookID, tr == breaker.Reopened); err != nil {
		g.log.WarnContext(ctx, "circuit re-opening not counted", "webhook_id", t.WebhookID.String(), "error", err)
	}
}

// moveParked applies a circuit's decision to the deliveries parked behind
// it: released on a close, held until the next half-open time on an
// opening. If this fails, the wakers still let them go at their old time
// and the breaker decides again then.
func (g *Guard) moveParked(ctx context.Context, t wire.Task, tr breaker.Transition, openedAt *time.Time, sleepMS int64) {
	ctx = context.WithoutCancel(ctx)
	var err error
	switch {
	case tr == breaker.ClosedAgain:
		err = breaker.ReleaseParked(ctx, g.pool, t.WebhookID)
	case (tr == breaker.Opened || tr == breaker.Reopened) && openedAt != nil:
		halfOpen := openedAt.Add(time.Duration(sleepMS) * time.Millisecond)
		err = breaker.HoldParked(ctx, g.pool, t.WebhookID, &halfOpen)
	}
	if err != nil {
		g.log.WarnContext(ctx, "deliveries parked behind the circuit not moved", "webhook_id", t.WebhookID.String(), "error", err)
	}
}

// recordOwnerEvent records the circuit notification (see package notify),
// unless the transition was decided by the outcome of a notification's own
// delivery, which would start a loop. Its deliveries are enqueued by the
// outbox relay.
func (g *Guard) recordOwnerEvent(ctx context.Context, t wire.Task, j job, tr breaker.Transition, now time.Time, sleepMS int64) {
	eventType := notify.CircuitOpened
	if tr == breaker.ClosedAgain {
		eventType = notify.CircuitRecovered
	}
	if notify.IsNotification(j.EventType) {
		notify.Suppressed(eventType)
		g.log.InfoContext(ctx, "owner notification suppressed: the transition came from delivering a notification",
			"webhook_id", t.WebhookID.String(), "event_type", eventType)
		return
	}
	n := notify.Notification{TenantID: t.TenantID, Type: eventType, About: t.WebhookID, At: now,
		Key: fmt.Sprintf("circuit:%s:%s:%d", t.WebhookID, tr, now.UnixMilli()),
		Data: map[string]any{"webhook_id": t.WebhookID, "url": j.URL, "transition": string(tr),
			"at": now.UTC().Format(time.RFC3339Nano), "sleep_window_ms": sleepMS}}
	if _, err := notify.Record(context.WithoutCancel(ctx), g.pool, n); err != nil {
		g.log.WarnContext(ctx, "owner notification not recorded", "webhook_id", t.WebhookID.String(), "event_type", eventType, "error", err)
	}
}

// redisAnswered ends the fallback, if it was on: Redis answered a circuit
// check, an outcome's record, a lease renewal or a flush of successes. Any
// call that fails turns it on (fallback), so it follows the latest of them.
func (g *Guard) redisAnswered() { metrics.RedisFallback.Set(0) }

func (g *Guard) fallback(err error) {
	metrics.RedisFallback.Set(1)
	now := time.Now().Unix()
	if last := g.fallbackLogged.Load(); now-last >= 60 && g.fallbackLogged.CompareAndSwap(last, now) {
		g.log.Warn("redis unreachable: circuit breakers fall back to Postgres state, rate limits are not enforced", "error", err)
	}
}

func breakerConfig(j job) breaker.Config { return j.Breaker.Breaker() }

// bucketsOf names the webhook's and the tenant's delivery buckets; a zero
// limit (never set) is no bucket.
func bucketsOf(t wire.Task, j job) []ratelimit.Bucket {
	var out []ratelimit.Bucket
	if l := j.RateLimit; l.RequestsPerMinute > 0 && l.Burst > 0 {
		out = append(out, ratelimit.Bucket{Key: ratelimit.WebhookKey(t.TenantID.String(), t.WebhookID.String()), Limit: ratelimit.Limit{PerMinute: l.RequestsPerMinute, Burst: l.Burst}})
	}
	if l := j.TenantLimit; l.RequestsPerMinute > 0 && l.Burst > 0 {
		out = append(out, ratelimit.Bucket{Key: ratelimit.TenantKey(t.TenantID.String()), Limit: ratelimit.Limit{PerMinute: l.RequestsPerMinute, Burst: l.Burst}})
	}
	return out
}
