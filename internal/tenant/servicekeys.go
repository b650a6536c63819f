package tenant

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/hookline/hookline/internal/fielderr"
)

// ServiceKeyPrefix starts every service key, so that the api tells a
// service key from a tenant's API key before looking either up.
const ServiceKeyPrefix = "hks_"

// Scopes of a service key (docs/DESIGN.md §18): publish is POST
// /v1/events; read is every GET; manage is every other change, and
// opening portal sessions.
const (
	ScopePublish = "publish"
	ScopeRead    = "read"
	ScopeManage  = "manage"
)

// AllScopes are the scopes a key created without any gets.
var AllScopes = []string{ScopePublish, ScopeRead, ScopeManage}

// maxKeyTenants bounds a service key's tenant set; a key for more tenants
// is a key for all of them.
const maxKeyTenants = 1000

// ErrTenantNotInSet is the answer for a tenant a service key may not act
// for, or that does not exist: the api says 404 to both alike.
var ErrTenantNotInSet = errors.New("no such tenant for this key")

// ServiceKey is a service key as listed: never the key itself.
type ServiceKey struct {
	ID     uuid.UUID `json:"id"`
	Name   string    `json:"name"`
	Prefix string    `json:"prefix"`
	Scopes []string  `json:"scopes"`
	// TenantIDs is the tenant set; nil (null in JSON) is every tenant.
	TenantIDs  []uuid.UUID `json:"tenant_ids"`
	CreatedAt  time.Time   `json:"created_at"`
	LastUsedAt *time.Time  `json:"last_used_at"`
	ExpiresAt  *time.Time  `json:"expires_at"`
	RevokedAt  *time.Time  `json:"revoked_at"`
}

// Allows reports whether the key has scope.
func (k ServiceKey) Allows(scope string) bool { return slices.Contains(k.Scopes, scope) }

// ServiceKeyInput is a request to create a service key.
type ServiceKeyInput struct {
	Name *string `json:"name"`
	// Scopes default to all three.
	Scopes []string `json:"scopes"`
	// TenantIDs absent or null is every tenant; a list is those tenants.
	TenantIDs []string `json:"tenant_ids"`
	// ExpiresAt is an RFC 3339 time; the key never expires when absent.
	ExpiresAt *string `json:"expires_at"`
}

// BuildServiceKey validates in at now and returns the key to create. The
// tenants named must exist; CreateServiceKey checks that.
func BuildServiceKey(in ServiceKeyInput, now time.Time) (ServiceKey, error) {
	base, err := BuildKey(KeyInput{Name: in.Name, ExpiresAt: in.ExpiresAt}, now)
	if err != nil {
		return ServiceKey{}, err
	}
	k := ServiceKey{Name: base.Name, ExpiresAt: base.ExpiresAt, Scopes: slices.Clone(AllScopes)}
	if in.Scopes != nil {
		k.Scopes = nil
		for _, s := range in.Scopes {
			if !slices.Contains(AllScopes, s) {
				return ServiceKey{}, fielderr.New("scopes", "%q is not a scope: use publish, read or manage", s)
			}
			if !slices.Contains(k.Scopes, s) {
				k.Scopes = append(k.Scopes, s)
			}
		}
		if len(k.Scopes) == 0 {
			return ServiceKey{}, fielderr.New("scopes", "must name at least one of publish, read and manage")
		}
	}
	if in.TenantIDs != nil {
		if len(in.TenantIDs) == 0 || len(in.TenantIDs) > maxKeyTenants {
			return ServiceKey{}, fielderr.New("tenant_ids", "must list 1 to %d tenants, or be absent for every tenant", maxKeyTenants)
		}
		for i, v := range in.TenantIDs {
			id, err := uuid.Parse(v)
			if err != nil {
				return ServiceKey{}, fielderr.New(fmt.Sprintf("tenant_ids[%d]", i), "must be a tenant id")
			}
			if !slices.Contains(k.TenantIDs, id) {
				k.TenantIDs = append(k.TenantIDs, id)
			}
		}
	}
	return k, nil
}

// UnknownTenantsError names the tenants of a new service key's set that do
// not exist.
type UnknownTenantsError struct{ IDs []uuid.UUID }

func (e *UnknownTenantsError) Error() string {
	ids := make([]string, len(e.IDs))
	for i, id := range e.IDs {
		ids[i] = id.String()
	}
	return "no such tenant: " + strings.Join(ids, ", ")
}

const (
	serviceKeyColumns   = `id, name, prefix, scopes, tenant_ids, created_at, last_used_at, expires_at, revoked_at`
	insertServiceKeySQL = `INSERT INTO service_keys (id, name, prefix, key_hash, scopes, tenant_ids, created_at, expires_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`
	unknownTenantsSQL   = `SELECT id FROM unnest($1::uuid[]) AS u(id) WHERE NOT EXISTS (SELECT 1 FROM tenants t WHERE t.id = u.id) ORDER BY id`
	listServiceKeysSQL  = `SELECT ` + serviceKeyColumns + ` FROM service_keys WHERE ($1::uuid IS NULL OR id > $1) ORDER BY id LIMIT $2`
	getServiceKeySQL    = `SELECT ` + serviceKeyColumns + ` FROM service_keys WHERE id = $1`
	revokeServiceKeySQL = `UPDATE service_keys SET revoked_at = now() WHERE id = $1 AND revoked_at IS NULL`
	// endPortalsOfKeySQL ends the portal sessions a revoked key opened,
	// links not yet used included.
	endPortalsOfKeySQL  = `UPDATE portal_sessions SET ended_at = now() WHERE created_by_service_key = $1 AND ended_at IS NULL`
	serviceKeyExistsSQL = `SELECT EXISTS (SELECT 1 FROM service_keys WHERE id = $1)`

	// authenticateServiceSQL finds a valid service key by its hash and the
	// tenant it asks to act for, when that tenant exists and is in the
	// key's set (tenant_id NULL otherwise); like authenticateSQL, it
	// records the key's use at most once a minute.
	authenticateServiceSQL = `WITH k AS (
    SELECT k.id, k.key_hash, k.scopes, k.tenant_ids, k.expires_at, k.last_used_at, t.id AS tenant_id,
        t.publish_rps, t.publish_burst
    FROM service_keys k
    LEFT JOIN tenants t ON t.id = $2 AND (k.tenant_ids IS NULL OR t.id = ANY (k.tenant_ids))
    WHERE k.key_hash = $1 AND k.revoked_at IS NULL AND (k.expires_at IS NULL OR k.expires_at > now())
), touched AS (
    UPDATE service_keys s SET last_used_at = now() FROM k
    WHERE s.id = k.id AND (k.last_used_at IS NULL OR k.last_used_at < now() - interval '1 minute')
)
SELECT id, key_hash, scopes, tenant_ids, expires_at, tenant_id, publish_rps, publish_burst FROM k`
)

// CreateServiceKey stores a new service key and returns it with the key
// itself, which is not recoverable afterwards. It refuses a tenant set
// naming tenants that do not exist (UnknownTenantsError).
func (s *Store) CreateServiceKey(ctx context.Context, k ServiceKey) (ServiceKey, string, error) {
	k.ID = uuid.Must(uuid.NewV7())
	k.CreatedAt = time.Now().UTC().Truncate(time.Microsecond)
	secret := ServiceKeyPrefix + newKey()[len(KeyPrefix):]
	hash := hashKey(secret)
	k.Prefix = secret[:len(ServiceKeyPrefix)+8]
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if k.TenantIDs != nil {
			rows, err := tx.Query(ctx, unknownTenantsSQL, k.TenantIDs)
			if err != nil {
				return fmt.Errorf("check service key tenants: %w", err)
			}
			unknown, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
			if err != nil {
				return fmt.Errorf("check service key tenants: %w", err)
			}
			if len(unknown) > 0 {
				return &UnknownTenantsError{IDs: unknown}
			}
		}
		_, err := tx.Exec(ctx, insertServiceKeySQL, k.ID, k.Name, k.Prefix, hash[:], k.Scopes, k.TenantIDs, k.CreatedAt, k.ExpiresAt)
		if err != nil {
			return fmt.Errorf("insert service key: %w", err)
		}
		return nil
	})
	if err != nil {
		return ServiceKey{}, "", err
	}
	return k, secret, nil
}

// ListServiceKeys returns up to limit service keys, oldest first, after
// the key id after when given; revoked and expired keys included.
func (s *Store) ListServiceKeys(ctx context.Context, after *uuid.UUID, limit int) ([]ServiceKey, error) {
	rows, err := s.pool.Query(ctx, listServiceKeysSQL, after, limit)
	if err != nil {
		return nil, fmt.Errorf("list service keys: %w", err)
	}
	keys, err := pgx.CollectRows(rows, scanServiceKey)
	if err != nil {
		return nil, fmt.Errorf("list service keys: %w", err)
	}
	return keys, nil
}

// GetServiceKey returns service key id (ErrKeyNotFound when unknown).
func (s *Store) GetServiceKey(ctx context.Context, id uuid.UUID) (ServiceKey, error) {
	rows, err := s.pool.Query(ctx, getServiceKeySQL, id)
	if err != nil {
		return ServiceKey{}, fmt.Errorf("get service key: %w", err)
	}
	k, err := pgx.CollectExactlyOneRow(rows, scanServiceKey)
	if errors.Is(err, pgx.ErrNoRows) {
		return ServiceKey{}, ErrKeyNotFound
	}
	if err != nil {
		return ServiceKey{}, fmt.Errorf("get service key: %w", err)
	}
	return k, nil
}

// RevokeServiceKey revokes service key id, and ends the portal sessions
// it opened (their links too) in the same transaction; revoking a revoked
// key does nothing (ErrKeyNotFound when unknown).
func (s *Store) RevokeServiceKey(ctx context.Context, id uuid.UUID) error {
	var revoked bool
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, revokeServiceKeySQL, id)
		if err != nil || tag.RowsAffected() == 0 {
			return err
		}
		revoked = true
		_, err = tx.Exec(ctx, endPortalsOfKeySQL, id)
		return err
	})
	if err != nil {
		return fmt.Errorf("revoke service key: %w", err)
	}
	if revoked {
		return nil
	}
	var exists bool
	if err := s.pool.QueryRow(ctx, serviceKeyExistsSQL, id).Scan(&exists); err != nil {
		return fmt.Errorf("revoke service key: %w", err)
	}
	if !exists {
		return ErrKeyNotFound
	}
	return nil
}

func scanServiceKey(row pgx.CollectableRow) (ServiceKey, error) {
	var k ServiceKey
	err := row.Scan(&k.ID, &k.Name, &k.Prefix, &k.Scopes, &k.TenantIDs, &k.CreatedAt, &k.LastUsedAt, &k.ExpiresAt, &k.RevokedAt)
	k.CreatedAt = k.CreatedAt.UTC()
	for _, t := range []**time.Time{&k.LastUsedAt, &k.ExpiresAt, &k.RevokedAt} {
		if *t != nil {
			u := (*t).UTC()
			*t = &u
		}
	}
	return k, err
}

// AuthenticateService returns the principal of a valid, unrevoked,
// unexpired service key acting for tenantID: ErrUnauthorized for a bad
// key, ErrTenantNotInSet when the tenant does not exist or is not in the
// key's set.
func (s *Store) AuthenticateService(ctx context.Context, key string, tenantID uuid.UUID) (Principal, error) {
	if !strings.HasPrefix(key, ServiceKeyPrefix) || len(key) > 200 {
		return Principal{}, ErrUnauthorized
	}
	hash := hashKey(key)
	var (
		sk       ServiceKey
		stored   []byte
		tenant   *uuid.UUID
		rps, bur *int
	)
	err := s.pool.QueryRow(ctx, authenticateServiceSQL, hash[:], tenantID).Scan(&sk.ID, &stored, &sk.Scopes, &sk.TenantIDs,
		&sk.ExpiresAt, &tenant, &rps, &bur)
	if errors.Is(err, pgx.ErrNoRows) {
		return Principal{}, ErrUnauthorized
	}
	if err != nil {
		return Principal{}, fmt.Errorf("authenticate service key: %w", err)
	}
	if !sameHash(stored, hash) {
		return Principal{}, ErrUnauthorized
	}
	if tenant == nil {
		return Principal{}, ErrTenantNotInSet
	}
	p := Principal{TenantID: *tenant, ExpiresAt: sk.ExpiresAt, Service: &sk}
	p.PublishLimit.RequestsPerSecond, p.PublishLimit.Burst = *rps, *bur
	return p, nil
}
