package tenant

import (
	"context"
	"crypto/sha256"
	"sync"
	"time"

	"github.com/google/uuid"
)

// CachedAuth answers Authenticate from memory for keys seen within ttl, so
// that the publish path does not pay a database round trip per request.
//
// A key's expiry is honoured exactly: an entry never outlives the key's
// expires_at. A revocation is seen at once by the process that revoked the
// key (RevokeKey, then Forget); another api process keeps trusting the key
// for at most ttl after the revocation committed.
type CachedAuth struct {
	store *Store
	ttl   time.Duration
	now   func() time.Time

	mu      sync.RWMutex
	entries map[cacheKey]cachedPrincipal
	// gen counts Forget calls: an answer from the database obtained before
	// a Forget is not cached after it, so a request racing a revocation
	// cannot put the revoked key back.
	gen uint64
}

// cacheKey is a key's hash and, for a service key, the tenant it acts for.
type cacheKey struct {
	hash   [sha256.Size]byte
	tenant uuid.UUID
}

type cachedPrincipal struct {
	p       Principal
	expires time.Time
}

// maxCachedKeys bounds the cache; past it the cache is emptied (keys are
// few per tenant, so this only happens under a flood of distinct keys).
const maxCachedKeys = 100_000

// NewCachedAuth returns an authenticator caching store's answers for ttl.
func NewCachedAuth(store *Store, ttl time.Duration) *CachedAuth {
	return &CachedAuth{store: store, ttl: ttl, now: time.Now, entries: map[cacheKey]cachedPrincipal{}}
}

// Authenticate returns the principal of a valid key, from the cache when it
// holds a fresh answer.
func (a *CachedAuth) Authenticate(ctx context.Context, key string) (Principal, error) {
	return a.cached(cacheKey{hash: hashKey(key)}, func() (Principal, error) { return a.store.Authenticate(ctx, key) })
}

// AuthenticateService returns the principal of a valid service key acting
// for tenantID, from the cache when it holds a fresh answer. Only
// successes are cached: a tenant added to nothing is asked again.
func (a *CachedAuth) AuthenticateService(ctx context.Context, key string, tenantID uuid.UUID) (Principal, error) {
	return a.cached(cacheKey{hash: hashKey(key), tenant: tenantID}, func() (Principal, error) {
		return a.store.AuthenticateService(ctx, key, tenantID)
	})
}

// cached answers k from the cache when it holds a fresh answer, else from
// load, caching a success.
func (a *CachedAuth) cached(k cacheKey, load func() (Principal, error)) (Principal, error) {
	now := a.now()
	a.mu.RLock()
	e, ok := a.entries[k]
	gen := a.gen
	a.mu.RUnlock()
	if ok && now.Before(e.expires) {
		return e.p, nil
	}
	p, err := load()
	if err != nil {
		return Principal{}, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.gen != gen {
		return p, nil
	}
	if len(a.entries) >= maxCachedKeys {
		a.entries = map[cacheKey]cachedPrincipal{}
	}
	expires := now.Add(a.ttl)
	if p.ExpiresAt != nil && p.ExpiresAt.Before(expires) {
		expires = *p.ExpiresAt
	}
	a.entries[k] = cachedPrincipal{p: p, expires: expires}
	return p, nil
}

// Forget drops every cached answer for the API key or service key keyID,
// so that its next use asks the database. Call it after a revocation
// commits.
func (a *CachedAuth) Forget(keyID uuid.UUID) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.gen++
	for h, e := range a.entries {
		if e.p.KeyID == keyID || (e.p.Service != nil && e.p.Service.ID == keyID) {
			delete(a.entries, h)
		}
	}
}
