// Package tenant holds tenants and their API keys. Keys are random, shown
// once at creation, and stored only as a SHA-256 hash.
package tenant

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookline/hookline/internal/audit"
	"github.com/hookline/hookline/internal/config"
)

// KeyPrefix starts every tenant API key.
const KeyPrefix = "hk_"

// Errors returned by the store.
var (
	ErrNotFound     = errors.New("tenant not found")
	ErrUnauthorized = errors.New("invalid API key")
)

// Tenant is an isolated customer of the service.
type Tenant struct {
	ID               uuid.UUID               `json:"id"`
	Name             string                  `json:"name"`
	RateLimit        config.RateLimit        `json:"rate_limit"`
	PublishRateLimit config.PublishRateLimit `json:"publish_rate_limit"`
	// AutoDisable is the default of the tenant's webhooks for being
	// disabled automatically (a webhook may set its own).
	AutoDisable AutoDisable `json:"auto_disable"`
	// Portal is how the tenant's portal looks and where it may be framed.
	Portal    Portal    `json:"portal"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// AutoDisable is a tenant's setting for disabling its failing endpoints.
type AutoDisable struct {
	// FailingForMS: a webhook that has failed without a single success
	// for this long is disabled; 0 never.
	FailingForMS int64 `json:"failing_for_ms"`
}

// Principal is who an API key authenticates, or the tenant a service key
// acts for.
type Principal struct {
	TenantID uuid.UUID
	// KeyID is the tenant's API key; uuid.Nil when Service is set.
	KeyID uuid.UUID
	// Service is the service key acting for the tenant, when it is one.
	Service *ServiceKey
	// ExpiresAt is when the key stops working, if ever.
	ExpiresAt *time.Time
	// PublishLimit is the tenant's publish rate limit.
	PublishLimit config.PublishRateLimit
}

// Store reads and writes tenants and keys.
type Store struct {
	pool *pgxpool.Pool
}

// NewStore returns a Store on pool.
func NewStore(pool *pgxpool.Pool) *Store { return &Store{pool: pool} }

const (
	tenantColumns = `id, name, rate_limit_rpm, rate_limit_burst, publish_rps, publish_burst, created_at, updated_at,
	auto_disable_failing_ms, portal`
	insertTenantSQL = `INSERT INTO tenants (id, name, rate_limit_rpm, rate_limit_burst, publish_rps, publish_burst, created_at, updated_at,
	auto_disable_failing_ms, portal)
VALUES ($1, $2, $3, $4, $5, $6, $7, $7, $8, $9)`
	getTenantSQL = `SELECT ` + tenantColumns + ` FROM tenants WHERE id = $1`
	// updateTenantSQL ends the tenant's portal links and sessions, in the
	// same statement, when its portal is turned off.
	updateTenantSQL = `WITH portal_off AS (
    UPDATE portal_sessions SET ended_at = now()
    WHERE tenant_id = $1 AND ended_at IS NULL AND NOT coalesce(($8::jsonb->>'enabled')::boolean, true))
UPDATE tenants SET name = $2, rate_limit_rpm = $3, rate_limit_burst = $4,
	publish_rps = $5, publish_burst = $6, auto_disable_failing_ms = $7, portal = $8, updated_at = now()
WHERE id = $1 RETURNING ` + tenantColumns
	// listTenantsSQL pages through tenants by id; $1 (when not empty)
	// finds a tenant by its id or by a part of its name, case-insensitive
	// ($2 is that part, its LIKE wildcards escaped).
	listTenantsSQL = `SELECT ` + tenantColumns + ` FROM tenants
WHERE ($1 = '' OR id::text = lower($1) OR name ILIKE '%' || $2 || '%')
  AND ($3::uuid IS NULL OR id > $3)
ORDER BY id LIMIT $4`
	// authenticateSQL finds a valid key by its hash and, in the same round
	// trip, records its use: at most once a minute per key, so that a busy
	// key does not write a row version per request.
	authenticateSQL = `WITH k AS (
    SELECT k.id, k.tenant_id, k.key_hash, k.expires_at, k.last_used_at, t.publish_rps, t.publish_burst
    FROM api_keys k JOIN tenants t ON t.id = k.tenant_id
    WHERE k.key_hash = $1 AND k.revoked_at IS NULL AND (k.expires_at IS NULL OR k.expires_at > now())
), touched AS (
    UPDATE api_keys a SET last_used_at = now() FROM k
    WHERE a.id = k.id AND (k.last_used_at IS NULL OR k.last_used_at < now() - interval '1 minute')
)
SELECT id, tenant_id, key_hash, expires_at, publish_rps, publish_burst FROM k`
)

// Create stores a tenant with a fresh API key and returns both; the key is
// not recoverable afterwards.
func (s *Store) Create(ctx context.Context, t Tenant) (Tenant, string, error) {
	t.ID = uuid.Must(uuid.NewV7())
	t.CreatedAt = time.Now().UTC().Truncate(time.Microsecond)
	t.UpdatedAt = t.CreatedAt
	key := newKey()
	hash := hashKey(key)
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, insertTenantSQL, t.ID, t.Name, t.RateLimit.RequestsPerMinute,
			t.RateLimit.Burst, t.PublishRateLimit.RequestsPerSecond, t.PublishRateLimit.Burst, t.CreatedAt,
			t.AutoDisable.FailingForMS, t.Portal); err != nil {
			return fmt.Errorf("insert tenant: %w", err)
		}
		keyID := uuid.Must(uuid.NewV7())
		if _, err := tx.Exec(ctx, insertKeySQL, keyID, t.ID, "default", key[:prefixLen], hash[:], t.CreatedAt, nil); err != nil {
			return fmt.Errorf("insert api key: %w", err)
		}
		return audit.Record(ctx, tx, t.ID, audit.TenantCreated, "tenant", t.ID.String(),
			map[string]any{"name": t.Name, "api_key_id": keyID, "api_key_prefix": key[:prefixLen]})
	})
	if err != nil {
		return Tenant{}, "", err
	}
	return t, key, nil
}

// AuditLog returns the reader of the audit log, which lives beside the
// tenants it belongs to.
func (s *Store) AuditLog() *audit.Store { return audit.NewStore(s.pool) }

// Get returns tenant id.
func (s *Store) Get(ctx context.Context, id uuid.UUID) (Tenant, error) {
	t, err := scanTenant(s.pool.QueryRow(ctx, getTenantSQL, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return Tenant{}, ErrNotFound
	}
	if err != nil {
		return Tenant{}, fmt.Errorf("load tenant %s: %w", id, err)
	}
	return t, nil
}

// Update stores the name and limits of t.
func (s *Store) Update(ctx context.Context, t Tenant) (Tenant, error) {
	out, err := scanTenant(s.pool.QueryRow(ctx, updateTenantSQL, t.ID, t.Name, t.RateLimit.RequestsPerMinute,
		t.RateLimit.Burst, t.PublishRateLimit.RequestsPerSecond, t.PublishRateLimit.Burst, t.AutoDisable.FailingForMS, t.Portal))
	if errors.Is(err, pgx.ErrNoRows) {
		return Tenant{}, ErrNotFound
	}
	if err != nil {
		return Tenant{}, fmt.Errorf("update tenant %s: %w", t.ID, err)
	}
	return out, nil
}

// Authenticate returns the principal of a valid, unrevoked, unexpired key.
func (s *Store) Authenticate(ctx context.Context, key string) (Principal, error) {
	if !strings.HasPrefix(key, KeyPrefix) || len(key) > 200 {
		return Principal{}, ErrUnauthorized
	}
	hash := hashKey(key)
	var p Principal
	var stored []byte
	err := s.pool.QueryRow(ctx, authenticateSQL, hash[:]).Scan(&p.KeyID, &p.TenantID, &stored, &p.ExpiresAt,
		&p.PublishLimit.RequestsPerSecond, &p.PublishLimit.Burst)
	if errors.Is(err, pgx.ErrNoRows) {
		return Principal{}, ErrUnauthorized
	}
	if err != nil {
		return Principal{}, fmt.Errorf("authenticate: %w", err)
	}
	// The index lookup already matched the hash; comparing again in
	// constant time costs nothing and keeps the check independent of how
	// the database compares.
	if !sameHash(stored, hash) {
		return Principal{}, ErrUnauthorized
	}
	return p, nil
}

func scanTenant(row pgx.Row) (Tenant, error) {
	var t Tenant
	err := row.Scan(&t.ID, &t.Name, &t.RateLimit.RequestsPerMinute, &t.RateLimit.Burst,
		&t.PublishRateLimit.RequestsPerSecond, &t.PublishRateLimit.Burst, &t.CreatedAt, &t.UpdatedAt,
		&t.AutoDisable.FailingForMS, &t.Portal)
	t.CreatedAt, t.UpdatedAt = t.CreatedAt.UTC(), t.UpdatedAt.UTC()
	if t.Portal.FrameOrigins == nil {
		t.Portal.FrameOrigins = []string{}
	}
	return t, err
}

// List returns up to limit tenants after the id after (when given), by id;
// a non-empty query keeps the tenant of that id and those whose name
// contains it, case-insensitive.
func (s *Store) List(ctx context.Context, query string, after *uuid.UUID, limit int) ([]Tenant, error) {
	like := strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(query)
	rows, err := s.pool.Query(ctx, listTenantsSQL, query, like, after, limit)
	if err != nil {
		return nil, fmt.Errorf("list tenants: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Tenant, error) { return scanTenant(row) })
	if err != nil {
		return nil, fmt.Errorf("list tenants: %w", err)
	}
	return out, nil
}

func newKey() string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("crypto/rand failed: %v", err))
	}
	return KeyPrefix + base64.RawURLEncoding.EncodeToString(b)
}

func hashKey(key string) [sha256.Size]byte { return sha256.Sum256([]byte(key)) }
