package delivery

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/trace"

	"github.com/hookline/hookline/internal/batch"
	"github.com/hookline/hookline/internal/breaker"
	"github.com/hookline/hookline/internal/db"
	"github.com/hookline/hookline/internal/history"
	"github.com/hookline/hookline/internal/metrics"
	"github.com/hookline/hookline/internal/queue"
	"github.com/hookline/hookline/internal/retry"
	"github.com/hookline/hookline/internal/schedule"
	"github.com/hookline/hookline/internal/supervisor"
	"github.com/hookline/hookline/internal/tracing"
	"github.com/hookline/hookline/internal/webhook"
	"github.com/hookline/hookline/internal/wire"
)

// publisher is the part of queue.Publisher the worker uses.
type publisher interface {
	Publish(ctx context.Context, msgs ...queue.Message) error
	PublishDead(ctx context.Context, m queue.Message) error
}

// Header names the worker adds to messages it sends back.
const (
	// headerInternalRetries counts how often a message was put back for our
	// own failures (it sets the wait before the next try), and
	// headerInternalSince is when it was first put back (unix ms).
	headerInternalRetries = "x-internal-retries"
	headerInternalSince   = "x-internal-since"
	// HeaderDeadReason says why a message went to the dead-letter queue.
	HeaderDeadReason = "x-dead-reason"
	// HeaderTraceParent and HeaderTraceState carry the trace context of
	// the attempt that exhausted a delivery to the dead-letter queue.
	HeaderTraceParent = "traceparent"
	HeaderTraceState  = "tracestate"
)

const (
	// A message put back for our own failure comes back after 5 s, 10 s,
	// 20 s, then every 30 s for as long as the failure lasts, however long:
	// our outage is not the endpoint's failure, so it never spends the
	// delivery's retries nor sends it to the DLQ (see putBack).
	internalRetryBase = 5 * time.Second
	internalRetryMax  = 30 * time.Second
	inactiveDelay     = time.Minute
)

// Worker handles delivery messages: the queue.Handler of the worker
// process. Outcomes follow one rule: an endpoint's failure is an attempt
// (recorded, then retried or exhausted); our own failure (database, broker,
// shutdown) is not, and the message goes back without touching the
// delivery's retry budget.
type Worker struct {
	store   *store
	loads   *batch.Batcher[uuid.UUID, loadResult]
	records *batch.Batcher[attemptRecord, bool]
	parks   *batch.Batcher[schedule.Parking, bool]
	sender  *Sender
	guard   *Guard
	pub     publisher
	// gate shares the worker's slots between tenants; nil: no sharing.
	gate  *schedule.Gate
	waker *schedule.Waker
	log   *slog.Logger
	now   func() time.Time
	rnd   func() float64
	// tracer makes each attempt a span; the zero Tracer: tracing off.
	tracer tracing.Tracer
}

// NewWorker returns a worker. guard may be nil: no circuit breaker and no
// rate limits (benchmarks of the bare pipeline).
func NewWorker(pool *pgxpool.Pool, sender *Sender, guard *Guard, pub publisher, log *slog.Logger) *Worker {
	st := &store{pool: pool, hot: pool} // Serve gives hot a pool of its own
	return &Worker{store: st, loads: batch.New(st.loadBatch, recordBatchSize, recordWorkers).Window(loadWindow),
		records: batch.New(st.recordBatch, recordBatchSize, recordWorkers).Window(recordWindow).Urgent(releasesNext),
		parks: batch.New(func(ctx context.Context, ps []schedule.Parking) ([]bool, error) {
			return schedule.Park(ctx, st.hot, ps)
		}, recordBatchSize, recordWorkers).Window(recordWindow),
		sender: sender, guard: guard, pub: pub, waker: schedule.NewWaker(pool, pub, log),
		log: log, now: time.Now, rnd: rand.Float64}
}

// WithGate makes the worker share its slots between tenants through g (see
// schedule.Gate). Call it before Serve.
func (w *Worker) WithGate(g *schedule.Gate) *Worker {
	w.gate = g
	return w
}

// WithTracer makes every attempt a span of the trace of its event's
// publish (see trace.go). Call it before Serve.
func (w *Worker) WithTracer(t tracing.Tracer) *Worker {
	w.tracer = t
	return w
}

// Deliveries starting at the same moment are loaded by one query, and
// attempts finished at the same moment are recorded by one statement.
const (
	recordBatchSize = 128
	recordWorkers   = 4
	// hotConns: one connection per batch runner (loads, records, parks)
	// and a few for the enqueue marks.
	hotConns = 3*recordWorkers + 4
	// readyConns: the hot pool keeps one prepared connection for each
	// runner of loads and of records, which every delivery uses.
	readyConns = 2 * recordWorkers
	// A load waits up to loadWindow for others to share its statement,
	// and an attempt record (or a parking) up to recordWindow: the load
	// is on the way to the endpoint, the record only holds the message's
	// acknowledgement (and a retry's publish, a few milliseconds against
	// a backoff of a second or more). The record of an ordered delivery
	// that lets the next one of its key go does not wait (releasesNext).
	loadWindow   = time.Millisecond
	recordWindow = 20 * time.Millisecond
	// serveStopWithin bounds Serve's stop: longer than a consumer's grace
	// for its handlers plus the flush of the batches.
	serveStopWithin = 30 * time.Second
)

// Parts are the worker's long-running parts, in the order they start,
// consume (the queue consumer calling Handle) last: stopped in reverse, the
// loader, the attempt recorder and the parker stop only after consume has
// returned, so that attempts finishing during shutdown are still recorded.
// The waker of parked deliveries runs beside them, and so does the analyzer
// that keeps the plans of the worker's prepared statements fit for the
// tables' sizes (see db.RunAnalyzer). The hot pool (generic plans, and
// connections prepared before the first delivery: db.HotPool), opened
// here, closes when its part stops, after all the others.
func (w *Worker) Parts(consume func(context.Context) error) []supervisor.Part {
	var parts []supervisor.Part
	hot, err := db.OpenHot(w.store.pool, db.HotPool{MaxConns: hotConns, Ready: readyConns,
		Prepare: w.store.prepare, GenericPlans: true}, w.log)
	if err == nil {
		w.store.hot = hot
		parts = append(parts, supervisor.Part{Name: "hot pool", Run: func(ctx context.Context) error {
			<-ctx.Done()
			w.store.hot = w.store.pool
			hot.Close()
			return nil
		}})
	} else {
		w.log.Warn("hot-path statements planned at each execution", "error", err)
	}
	// The rollup tally stops after the attempt recorder, and flushes what
	// the recorder's last batches counted.
	tally := history.NewTally(w.store.pool, w.log)
	w.store.tally = tally
	parts = append(parts,
		supervisor.Part{Name: "rollup tally", Run: tally.Run},
		supervisor.Part{Name: "delivery loader", Run: w.loads.Run},
		supervisor.Part{Name: "attempt recorder", Run: w.records.Run},
		supervisor.Part{Name: "parker", Run: w.parks.Run},
		supervisor.Part{Name: "parked-delivery waker", Run: w.waker.Run},
		supervisor.Part{Name: "analyzer", Run: func(ctx context.Context) error { return db.RunAnalyzer(ctx, w.store.pool, w.log) }},
	)
	if w.guard != nil {
		parts = append(parts, supervisor.Part{Name: "guard", Run: w.guard.Run})
	}
	return append(parts, supervisor.Part{Name: "consumer", Run: consume})
}

// Serve runs the worker's Parts around consume until ctx ends or a part
// fails, then stops them within serveStopWithin.
func (w *Worker) Serve(ctx context.Context, consume func(context.Context) error) error {
	g := supervisor.New(w.log)
	for _, p := range w.Parts(consume) {
		g.Go(p.Name, p.Run)
	}
	return g.Run(ctx, serveStopWithin)
}

// Handle is the queue.Handler.
func (w *Worker) Handle(ctx context.Context, d amqp.Delivery) queue.Disposition {
	metrics.WorkerBusy.Inc()
	defer metrics.WorkerBusy.Dec()
	t, err := wire.DecodeTask(d.Body)
	if err != nil {
		w.log.Error("malformed delivery message: dead-lettered", "message_id", d.MessageId, "error", err)
		return queue.DeadLetter
	}
	if _, waited := d.Headers[headerInternalSince]; waited {
		// Unless it is put back again, its wait on our failure is over.
		defer metrics.InternalWaits.Done(t.DeliveryID.String(), w.now())
	}
	if w.gate != nil {
		slot := w.gate.Enter(ctx, t.TenantID)
		if slot == nil {
			if ctx.Err() != nil {
				return queue.Requeue
			}
			metrics.TenantShareDeferred.Inc()
			return w.deferTo(ctx, w.log, t, d.Headers, schedule.TenantShare, w.gate.Defer(t.TenantID), false)
		}
		defer slot.Done()
	}
	return w.handle(ctx, t, d.Headers)
}

func (w *Worker) handle(ctx context.Context, t wire.Task, headers amqp.Table) queue.Disposition {
	log := w.log.With("tenant_id", t.TenantID.String(), "webhook_id", t.WebhookID.String(),
		"event_id", t.EventID.String(), "delivery_id", t.DeliveryID.String(), "correlation_id", t.CorrelationID)
	loaded, err := w.loads.Do(context.WithoutCancel(ctx), t.DeliveryID)
	if err == nil {
		err = loaded.err
	}
	switch {
	case errors.Is(err, errGone):
		return queue.Ack
	case err != nil:
		return w.putBack(ctx, log, t, headers, "load", err)
	}
	j := loaded.job
	if j.Status.Terminal() || j.AttemptCount >= t.Attempt {
		return queue.Ack // finished, or this attempt is recorded already: a duplicate message
	}
	t.Attempt = j.AttemptCount + 1
	ctx, span := w.startAttempt(ctx, t, j)
	defer span.End()
	if j.OrderKey != "" {
		parked, err := waitYourTurn(ctx, w.store.pool, j.OrderKey, j.EventID, t.DeliveryID)
		if err != nil {
			return w.putBack(ctx, log, t, headers, "order", err)
		}
		if parked {
			metrics.OrderedParked.Inc()
			tracePostponed(span, schedule.Order, time.Time{})
			return queue.Ack // released by the worker that finishes the one before
		}
	}
	switch {
	case j.Deleted:
		return w.cancel(ctx, log, t, j, headers, "webhook deleted")
	case j.Data == nil:
		return w.cancel(ctx, log, t, j, headers, "event payload removed by retention")
	case !j.Active:
		return w.deferTo(ctx, log, t, headers, schedule.Inactive, w.now().Add(inactiveDelay), false)
	case webhook.AwaitsVerification(j.Verification):
		// Nothing goes to an endpoint before it has echoed a challenge.
		return w.deferTo(ctx, log, t, headers, schedule.Unverified, w.now().Add(inactiveDelay), false)
	}
	return w.attempt(ctx, log, t, j, headers)
}

// attempt sends one attempt, records it and schedules what follows.
func (w *Worker) attempt(ctx context.Context, log *slog.Logger, t wire.Task, j job, headers amqp.Table) queue.Disposition {
	policy := policyOf(j.Retry)
	now := w.now()
	probe := false
	var circuit breaker.State
	span := trace.SpanFromContext(ctx)
	if w.guard != nil {
		adm := w.guard.admit(ctx, t, j, now, reservedFor(headers, now))
		traceAdmission(span, adm)
		if !adm.allowed {
			return w.deferTo(ctx, log, t, headers, adm.reason, adm.until, adm.reserved)
		}
		probe, circuit = adm.probe, adm.state
	}
	body, h, err := buildRequest(t, j, now)
	if err != nil {
		return w.putBack(ctx, log, t, headers, "build", err)
	}
	res, err := w.sender.Send(ctx, Request{URL: j.URL, Body: body, Header: h, Timeout: policy.AttemptTimeout(t.Attempt),
		Propagate: j.Propagate})
	answered := w.now() // backoff and Retry-After count from the endpoint's answer
	if errors.Is(err, errHostBusy) || ctx.Err() != nil {
		if probe {
			w.guard.release(ctx, t)
		}
		if ctx.Err() != nil {
			// Cut off by our own shutdown: not the endpoint's attempt.
			return queue.Requeue
		}
		// The rate-limit slot this attempt was let in on goes with it: it
		// is sent later than that slot, never earlier, and draws no other.
		until, parked := w.sender.HostFreeAt(j.URL, t.WebhookID, answered)
		if parked {
			// Counted as being written until deferTo is done with it, however
			// it ends; the last parking of a stall, written after the host's
			// first fast answers, is brought forward too.
			defer func() {
				if hooks, step := w.sender.ParkWritten(j.URL, w.now()); len(hooks) > 0 {
					w.hasten(ctx, log, hooks, step)
				}
			}()
		}
		return w.deferTo(ctx, log, t, headers, schedule.HostBusy, until, w.guard != nil)
	}
	if res.Category == "" {
		// A 2xx: the host answered, and in time. A fast failure (refused,
		// a quick 503) says nothing of when it will serve its deliveries.
		if hooks, step := w.sender.OutdatedReservations(j.URL, answered); len(hooks) > 0 {
			w.hasten(ctx, log, hooks, step)
		}
	}
	if w.guard != nil {
		w.guard.observe(context.WithoutCancel(ctx), t, j, res, probe, circuit, answered)
	}
	decision := policy.Decide(res.Outcome(), t.Attempt, w.rnd)
	if res.Category == retry.SSRFBlocked && !decision.Succeeded {
		decision = retry.Decision{Exhausted: true, Reason: "endpoint address is not allowed"}
	}
	rec := attemptRecord{DeliveryID: t.DeliveryID, CreatedAt: j.CreatedAt, Number: t.Attempt, TenantID: t.TenantID,
		WebhookID: t.WebhookID, Response: res, ScheduledAt: j.CreatedAt, ExecutedAt: now}
	if j.NextAttemptAt != nil {
		rec.ScheduledAt = *j.NextAttemptAt
	}
	var next time.Time
	switch {
	case decision.Succeeded:
		rec.Status = wire.Succeeded
	case decision.Retry:
		rec.Status = wire.Retrying
		next = answered.Add(decision.Delay)
		rec.NextAttemptAt = &next
		rec.Park = decision.Delay >= schedule.ParkAfter
	default:
		rec.Status = wire.Exhausted
		if rec.Response.Error == "" {
			rec.Response.Error = decision.Reason
		} else {
			rec.Response.Error += " (" + decision.Reason + ")"
		}
	}
	rec.Ordered = j.OrderKey != ""
	recorded, err := w.records.Do(context.WithoutCancel(ctx), rec)
	if err != nil {
		return w.putBack(ctx, log, t, headers, "record", err)
	}
	w.observe(ctx, log, t, j, rec, decision)
	if !recorded {
		return queue.Ack
	}
	switch rec.Status {
	case wire.Retrying:
		if !rec.Park {
			w.scheduleRetry(ctx, log, t, next)
		}
	case wire.Exhausted:
		w.deadLetter(ctx, log, t, decision.Reason)
	}
	if rec.Status != wire.Retrying && j.OrderKey != "" {
		w.release(ctx, log, j.OrderKey)
	}
	return queue.Ack
}

// releasesNext reports whether recording r lets the next delivery of its
// order key go: its key then waits for nothing but the record.
func releasesNext(r attemptRecord) bool {
	return r.Ordered && r.Status != wire.Retrying
}

// cancel ends a delivery that can no longer be made, and lets the next
// one of its order key go.
func (w *Worker) cancel(ctx context.Context, log *slog.Logger, t wire.Task, j job, headers amqp.Table, reason string) queue.Disposition {
	if err := w.store.cancel(ctx, t.DeliveryID, reason); err != nil {
		return w.putBack(ctx, log, t, headers, "cancel", err)
	}
	traceCancelled(trace.SpanFromContext(ctx), reason)
	if j.OrderKey != "" {
		w.release(ctx, log, j.OrderKey)
	}
	return queue.Ack
}

// scheduleRetry publishes the next attempt, due in less than
// schedule.ParkAfter, to the delay queues (a longer one was parked by its
// attempt record, and a waker publishes it). If that fails the relay
// republishes it once it is due.
func (w *Worker) scheduleRetry(ctx context.Context, log *slog.Logger, t wire.Task, due time.Time) {
	ctx = context.WithoutCancel(ctx)
	next := t
	next.Attempt++
	w.enqueue(ctx, log, next, due)
}

// enqueue publishes the message for attempt t.Attempt, due at due, and
// marks it enqueued. If publishing fails the outbox relay sends it once it
// is due; if only the mark fails, the relay may send it twice.
func (w *Worker) enqueue(ctx context.Context, log *slog.Logger, t wire.Task, due time.Time) {
	if err := w.pub.Publish(ctx, t.Message(due)); err != nil {
		log.WarnContext(ctx, "next attempt not enqueued; the outbox relay will", "next_delivery_id", t.DeliveryID.String(), "error", err)
		return
	}
	if err := w.store.markScheduled(ctx, t.DeliveryID, t.Attempt-1); err != nil {
		log.WarnContext(ctx, "next attempt enqueued but not marked; the relay may send it twice", "next_delivery_id", t.DeliveryID.String(), "error", err)
	}
}

// deadLetter tells the dlq process about an exhausted delivery. The
// delivery is already exhausted in Postgres; if this fails the dlq
// process's sweep finds it. The message carries the attempt's trace
// context, which the dlq's span of recording it continues.
func (w *Worker) deadLetter(ctx context.Context, log *slog.Logger, t wire.Task, reason string) {
	m := t.Message(time.Time{})
	m.Headers = amqp.Table{HeaderDeadReason: "exhausted: " + reason}
	if p := tracing.ParentOf(ctx); p.TraceParent != "" {
		m.Headers[HeaderTraceParent] = p.TraceParent
		if p.TraceState != "" {
			m.Headers[HeaderTraceState] = p.TraceState
		}
	}
	if err := w.pub.PublishDead(context.WithoutCancel(ctx), m); err != nil {
		log.WarnContext(ctx, "exhausted delivery not sent to the dead-letter queue; the dlq sweep will record it", "error", err)
	}
}

// deferTo puts the delivery off, without an attempt, until until (zero:
// until released; only a circuit forced open without an end says so). A
// wait of schedule.ParkAfter or more is parked in Postgres and woken at its
// time by a waker; a shorter one goes through the delay tiers. reserved
// says until is the delivery's own rate-limit slot, which its message then
// carries.
func (w *Worker) deferTo(ctx context.Context, log *slog.Logger, t wire.Task, headers amqp.Table, reason schedule.Reason, until time.Time, reserved bool) queue.Disposition {
	ctx = context.WithoutCancel(ctx)
	metrics.DeliveriesPostponed.WithLabelValues(string(reason)).Inc()
	tracePostponed(trace.SpanFromContext(ctx), reason, until)
	if until.IsZero() || until.Sub(w.now()) >= schedule.ParkAfter {
		p := schedule.Parking{DeliveryID: t.DeliveryID, Attempt: t.Attempt, Reason: reason}
		if !until.IsZero() {
			p.Until = &until
		}
		_, err := w.parks.Do(ctx, p)
		if err == nil {
			metrics.DeliveriesParked.WithLabelValues(string(reason)).Inc()
			return queue.Ack // parked, or the delivery has moved on: this message is done with
		}
		log.WarnContext(ctx, "delivery not parked; deferred through the delay queues", "reason", string(reason), "error", err)
		if until.IsZero() {
			until = w.now().Add(inactiveDelay)
		}
	}
	m := t.Message(until)
	m.Headers = copyHeaders(headers)
	delete(m.Headers, schedule.HeaderReservedAt)
	// Put off for a reason of its own: no longer waiting on our failure.
	delete(m.Headers, headerInternalRetries)
	delete(m.Headers, headerInternalSince)
	if reserved {
		m.Headers[schedule.HeaderReservedAt] = until.UnixMilli()
	}
	if err := w.pub.Publish(ctx, m); err != nil {
		log.WarnContext(ctx, "deferral not published; message returned", "reason", string(reason), "error", err)
		return queue.Requeue
	}
	metrics.DeliveryRepublishes.WithLabelValues(string(reason)).Inc()
	if reason != schedule.HostBusy && reason != schedule.TenantShare {
		_ = w.store.postponed(ctx, t.DeliveryID)
	}
	return queue.Ack
}

// hasten brings forward the deliveries of webhooks parked for a host that
// has turned out faster than their reservations allowed for (see
// schedule.Hasten); on failure they keep their reservations.
func (w *Worker) hasten(ctx context.Context, log *slog.Logger, webhooks []uuid.UUID, step time.Duration) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), hastenWithin)
	defer cancel()
	n, err := schedule.Hasten(ctx, w.store.pool, webhooks, step)
	if err != nil {
		log.WarnContext(ctx, "deliveries parked for a host that is fast again keep their reservations", "error", err)
		return
	}
	metrics.DeliveriesHastened.Add(float64(n))
}

// hastenWithin bounds the statement of hasten, run by the attempt that
// found its host fast again before its own record.
const hastenWithin = 5 * time.Second

// reservedFor reports whether the message carries a rate-limit slot
// reserved for it that has come (see schedule.HeaderReservedAt).
func reservedFor(h amqp.Table, now time.Time) bool {
	ms, ok := h[schedule.HeaderReservedAt].(int64)
	return ok && !time.UnixMilli(ms).After(now.Add(reservedSlack))
}

// putBack returns a message after our own failure, through a delay tier so
// that an outage does not spin it through its delivery limit; nothing is
// recorded against the endpoint. It waits as long as the failure lasts,
// with a backoff of at most internalRetryMax: an hour-long database outage
// must not send every delivery in flight to the DLQ as poison.
// hookline_worker_internal_wait_seconds shows how long the oldest waits.
func (w *Worker) putBack(ctx context.Context, log *slog.Logger, t wire.Task, headers amqp.Table, stage string, cause error) queue.Disposition {
	metrics.WorkerInternalErrors.WithLabelValues(stage).Inc()
	now := w.now()
	n := internalRetries(headers) + 1
	since := now
	if ms, ok := headers[headerInternalSince].(int64); ok {
		since = time.UnixMilli(ms)
	}
	metrics.InternalWaits.Waiting(t.DeliveryID.String(), since)
	delay := internalRetryDelay(n)
	tracePutBack(trace.SpanFromContext(ctx), stage, cause)
	log.WarnContext(ctx, "delivery put back after an internal failure (not an attempt)", "stage", stage, "error", cause,
		"internal_retries", n, "waiting_for", now.Sub(since).Round(time.Second).String(), "retry_in", delay.String())
	m := t.Message(now.Add(delay))
	m.Headers = copyHeaders(headers)
	m.Headers[headerInternalRetries] = int64(n)
	m.Headers[headerInternalSince] = since.UnixMilli()
	if err := w.pub.Publish(context.WithoutCancel(ctx), m); err != nil {
		return queue.Requeue
	}
	return queue.Ack
}

// internalRetryDelay is the wait before the nth try after our own failure:
// internalRetryBase doubling, at most internalRetryMax.
func internalRetryDelay(n int) time.Duration {
	d := internalRetryBase
	for i := 1; i < n && d < internalRetryMax; i++ {
		d *= 2
	}
	return min(d, internalRetryMax)
}

// observe writes the attempt's metrics, its span's outcome, and its log
// line: a warning for a failed attempt, at debug level for a success.
func (w *Worker) observe(ctx context.Context, log *slog.Logger, t wire.Task, j job, rec attemptRecord, d retry.Decision) {
	traceOutcome(trace.SpanFromContext(ctx), rec, d)
	res := rec.Response
	metrics.Deliveries.WithLabelValues(string(rec.Status), string(res.Category)).Inc()
	outcome := "success"
	if !d.Succeeded {
		outcome = "failure"
	}
	metrics.DeliveryDuration.WithLabelValues(outcome).Observe(res.Duration.Seconds())
	metrics.DeliveryAttemptNumber.Observe(float64(t.Attempt))
	attrs := []any{"attempt", t.Attempt, "status", rec.Status, "status_code", res.StatusCode,
		"category", string(res.Category), "duration_ms", res.Duration.Milliseconds(), "event_type", j.EventType}
	if rec.NextAttemptAt != nil {
		attrs = append(attrs, "next_attempt_at", rec.NextAttemptAt.UTC().Format(time.RFC3339Nano))
	}
	if d.Succeeded {
		// One line per success would be most of the log (and a write per
		// delivery); the attempt history and the metrics have them.
		log.DebugContext(ctx, "delivery attempt", attrs...)
		return
	}
	log.WarnContext(ctx, "delivery attempt", append(attrs, "error", res.Error)...)
}

func policyOf(c webhook.RetryConfig) retry.Policy {
	p := retry.Policy{
		MaxAttempts:   c.MaxAttempts,
		BaseDelay:     time.Duration(c.BaseDelayMS) * time.Millisecond,
		MaxDelay:      time.Duration(c.MaxDelayMS) * time.Millisecond,
		Multiplier:    c.BackoffMultiplier,
		Timeout:       time.Duration(c.TimeoutMS) * time.Millisecond,
		TimeoutGrowth: c.TimeoutGrowthFactor,
	}
	for _, ms := range c.ScheduleMS {
		p.Schedule = append(p.Schedule, time.Duration(ms)*time.Millisecond)
	}
	return p
}

func internalRetries(h amqp.Table) int {
	switch v := h[headerInternalRetries].(type) {
	case int64:
		return int(v)
	case int32:
		return int(v)
	case int:
		return v
	}
	return 0
}

func copyHeaders(h amqp.Table) amqp.Table {
	out := make(amqp.Table, len(h)+1)
	for k, v := range h {
		if k == queue.HeaderNotBefore || k == "x-death" || k == "x-delivery-count" {
			continue
		}
		out[k] = v
	}
	return out
}
