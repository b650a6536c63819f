package tenant

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/hookline/hookline/internal/audit"
	"github.com/hookline/hookline/internal/fielderr"
)

// Errors of key management.
var (
	ErrKeyNotFound = errors.New("api key not found")
	// ErrLastKey refuses to revoke the tenant's last active key, which
	// would lock the tenant out of its own account.
	ErrLastKey = errors.New("this is the tenant's last active API key: create another before revoking it")
	// ErrTooManyKeys bounds the active keys of a tenant.
	ErrTooManyKeys = errors.New("too many active API keys")
)

// MaxActiveKeys is how many unrevoked, unexpired keys a tenant may hold.
const MaxActiveKeys = 100

// prefixLen is how much of a key is kept in clear to tell keys apart: "hk_"
// and 8 characters (48 random bits), not enough to guess the rest.
const prefixLen = len(KeyPrefix) + 8

// Key is an API key as listed: never the key itself, only its prefix.
type Key struct {
	ID         uuid.UUID  `json:"id"`
	Name       string     `json:"name"`
	Prefix     string     `json:"prefix"`
	CreatedAt  time.Time  `json:"created_at"`
	LastUsedAt *time.Time `json:"last_used_at"`
	ExpiresAt  *time.Time `json:"expires_at"`
	RevokedAt  *time.Time `json:"revoked_at"`
}

// KeyInput is a request to create a key.
type KeyInput struct {
	Name *string `json:"name"`
	// ExpiresAt is an RFC 3339 time; the key never expires when absent.
	ExpiresAt *string `json:"expires_at"`
}

// BuildKey validates in at now and returns the key to create.
func BuildKey(in KeyInput, now time.Time) (Key, error) {
	k := Key{Name: "default"}
	if in.Name != nil {
		k.Name = strings.TrimSpace(*in.Name)
	}
	if k.Name == "" || len(k.Name) > maxNameLen {
		return Key{}, fielderr.New("name", "must be 1 to %d characters", maxNameLen)
	}
	if err := fielderr.Text("name", k.Name); err != nil {
		return Key{}, err
	}
	if in.ExpiresAt != nil {
		t, err := time.Parse(time.RFC3339Nano, *in.ExpiresAt)
		if err != nil {
			return Key{}, fielderr.New("expires_at", "must be an RFC 3339 time")
		}
		if !t.After(now) {
			return Key{}, fielderr.New("expires_at", "must be in the future")
		}
		t = t.UTC().Truncate(time.Microsecond)
		k.ExpiresAt = &t
	}
	return k, nil
}

const (
	keyColumns   = `id, name, prefix, created_at, last_used_at, expires_at, revoked_at`
	insertKeySQL = `INSERT INTO api_keys (id, tenant_id, name, prefix, key_hash, created_at, expires_at)
VALUES ($1, $2, $3, $4, $5, $6, $7)`
	// lockTenantSQL serialises key creation and revocation per tenant, so
	// that two concurrent revocations cannot remove the last two keys.
	lockTenantSQL  = `SELECT id FROM tenants WHERE id = $1 FOR UPDATE`
	countActiveSQL = `SELECT count(*) FROM api_keys WHERE tenant_id = $1 AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())`
	listKeysSQL    = `SELECT ` + keyColumns + ` FROM api_keys WHERE tenant_id = $1 AND ($2::uuid IS NULL OR id > $2) ORDER BY id LIMIT $3`
	revokeKeySQL   = `UPDATE api_keys SET revoked_at = now() WHERE id = $1 AND tenant_id = $2 AND revoked_at IS NULL
RETURNING expires_at IS NULL OR expires_at > now()`
	keyExistsSQL = `SELECT EXISTS (SELECT 1 FROM api_keys WHERE id = $1 AND tenant_id = $2)`
)

// CreateKey stores a new key for the tenant and returns it with the key
// itself, which is not recoverable afterwards.
func (s *Store) CreateKey(ctx context.Context, tenantID uuid.UUID, k Key) (Key, string, error) {
	k.ID = uuid.Must(uuid.NewV7())
	k.CreatedAt = time.Now().UTC().Truncate(time.Microsecond)
	secret := newKey()
	hash := hashKey(secret)
	k.Prefix = secret[:prefixLen]
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := lockTenant(ctx, tx, tenantID); err != nil {
			return err
		}
		var active int
		if err := tx.QueryRow(ctx, countActiveSQL, tenantID).Scan(&active); err != nil {
			return fmt.Errorf("count api keys: %w", err)
		}
		if active >= MaxActiveKeys {
			return ErrTooManyKeys
		}
		if _, err := tx.Exec(ctx, insertKeySQL, k.ID, tenantID, k.Name, k.Prefix, hash[:], k.CreatedAt, k.ExpiresAt); err != nil {
			return fmt.Errorf("insert api key: %w", err)
		}
		return audit.Record(ctx, tx, tenantID, audit.APIKeyCreated, "api_key", k.ID.String(),
			map[string]any{"name": k.Name, "prefix": k.Prefix, "expires_at": k.ExpiresAt})
	})
	if err != nil {
		return Key{}, "", err
	}
	return k, secret, nil
}

// ListKeys returns up to limit keys of the tenant, oldest first, after
// the key id after when given; revoked and expired keys included.
func (s *Store) ListKeys(ctx context.Context, tenantID uuid.UUID, after *uuid.UUID, limit int) ([]Key, error) {
	rows, err := s.pool.Query(ctx, listKeysSQL, tenantID, after, limit)
	if err != nil {
		return nil, fmt.Errorf("list api keys: %w", err)
	}
	keys, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Key, error) {
		var k Key
		err := row.Scan(&k.ID, &k.Name, &k.Prefix, &k.CreatedAt, &k.LastUsedAt, &k.ExpiresAt, &k.RevokedAt)
		k.CreatedAt = k.CreatedAt.UTC()
		for _, t := range []**time.Time{&k.LastUsedAt, &k.ExpiresAt, &k.RevokedAt} {
			if *t != nil {
				u := (*t).UTC()
				*t = &u
			}
		}
		return k, err
	})
	if err != nil {
		return nil, fmt.Errorf("list api keys: %w", err)
	}
	return keys, nil
}

// RevokeKey revokes the tenant's key id; revoking a revoked key does
// nothing. It refuses (ErrLastKey) to revoke the last active key. The
// database refuses a revoked key at once; a CachedAuth must be told
// (Forget) after this returns.
func (s *Store) RevokeKey(ctx context.Context, tenantID, id uuid.UUID) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := lockTenant(ctx, tx, tenantID); err != nil {
			return err
		}
		var wasActive bool
		err := tx.QueryRow(ctx, revokeKeySQL, id, tenantID).Scan(&wasActive)
		if errors.Is(err, pgx.ErrNoRows) {
			var exists bool
			if err := tx.QueryRow(ctx, keyExistsSQL, id, tenantID).Scan(&exists); err != nil {
				return fmt.Errorf("look up api key %s: %w", id, err)
			}
			if !exists {
				return ErrKeyNotFound
			}
			return nil // already revoked
		}
		if err != nil {
			return fmt.Errorf("revoke api key %s: %w", id, err)
		}
		var active int
		if err := tx.QueryRow(ctx, countActiveSQL, tenantID).Scan(&active); err != nil {
			return fmt.Errorf("count api keys: %w", err)
		}
		if wasActive && active == 0 {
			return ErrLastKey
		}
		return audit.Record(ctx, tx, tenantID, audit.APIKeyRevoked, "api_key", id.String(), nil)
	})
}

func lockTenant(ctx context.Context, tx pgx.Tx, tenantID uuid.UUID) error {
	var id uuid.UUID
	err := tx.QueryRow(ctx, lockTenantSQL, tenantID).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("lock tenant %s: %w", tenantID, err)
	}
	return nil
}

// sameHash compares two key hashes in constant time.
func sameHash(stored []byte, h [32]byte) bool {
	return subtle.ConstantTimeCompare(stored, h[:]) == 1
}
