package tenant

import (
	"context"
	"crypto/sha256"
	"sync"
	"time"
)

// CachedAuth answers Authenticate from memory for keys seen within ttl, so
// that the publish path does not pay a database round trip per request. A
// key that stops being valid in the database (revoked, expired) keeps
// working here for at most ttl.
type CachedAuth struct {
	store *Store
	ttl   time.Duration
	now   func() time.Time

	mu      sync.RWMutex
	entries map[[sha256.Size]byte]cachedPrincipal
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
	return &CachedAuth{store: store, ttl: ttl, now: time.Now, entries: map[[sha256.Size]byte]cachedPrincipal{}}
}

// Authenticate returns the principal of a valid key, from the cache when it
// holds a fresh answer.
func (a *CachedAuth) Authenticate(ctx context.Context, key string) (Principal, error) {
	h := hashKey(key)
	now := a.now()
	a.mu.RLock()
	e, ok := a.entries[h]
	a.mu.RUnlock()
	if ok && now.Before(e.expires) {
		return e.p, nil
	}
	p, err := a.store.Authenticate(ctx, key)
	if err != nil {
		return Principal{}, err
	}
	a.mu.Lock()
	if len(a.entries) >= maxCachedKeys {
		a.entries = map[[sha256.Size]byte]cachedPrincipal{}
	}
	expires := now.Add(a.ttl)
	if p.ExpiresAt != nil && p.ExpiresAt.Before(expires) {
		expires = *p.ExpiresAt
	}
	a.entries[h] = cachedPrincipal{p: p, expires: expires}
	a.mu.Unlock()
	return p, nil
}
