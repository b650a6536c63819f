package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookline/hookline/internal/audit"
	"github.com/hookline/hookline/internal/secret"
)

// ErrNotFound is returned for a webhook that does not exist, is deleted, or
// belongs to another tenant: the three are indistinguishable to a caller.
var ErrNotFound = errors.New("webhook not found")

// ErrTooMany means the tenant has as many webhooks as it may (Create).
var ErrTooMany = errors.New("webhook limit reached")

// DefaultMaxPerTenant is how many webhooks a tenant may have when the
// configuration says nothing (api.max_webhooks_per_tenant).
const DefaultMaxPerTenant = 1000

// Store reads and writes webhooks in Postgres. Signing secrets and custom
// header values are sealed with its keyring before they are written and
// opened after they are read (see SealSecret and SealHeaders).
type Store struct {
	pool *pgxpool.Pool
	keys *secret.Keyring
	// maxPerTenant bounds a tenant's webhooks: one publish fans out to all
	// of them inside the shared group commit.
	maxPerTenant int
}

// Option adjusts a Store.
type Option func(*Store)

// WithKeyring seals secrets with keys. Without it (or with a nil keyring)
// secrets are stored in clear: for tests and development only; production
// configuration requires keys.
func WithKeyring(keys *secret.Keyring) Option { return func(s *Store) { s.keys = keys } }

// WithMaxPerTenant bounds the webhooks (not deleted) of one tenant; Create
// refuses more with ErrTooMany.
func WithMaxPerTenant(n int) Option { return func(s *Store) { s.maxPerTenant = n } }

// NewStore returns a Store on pool.
func NewStore(pool *pgxpool.Pool, opts ...Option) *Store {
	s := &Store{pool: pool, maxPerTenant: DefaultMaxPerTenant}
	for _, o := range opts {
		o(s)
	}
	return s
}

const webhookColumns = `id, tenant_id, url, events, active, secret, previous_secret,
	previous_secret_expires_at, retry_config, circuit_breaker_config, rate_limit,
	ordering_guarantee, headers, metadata, verification, created_at, updated_at, trace_propagation,
	auto_disable_failing_ms, coalesce(disabled_reason, ''), disabled_at, filter`

const (
	insertWebhookSQL = `INSERT INTO webhooks (id, tenant_id, url, events, active, secret,
	retry_config, circuit_breaker_config, rate_limit, ordering_guarantee, headers, metadata,
	verification, created_at, updated_at, trace_propagation, auto_disable_failing_ms, disabled_reason, disabled_at,
	filter)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $14, $13, $13, $15, $16,
	CASE WHEN $5 THEN NULL ELSE '` + DisabledManual + `' END, CASE WHEN $5 THEN NULL ELSE $13::timestamptz END, $17)`

	getWebhookSQL = `SELECT ` + webhookColumns + ` FROM webhooks
WHERE id = $1 AND tenant_id = $2 AND deleted_at IS NULL`
)

var listWebhooksSQL = `SELECT ` + webhookColumns + ` FROM webhooks
WHERE tenant_id = $1 AND deleted_at IS NULL
  AND ($2::uuid IS NULL OR id > $2)
  AND ($3::boolean IS NULL OR active = $3)
  AND ($4::text IS NULL OR ` + FilterSQL("events", "$4") + `)
ORDER BY id
LIMIT $5`

const (
	// updateWebhookSQL rewrites the verification only when $12 says so
	// (it starts or stops); otherwise a check finishing meanwhile keeps
	// its outcome. The url and the verification change in one statement,
	// so that no delivery goes to a new url before it is verified.
	//
	// Disabling an active webhook ($5 false) is a manual disable; a
	// disabled one keeps its reason and time. Enabling one clears them,
	// and what counts towards disabling it automatically: it starts
	// afresh.
	//
	// updated_at moves forward at every update, even at two within the
	// same microsecond: fan-out takes a webhook's updated_at as the
	// version of its filter (see package event).
	updateWebhookSQL = `UPDATE webhooks SET url = $3, events = $4, active = $5,
	retry_config = $6, circuit_breaker_config = $7, rate_limit = $8,
	ordering_guarantee = $9, headers = $10, metadata = $11, trace_propagation = $14,
	verification = CASE WHEN $12 THEN $13::jsonb ELSE verification END, filter = $16,
	updated_at = greatest(now(), updated_at + interval '1 microsecond'),
	auto_disable_failing_ms = $15,
	disabled_reason = CASE WHEN $5 THEN NULL WHEN active THEN '` + DisabledManual + `' ELSE disabled_reason END,
	disabled_at = CASE WHEN $5 THEN NULL WHEN active THEN now() ELSE disabled_at END,
	failing_since = CASE WHEN $5 AND NOT active THEN NULL ELSE failing_since END,
	circuit_reopens = CASE WHEN $5 AND NOT active THEN 0 ELSE circuit_reopens END
WHERE id = $1 AND tenant_id = $2 AND deleted_at IS NULL
RETURNING updated_at, verification, coalesce(disabled_reason, ''), disabled_at`

	// lockWebhookSQL reads the stored webhook of an update and holds the
	// row until the update.
	lockWebhookSQL = `SELECT ` + webhookColumns + ` FROM webhooks WHERE id = $1 AND tenant_id = $2 AND deleted_at IS NULL FOR UPDATE`

	deleteWebhookSQL = `UPDATE webhooks SET deleted_at = now(), active = false, updated_at = now()
WHERE id = $1 AND tenant_id = $2 AND deleted_at IS NULL`

	// Deliveries of a deleted webhook that have not finished are cancelled;
	// finished ones stay as history.
	cancelDeliveriesSQL = `UPDATE deliveries SET status = 'cancelled', updated_at = now(),
	completed_at = now(), last_error = 'webhook deleted'
WHERE webhook_id = $1 AND status IN ('pending', 'retrying')`

	rotateSecretSQL = `UPDATE webhooks SET previous_secret = secret,
	previous_secret_expires_at = $3, secret = $4, updated_at = now()
WHERE id = $1 AND tenant_id = $2 AND deleted_at IS NULL
RETURNING ` + webhookColumns
)

// Create inserts w, assigning its id and times, with its audit row.
func (s *Store) Create(ctx context.Context, w Webhook) (Webhook, error) {
	w.ID = uuid.Must(uuid.NewV7())
	w.CreatedAt = time.Now().UTC().Truncate(time.Microsecond)
	w.UpdatedAt = w.CreatedAt
	w.DisabledReason, w.DisabledAt = "", nil
	if !w.Active {
		at := w.CreatedAt
		w.DisabledReason, w.DisabledAt = DisabledManual, &at
	}
	args, err := s.encodeConfigs(w)
	if err != nil {
		return Webhook{}, err
	}
	sealed, err := SealSecret(s.keys, w.ID, w.Secret)
	if err != nil {
		return Webhook{}, err
	}
	// The count and the insert run under a lock on the tenant, so that
	// concurrent creates cannot together pass the limit.
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// The lock first, in a statement of its own: the count's snapshot
		// is taken when it starts, after any create that held the lock.
		if _, err := tx.Exec(ctx, tenantLockSQL, w.TenantID); err != nil {
			return fmt.Errorf("lock tenant's webhooks: %w", err)
		}
		var live int
		if err := tx.QueryRow(ctx, countLiveSQL, w.TenantID).Scan(&live); err != nil {
			return fmt.Errorf("count webhooks: %w", err)
		}
		if live >= s.maxPerTenant {
			return fmt.Errorf("%w: a tenant may have %d webhooks", ErrTooMany, s.maxPerTenant)
		}
		_, err := tx.Exec(ctx, insertWebhookSQL, w.ID, w.TenantID, w.URL, w.Events, w.Active,
			sealed, args.retry, args.breaker, args.rate, w.OrderingGuarantee, args.headers,
			[]byte(w.Metadata), w.CreatedAt, args.verification, w.TracePropagation, w.AutoDisable.FailingForMS, w.Filter)
		if err != nil {
			return fmt.Errorf("insert webhook: %w", err)
		}
		return audit.Record(ctx, tx, w.TenantID, audit.WebhookCreated, "webhook", w.ID.String(),
			map[string]any{"url": w.URL, "events": w.Events, "active": w.Active})
	})
	if err != nil {
		return Webhook{}, err
	}
	return w, nil
}

const (
	tenantLockSQL = `SELECT pg_advisory_xact_lock(hashtextextended($1::text, 11))`
	countLiveSQL  = `SELECT count(*) FROM webhooks WHERE tenant_id = $1 AND deleted_at IS NULL`
)

// Get returns the tenant's webhook id.
func (s *Store) Get(ctx context.Context, tenantID, id uuid.UUID) (Webhook, error) {
	w, err := s.scan(s.pool.QueryRow(ctx, getWebhookSQL, id, tenantID))
	if errors.Is(err, pgx.ErrNoRows) {
		return Webhook{}, ErrNotFound
	}
	if err != nil {
		return Webhook{}, fmt.Errorf("load webhook %s: %w", id, err)
	}
	return w, nil
}

// ListFilter narrows a List call. Nil fields do not filter.
type ListFilter struct {
	After     *uuid.UUID
	Active    *bool
	EventType *string
	Limit     int
}

// List returns up to f.Limit webhooks of the tenant in id order after f.After.
func (s *Store) List(ctx context.Context, tenantID uuid.UUID, f ListFilter) ([]Webhook, error) {
	rows, err := s.pool.Query(ctx, listWebhooksSQL, tenantID, f.After, f.Active, f.EventType, f.Limit)
	if err != nil {
		return nil, fmt.Errorf("list webhooks: %w", err)
	}
	defer rows.Close()
	var out []Webhook
	for rows.Next() {
		w, err := s.scan(rows)
		if err != nil {
			return nil, fmt.Errorf("scan webhook: %w", err)
		}
		out = append(out, w)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list webhooks: %w", err)
	}
	return out, nil
}

// Update stores every settable field of w, with its audit rows (see
// auditUpdate). A header value given exactly as responses show the stored
// one (MaskHeaderValue) keeps the stored value, so that a client can write
// back what it read, unless the stored URL is of another origin than w's:
// the value is then dropped and named in ClearedHeaders. The stored row is
// locked meanwhile, so that the value kept is the one the mask was of and
// the audit row compares with what was stored.
func (s *Store) Update(ctx context.Context, w Webhook) (Webhook, error) {
	var out Webhook
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		before, err := s.scan(tx.QueryRow(ctx, lockWebhookSQL, w.ID, w.TenantID))
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("update webhook %s: %w", w.ID, err)
		}
		if anyMasked(w.Headers) {
			w = keepStoredHeaders(w, before)
		}
		if out, err = s.update(ctx, tx, w); err != nil {
			return err
		}
		return auditUpdate(ctx, tx, before, out)
	})
	if err == nil && out.Active {
		// Deliveries parked while the webhook was paused (or awaiting
		// verification) are looked at now instead of at the end of their
		// minute; the worker parks them again if they still cannot go.
		if _, rerr := s.pool.Exec(ctx, releaseWaitingSQL, out.ID); rerr != nil {
			return out, fmt.Errorf("release deliveries of webhook %s: %w", out.ID, rerr)
		}
	}
	return out, err
}

// releaseWaitingSQL makes the deliveries parked for a paused or unverified
// webhook due now (see package schedule: the wakers publish released ones
// at once).
const releaseWaitingSQL = `UPDATE deliveries SET park_reason = 'released', next_attempt_at = now(), updated_at = now()
WHERE webhook_id = $1 AND park_reason IN ('inactive', 'unverified') AND status IN ('pending', 'retrying')`

// keepStoredHeaders gives the masked header values of w the stored values
// of before, or drops them when w's URL is of another origin.
func keepStoredHeaders(w, before Webhook) Webhook {
	if Origin(before.URL) != Origin(w.URL) {
		var cleared []string
		w.Headers, cleared = headersForNewOrigin(w.Headers, &map[string]string{})
		w.ClearedHeaders = append(w.ClearedHeaders, cleared...)
	}
	w.Headers = keepMasked(w.Headers, before.Headers)
	return w
}

// rowQuerier is a pool or a transaction.
type rowQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func (s *Store) update(ctx context.Context, q rowQuerier, w Webhook) (Webhook, error) {
	args, err := s.encodeConfigs(w)
	if err != nil {
		return Webhook{}, err
	}
	// A verification that starts (pending) or stops (nil) is written; a
	// verified or failed one is what the webhook had, and stays as stored.
	restart := w.Verification == nil || w.Verification.State == VerificationPending
	var stored []byte
	err = q.QueryRow(ctx, updateWebhookSQL, w.ID, w.TenantID, w.URL, w.Events, w.Active,
		args.retry, args.breaker, args.rate, w.OrderingGuarantee, args.headers, []byte(w.Metadata),
		restart, args.verification, w.TracePropagation, w.AutoDisable.FailingForMS, w.Filter,
	).Scan(&w.UpdatedAt, &stored, &w.DisabledReason, &w.DisabledAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Webhook{}, ErrNotFound
	}
	if err != nil {
		return Webhook{}, fmt.Errorf("update webhook %s: %w", w.ID, err)
	}
	if w.Verification, err = decodeVerification(stored); err != nil {
		return Webhook{}, fmt.Errorf("update webhook %s: %w", w.ID, err)
	}
	w.DisabledAt = utcOrNil(w.DisabledAt)
	return w, nil
}

// anyMasked reports whether a header value has the form of a masked one.
func anyMasked(h Headers) bool {
	for _, v := range h {
		if looksMasked(v) {
			return true
		}
	}
	return false
}

// keepMasked returns h with every value that is the mask of the stored
// value of the same name replaced by the stored value.
func keepMasked(h Headers, stored map[string]string) Headers {
	out := make(Headers, len(h))
	for name, v := range h {
		if old, ok := stored[name]; ok && v == MaskHeaderValue(old) {
			v = old
		}
		out[name] = v
	}
	return out
}

// Delete removes the webhook from view and cancels its unfinished
// deliveries, in one transaction with its audit row. Its delivery history
// is kept.
func (s *Store) Delete(ctx context.Context, tenantID, id uuid.UUID) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, deleteWebhookSQL, id, tenantID)
		if err != nil {
			return fmt.Errorf("delete webhook %s: %w", id, err)
		}
		if tag.RowsAffected() == 0 {
			return ErrNotFound
		}
		tag, err = tx.Exec(ctx, cancelDeliveriesSQL, id)
		if err != nil {
			return fmt.Errorf("cancel deliveries of webhook %s: %w", id, err)
		}
		return audit.Record(ctx, tx, tenantID, audit.WebhookDeleted, "webhook", id.String(),
			map[string]any{"cancelled_deliveries": tag.RowsAffected()})
	})
}

// RotateSecret makes newSecret the signing secret; the old one keeps
// signing until graceUntil. The audit row is written in the same
// transaction.
func (s *Store) RotateSecret(ctx context.Context, tenantID, id uuid.UUID, newSecret string, graceUntil time.Time) (Webhook, error) {
	sealed, err := SealSecret(s.keys, id, newSecret)
	if err != nil {
		return Webhook{}, err
	}
	var w Webhook
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		w, err = s.scan(tx.QueryRow(ctx, rotateSecretSQL, id, tenantID, graceUntil, sealed))
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("rotate secret of webhook %s: %w", id, err)
		}
		return audit.Record(ctx, tx, tenantID, audit.SecretRotated, "webhook", id.String(),
			map[string]any{"previous_secret_expires_at": graceUntil})
	})
	if err != nil {
		return Webhook{}, err
	}
	return w, nil
}

type encodedConfigs struct {
	retry, breaker, rate, headers []byte
	// verification is NULL (nil) when none is asked for.
	verification []byte
}

// encodeConfigs encodes the JSON columns of w, its headers sealed.
func (s *Store) encodeConfigs(w Webhook) (encodedConfigs, error) {
	var e encodedConfigs
	var err error
	if e.retry, err = json.Marshal(w.RetryConfig); err != nil {
		return e, fmt.Errorf("encode retry config: %w", err)
	}
	if e.breaker, err = json.Marshal(w.CircuitBreakerConfig); err != nil {
		return e, fmt.Errorf("encode breaker config: %w", err)
	}
	if e.rate, err = json.Marshal(w.RateLimit); err != nil {
		return e, fmt.Errorf("encode rate limit: %w", err)
	}
	sealed, err := SealHeaders(s.keys, w.ID, w.Headers)
	if err != nil {
		return e, err
	}
	if e.headers, err = json.Marshal(sealed); err != nil {
		return e, fmt.Errorf("encode headers: %w", err)
	}
	if w.Verification != nil {
		if e.verification, err = json.Marshal(w.Verification); err != nil {
			return e, fmt.Errorf("encode verification: %w", err)
		}
	}
	return e, nil
}

// scan reads a webhook row and opens its secrets and headers.
func (s *Store) scan(row pgx.Row) (Webhook, error) {
	w, err := scanWebhook(row)
	if err != nil {
		return Webhook{}, err
	}
	if w.Headers, err = openHeaders(s.keys, w.ID, w.Headers); err != nil {
		return Webhook{}, err
	}
	if w.Secret, err = OpenSecret(s.keys, w.ID, w.Secret); err != nil {
		return Webhook{}, err
	}
	if w.PreviousSecret != "" {
		if w.PreviousSecret, err = OpenSecret(s.keys, w.ID, w.PreviousSecret); err != nil {
			return Webhook{}, err
		}
	}
	return w, nil
}

func scanWebhook(row pgx.Row) (Webhook, error) {
	var w Webhook
	var prev *string
	var retry, breaker, rate, headers, metadata, verification []byte
	err := row.Scan(&w.ID, &w.TenantID, &w.URL, &w.Events, &w.Active, &w.Secret, &prev,
		&w.PreviousSecretExpiresAt, &retry, &breaker, &rate, &w.OrderingGuarantee,
		&headers, &metadata, &verification, &w.CreatedAt, &w.UpdatedAt, &w.TracePropagation,
		&w.AutoDisable.FailingForMS, &w.DisabledReason, &w.DisabledAt, &w.Filter)
	if err != nil {
		return Webhook{}, err
	}
	if w.Verification, err = decodeVerification(verification); err != nil {
		return Webhook{}, fmt.Errorf("decode webhook %s verification: %w", w.ID, err)
	}
	if prev != nil {
		w.PreviousSecret = *prev
	}
	for _, f := range []struct {
		raw []byte
		dst any
	}{{retry, &w.RetryConfig}, {breaker, &w.CircuitBreakerConfig}, {rate, &w.RateLimit}, {headers, &w.Headers}} {
		if err := json.Unmarshal(f.raw, f.dst); err != nil {
			return Webhook{}, fmt.Errorf("decode webhook %s config: %w", w.ID, err)
		}
	}
	if w.RetryConfig.ScheduleMS == nil {
		w.RetryConfig.ScheduleMS = []int64{}
	}
	w.Metadata = metadata
	w.CreatedAt, w.UpdatedAt = w.CreatedAt.UTC(), w.UpdatedAt.UTC()
	w.DisabledAt = utcOrNil(w.DisabledAt)
	return w, nil
}

func utcOrNil(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

// ActiveSecrets returns the secrets that sign a delivery at now: the current
// one and, during a rotation's grace period, the previous one.
func (w Webhook) ActiveSecrets(now time.Time) []string {
	if w.PreviousSecret != "" && w.PreviousSecretExpiresAt != nil && now.Before(*w.PreviousSecretExpiresAt) {
		return []string{w.Secret, w.PreviousSecret}
	}
	return []string{w.Secret}
}
