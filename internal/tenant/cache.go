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
	entries map[[sha256.Size]byte]cachedPrincipal
	// gen counts Forget calls: an answer from the database obtained before
	// a Forget is not cached after it, so a request racing a revocation
	// cannot put the revoked key back.
	gen uint64
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
	gen := a.gen
	a.mu.RUnlock()
	if ok && now.Before(e.expires) {
		return e.p, nil
	}
	p, err := a.store.Authenticate(ctx, key)
	if err != nil {
		return Principal{}, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.gen != gen {
		return p, nil
	}
	if len(a.entries) >= maxCachedKeys {
		a.entries = map[[sha256.Size]byte]cachedPrincipal{}
	}
	expires := now.Add(a.ttl)
	if p.ExpiresAt != nil && p.ExpiresAt.Before(expires) {
		expires = *p.ExpiresAt
	}
	a.entries[h] = cachedPrincipal{p: p, expires: expires}
	return p, nil
}

// Forget drops every cached answer for the key keyID, so that its next use
// asks the database. Call it after a revocation commits.
func (a *CachedAuth) Forget(keyID uuid.UUID) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.gen++
	for h, e := range a.entries {
		if e.p.KeyID == keyID {
			delete(a.entries, h)
		}
	}
}
