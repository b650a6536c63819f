package delivery

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookline/hookline/internal/breaker"
	"github.com/hookline/hookline/internal/db"
	"github.com/hookline/hookline/internal/history"
	"github.com/hookline/hookline/internal/schedule"
	"github.com/hookline/hookline/internal/secret"
	"github.com/hookline/hookline/internal/tracing"
	"github.com/hookline/hookline/internal/webhook"
	"github.com/hookline/hookline/internal/wire"
)

// errGone means the delivery no longer exists (its tenant was deleted).
var errGone = errors.New("delivery not found")

// job is everything one attempt needs, loaded in one query.
type job struct {
	Status        wire.Status
	AttemptCount  int
	CreatedAt     time.Time
	NextAttemptAt *time.Time
	EventType     string
	Source        string
	IdemKey       string
	Data          []byte
	EventTime     time.Time
	CorrelationID string
	URL           string
	Secrets       []string
	Retry         webhook.RetryConfig
	Headers       map[string]string
	Active        bool
	Deleted       bool
	Breaker       webhook.BreakerConfig
	RateLimit     webhook.RateLimit
	TenantLimit   webhook.RateLimit
	// Circuit is the breaker state last persisted to Postgres (nil when
	// never written): the fallback when Redis is down, and operator
	// overrides.
	Circuit breaker.Persisted
	// OrderKey is set for a delivery of an ordered webhook (see ordering.go).
	OrderKey string
	EventID  uuid.UUID
	// Verification is the webhook's endpoint verification state, empty
	// when none is asked for.
	Verification string
	// Trace is the trace context of the event's publish, which every
	// attempt continues (zero when the event was published untraced), and
	// Propagate says whether the endpoint receives it (the webhook's
	// trace_propagation).
	Trace     tracing.Parent
	Propagate bool
}

// store is the worker's SQL.
type store struct {
	pool *pgxpool.Pool
	// hot runs the batched statements of every delivery (load, attempt
	// record, parking, enqueue mark): while the worker serves, a pool of
	// its own running them from generic plans (db.HotPool); pool
	// otherwise.
	hot *pgxpool.Pool
	// keys open the webhook secrets sealed at rest; nil when none are
	// configured (secrets stored in clear, development and tests).
	keys *secret.Keyring
	// tally counts the attempts recorded, and the states they move their
	// deliveries to, for the rollups; nil: the rollup triggers count them.
	tally *history.Tally
}

// WithSecretKeys makes the worker open webhook secrets sealed with keys.
// Call it before Serve.
func (w *Worker) WithSecretKeys(keys *secret.Keyring) *Worker {
	w.store.keys = keys
	return w
}

// loadJobsSQL reads the deliveries by their ids in a subquery of their
// own (OFFSET 0 keeps Postgres from merging it into the join), planned
// apart from the tables joined to them: always a primary key lookup, never
// a walk of a webhook's deliveries between the ids' bounds that a generic
// plan made on young statistics would find cheaper (see wire.IDsIn).
var loadJobsSQL = `SELECT d.id, d.status, d.attempt_count, d.created_at, d.next_attempt_at,
    e.event_type, e.source, e.idempotency_key, e.data, e.created_at, e.correlation_id,
    w.url, w.secret, w.previous_secret, w.previous_secret_expires_at, w.retry_config, w.headers,
    w.active, w.deleted_at IS NOT NULL, w.circuit_breaker_config, w.rate_limit,
    t.rate_limit_rpm, t.rate_limit_burst,
    c.state, c.updated_at, c.forced_state, c.forced_until, coalesce(d.order_key, ''), d.event_id, d.webhook_id,
    coalesce(w.verification->>'state', ''), coalesce(e.traceparent, ''), coalesce(e.tracestate, ''), w.trace_propagation
FROM (SELECT * FROM deliveries WHERE ` + wire.IDsIn("id", "$1") + ` OFFSET 0) d
JOIN events e ON e.id = d.event_id
JOIN webhooks w ON w.id = d.webhook_id
JOIN tenants t ON t.id = d.tenant_id
LEFT JOIN circuit_breaker_states c ON c.webhook_id = d.webhook_id`

// The worker's statements are prepared once per connection and usually run
// from a generic plan, made from the statistics of the moment: made while
// a table was small (a new database) it may scan the table, and it would
// keep doing so as the table grows if nothing analyzed it. The worker's
// analyzer (db.RunAnalyzer) keeps the statistics current, and a new
// analysis replaces the plans.

// loadResult is a job or errGone.
type loadResult struct {
	job job
	err error
}

// loadBatch loads the jobs of several deliveries with one query; the
// secrets are those active at the time of loading.
func (s *store) loadBatch(ctx context.Context, ids []uuid.UUID) ([]loadResult, error) {
	return s.load(ctx, s.hot, ids)
}

func (s *store) load(ctx context.Context, q db.Querier, ids []uuid.UUID) ([]loadResult, error) {
	rows, err := q.Query(ctx, loadJobsSQL, ids)
	if err != nil {
		return nil, fmt.Errorf("load %d deliveries: %w", len(ids), err)
	}
	defer rows.Close()
	now := time.Now()
	found := make(map[uuid.UUID]job, len(ids))
	// failed holds deliveries whose secret could not be opened (a key
	// missing from this worker's configuration): our failure, not the
	// endpoint's.
	failed := map[uuid.UUID]error{}
	for rows.Next() {
		var id uuid.UUID
		var j job
		var prev *string
		var prevUntil *time.Time
		var retryRaw, headersRaw, breakerRaw, rateRaw []byte
		var sealed string
		var hookID uuid.UUID
		var cState *string
		var cUpdated *time.Time
		var forced *string
		var forcedUntil *time.Time
		if err := rows.Scan(&id, &j.Status, &j.AttemptCount, &j.CreatedAt, &j.NextAttemptAt,
			&j.EventType, &j.Source, &j.IdemKey, &j.Data, &j.EventTime, &j.CorrelationID,
			&j.URL, &sealed, &prev, &prevUntil, &retryRaw, &headersRaw, &j.Active, &j.Deleted,
			&breakerRaw, &rateRaw, &j.TenantLimit.RequestsPerMinute, &j.TenantLimit.Burst,
			&cState, &cUpdated, &forced, &forcedUntil, &j.OrderKey, &j.EventID, &hookID, &j.Verification,
			&j.Trace.TraceParent, &j.Trace.TraceState, &j.Propagate); err != nil {
			return nil, fmt.Errorf("scan delivery: %w", err)
		}
		if cState != nil {
			j.Circuit = breaker.Persisted{State: breaker.State(*cState), UpdatedAt: *cUpdated, ForcedState: forced, ForcedUntil: forcedUntil}
		}
		if err := json.Unmarshal(breakerRaw, &j.Breaker); err != nil {
			return nil, fmt.Errorf("decode breaker config of delivery %s: %w", id, err)
		}
		if err := json.Unmarshal(rateRaw, &j.RateLimit); err != nil {
			return nil, fmt.Errorf("decode rate limit of delivery %s: %w", id, err)
		}
		secrets, err := s.openSecrets(hookID, sealed, prev, prevUntil, now)
		if err != nil {
			failed[id] = err
			continue
		}
		j.Secrets = secrets
		if err := json.Unmarshal(retryRaw, &j.Retry); err != nil {
			return nil, fmt.Errorf("decode retry config of delivery %s: %w", id, err)
		}
		// Custom header values are sealed at rest like the secrets; one
		// that cannot be opened is our failure, not the endpoint's.
		headers, err := webhook.OpenHeaders(s.keys, hookID, headersRaw)
		if err != nil {
			failed[id] = err
			continue
		}
		j.Headers = headers
		found[id] = j
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("load %d deliveries: %w", len(ids), err)
	}
	out := make([]loadResult, len(ids))
	for i, id := range ids {
		if err, ok := failed[id]; ok {
			out[i] = loadResult{err: err}
		} else if j, ok := found[id]; ok {
			out[i] = loadResult{job: j}
		} else {
			out[i] = loadResult{err: errGone}
		}
	}
	return out, nil
}

// openSecrets returns the secrets that sign a delivery of webhook hookID at
// now, opened from their sealed form.
func (s *store) openSecrets(hookID uuid.UUID, sealed string, prev *string, prevUntil *time.Time, now time.Time) ([]string, error) {
	cur, err := webhook.OpenSecret(s.keys, hookID, sealed)
	if err != nil {
		return nil, err
	}
	w := webhook.Webhook{Secret: cur, PreviousSecretExpiresAt: prevUntil}
	if prev != nil && prevUntil != nil && now.Before(*prevUntil) {
		if w.PreviousSecret, err = webhook.OpenSecret(s.keys, hookID, *prev); err != nil {
			return nil, err
		}
	}
	return w.ActiveSecrets(now), nil
}

// attemptRecord is one row of the attempt log plus what it does to the
// delivery.
type attemptRecord struct {
	DeliveryID  uuid.UUID
	CreatedAt   time.Time
	Number      int
	TenantID    uuid.UUID
	WebhookID   uuid.UUID
	Response    Response
	ScheduledAt time.Time
	ExecutedAt  time.Time
	// Status is the delivery's new status: succeeded, retrying or exhausted.
	Status        wire.Status
	NextAttemptAt *time.Time
	// Park: the retry waits parked in Postgres (a backoff of
	// schedule.ParkAfter or more), so no message is published for it.
	Park bool
	// Ordered: the delivery has an order key.
	Ordered bool
}

// recordSQL moves a batch of deliveries and appends their attempts in one
// statement. The update names each attempt count and the states it may
// move from, so a second worker holding a duplicate message (or a
// redelivery after a crash) records nothing: an attempt number is written
// once. It returns the deliveries whose attempt was recorded.
var recordSQL = `WITH input AS (
    SELECT * FROM unnest($1::uuid[], $2::timestamptz[], $3::int[], $4::uuid[], $5::int[], $6::text[], $7::text[],
                         $8::int[], $9::text[], $10::text[], $11::text[], $12::timestamptz[], $13::uuid[],
                         $14::timestamptz[], $15::timestamptz[], $16::bool[])
        AS t(delivery_id, delivery_created_at, n, tenant_id, status_code, category, error,
             duration_ms, status, headers, sample, next_at, webhook_id, scheduled_at, executed_at, park)
), upd AS (
    UPDATE deliveries d SET
        status = i.status, attempt_count = i.n, next_attempt_at = i.next_at,
        last_status_code = i.status_code, last_error = i.error, failure_category = i.category,
        enqueued_at = NULL, updated_at = now(),
        completed_at = CASE WHEN i.status IN ('succeeded', 'exhausted') THEN now() END,
        -- a long backoff waits parked; an attempt made from a duplicate
        -- message ends any other wait
        parked_at = CASE WHEN i.park THEN now() WHEN d.park_reason = 'order' THEN d.parked_at END,
        park_reason = CASE WHEN i.park THEN 'backoff' WHEN d.park_reason = 'order' THEN d.park_reason END
    FROM input i
    WHERE ` + wire.IDsIn("d.id", "$1") + ` AND d.id = i.delivery_id AND d.attempt_count = i.n - 1
      AND ` + wire.UnfinishedByKey("d.status") + `
    RETURNING d.id
), ` + failingSinceCTEs + `
INSERT INTO delivery_attempts (delivery_id, delivery_created_at, attempt_number, tenant_id, webhook_id,
    status_code, failure_category, error, duration_ms, response_headers, response_body_sample,
    scheduled_at, executed_at)
SELECT i.delivery_id, i.delivery_created_at, i.n, i.tenant_id, i.webhook_id, i.status_code, i.category, i.error,
    i.duration_ms, i.headers::jsonb, i.sample, i.scheduled_at, i.executed_at
FROM input i JOIN upd ON upd.id = i.delivery_id
RETURNING delivery_id`

// failingSinceCTEs keep each webhook's failing_since (the first failed
// attempt after its last success, see package autodisable) with the
// attempts recordSQL records (upd), writing a webhook's row only when it
// changes: at its first failure after a success, or at a success after
// failures. A success in the batch clears it, unless failures followed
// that success. Rows are locked in id order, so that batches touching the
// same webhooks wait for each other instead of deadlocking.
const failingSinceCTEs = `recorded AS (
    SELECT i.webhook_id, i.executed_at, i.status = 'succeeded' AS ok FROM input i JOIN upd ON upd.id = i.delivery_id
), health AS (
    SELECT r.webhook_id, bool_or(r.ok) AS any_ok,
        min(r.executed_at) FILTER (WHERE NOT r.ok AND r.executed_at > (
            SELECT coalesce(max(s.executed_at), '-infinity') FROM recorded s WHERE s.webhook_id = r.webhook_id AND s.ok)) AS failing_from
    FROM recorded r GROUP BY r.webhook_id
), changed AS (
    SELECT w.id, h.any_ok, h.failing_from FROM webhooks w JOIN health h ON h.webhook_id = w.id
    WHERE CASE WHEN h.any_ok THEN w.failing_since IS DISTINCT FROM h.failing_from ELSE w.failing_since IS NULL END
    ORDER BY w.id
    FOR UPDATE OF w
), failing AS (
    UPDATE webhooks w SET failing_since = CASE WHEN c.any_ok THEN c.failing_from ELSE coalesce(w.failing_since, c.failing_from) END
    FROM changed c WHERE w.id = c.id
)`

// recordBatch stores attempts; each result says whether that attempt was
// recorded (false: another worker recorded this attempt number first).
//
// The rows are written in delivery id order, so that two batches holding
// the same deliveries (duplicate messages) wait for each other instead of
// deadlocking.
func (s *store) recordBatch(ctx context.Context, recs []attemptRecord) ([]bool, error) {
	return s.record(ctx, s.hot, recs)
}

// batchSender runs a pgx.Batch: a pool, or one of its connections.
type batchSender interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

func (s *store) record(ctx context.Context, q batchSender, recs []attemptRecord) ([]bool, error) {
	n := len(recs)
	sorted := slices.Clone(recs)
	slices.SortFunc(sorted, func(a, b attemptRecord) int { return bytes.Compare(a.DeliveryID[:], b.DeliveryID[:]) })
	ids, tenants, hooks := make([]uuid.UUID, n), make([]uuid.UUID, n), make([]uuid.UUID, n)
	created, scheduled, executed := make([]time.Time, n), make([]time.Time, n), make([]time.Time, n)
	numbers, durations := make([]int32, n), make([]int32, n)
	codes := make([]*int32, n)
	categories, errs := make([]*string, n), make([]*string, n)
	statuses, headers, samples := make([]string, n), make([]string, n), make([]string, n)
	next, parks := make([]*time.Time, n), make([]bool, n)
	for i, r := range sorted {
		res := r.Response
		ids[i], tenants[i], hooks[i] = r.DeliveryID, r.TenantID, r.WebhookID
		created[i], scheduled[i], executed[i] = r.CreatedAt, r.ScheduledAt, r.ExecutedAt
		//nolint:gosec // attempt numbers are at most max_attempts and durations at most the timeout
		numbers[i], durations[i] = int32(r.Number), int32(res.Duration.Milliseconds())
		if res.StatusCode != 0 {
			c := int32(res.StatusCode) //nolint:gosec // an HTTP status code
			codes[i] = &c
		}
		if res.Category != "" {
			c := string(res.Category)
			categories[i] = &c
		}
		if res.Error != "" {
			e := truncate(res.Error, maxErrorBytes)
			errs[i] = &e
		}
		statuses[i], samples[i], next[i], parks[i] = string(r.Status), res.BodySample, r.NextAttemptAt, r.Park
		// Endpoints may answer with cookies, tokens or our own signature
		// headers echoed back: none of it is stored.
		h, err := json.Marshal(secret.StorableHeaders(res.Header))
		if err != nil {
			return nil, fmt.Errorf("encode response headers: %w", err)
		}
		headers[i] = string(h)
	}
	b := &pgx.Batch{}
	if s.tally != nil {
		history.MarkTallied(b)
	}
	b.Queue(recordSQL, ids, created, numbers, tenants, codes, categories, errs,
		durations, statuses, headers, samples, next, hooks, scheduled, executed, parks)
	done, err := recorded(q.SendBatch(ctx, b), s.tally != nil)
	if err != nil {
		return nil, fmt.Errorf("record %d attempts: %w", n, err)
	}
	isRecorded := make(map[uuid.UUID]bool, len(done))
	for _, id := range done {
		isRecorded[id] = true
	}
	out := make([]bool, n)
	for i, r := range recs {
		out[i] = isRecorded[r.DeliveryID]
		if out[i] && s.tally != nil {
			s.tally.Attempted(talliedAttempt(r))
		}
	}
	return out, nil
}

// recorded reads the deliveries recordSQL recorded from results, the
// statement after the tally's mark when marked.
func recorded(results pgx.BatchResults, marked bool) ([]uuid.UUID, error) {
	defer results.Close()
	if marked {
		if _, err := results.Exec(); err != nil {
			return nil, err
		}
	}
	rows, err := results.Query()
	if err != nil {
		return nil, err
	}
	done, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return nil, err
	}
	return done, results.Close()
}

// talliedAttempt is r as the rollups count it. recordSQL moves a delivery
// from pending at its first attempt and from retrying after (no path puts
// an attempted delivery back in pending).
func talliedAttempt(r attemptRecord) history.TalliedAttempt {
	from := wire.Retrying
	if r.Number == 1 {
		from = wire.Pending
	}
	return history.TalliedAttempt{Webhook: r.WebhookID, Tenant: r.TenantID, DeliveryCreatedAt: r.CreatedAt,
		From: from, To: r.Status, ExecutedAt: r.ExecutedAt, OK: r.Response.StatusCode >= 200 && r.Response.StatusCode <= 299,
		FailureCategory: string(r.Response.Category), Duration: r.Response.Duration,
		StatusCode: r.Response.StatusCode, Error: truncate(r.Response.Error, maxErrorBytes)}
}

// prepare runs the statements of every delivery (load, attempt record,
// parking, enqueue mark) on a new connection of the hot pool, with no
// delivery to read or write (see db.HotPool).
func (s *store) prepare(ctx context.Context, c *pgx.Conn) error {
	if _, err := s.load(ctx, c, []uuid.UUID{}); err != nil {
		return err
	}
	if _, err := s.record(ctx, c, nil); err != nil {
		return err
	}
	if _, err := schedule.Park(ctx, c, nil); err != nil {
		return err
	}
	_, err := c.Exec(ctx, wire.MarkEnqueuedSQL, []uuid.UUID{}, 0)
	return err
}

// markScheduled records that the message for attempt attempts+1 is
// confirmed by the broker (see wire.MarkEnqueuedSQL).
func (s *store) markScheduled(ctx context.Context, id uuid.UUID, attempts int) error {
	_, err := s.hot.Exec(ctx, wire.MarkEnqueuedSQL, []uuid.UUID{id}, attempts)
	return err
}

const (
	cancelSQL = `UPDATE deliveries SET status = 'cancelled', completed_at = now(), updated_at = now(),
    last_error = $2
WHERE id = $1 AND status IN ('pending', 'retrying')`
	postponeSQL = `UPDATE deliveries SET postponed_count = postponed_count + 1, updated_at = now()
WHERE id = $1 AND status IN ('pending', 'retrying')`
)

func (s *store) cancel(ctx context.Context, id uuid.UUID, reason string) error {
	_, err := s.pool.Exec(ctx, cancelSQL, id, reason)
	return err
}

func (s *store) postponed(ctx context.Context, id uuid.UUID) error {
	_, err := s.pool.Exec(ctx, postponeSQL, id)
	return err
}

// maxErrorBytes is the most of an attempt's error that is recorded.
const maxErrorBytes = 2000

// truncate cuts s to at most n bytes on a character boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
