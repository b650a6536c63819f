package tenant

import (
	"context"
	"crypto/sha256"
	"sync"
	"time"

	"github.com/google/uuid"
	"golang.org/x/sync/singleflight"
)

// CachedAuth answers Authenticate from memory for keys seen within ttl, so
// that the publish path does not pay a database round trip per request.
//
// Requests that miss the cache for the same key at the same moment (the
// first burst after a start or a quiet spell, and every ttl under load)
// share one database lookup: otherwise each of them would take a
// connection of its own, and a pool opening connections by the dozen
// stalls every publish behind them.
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
	// loads shares a lookup between the requests missing the same key.
	loads singleflight.Group
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
	return a.cached(ctx, cacheKey{hash: hashKey(key)}, func(ctx context.Context) (Principal, error) {
		return a.store.Authenticate(ctx, key)
	})
}

// AuthenticateService returns the principal of a valid service key acting
// for tenantID, from the cache when it holds a fresh answer. Only
// successes are cached: a tenant added to nothing is asked again.
func (a *CachedAuth) AuthenticateService(ctx context.Context, key string, tenantID uuid.UUID) (Principal, error) {
	return a.cached(ctx, cacheKey{hash: hashKey(key), tenant: tenantID}, func(ctx context.Context) (Principal, error) {
		return a.store.AuthenticateService(ctx, key, tenantID)
	})
}

// loadWait bounds a shared lookup, which does not end with the context of
// the request that started it: the others sharing it still need its answer.
const loadWait = 10 * time.Second

// cached answers k from the cache when it holds a fresh answer, else from
// load, shared with the other requests missing k meanwhile, caching a
// success. A request whose ctx ends first stops waiting.
func (a *CachedAuth) cached(ctx context.Context, k cacheKey, load func(context.Context) (Principal, error)) (Principal, error) {
	a.mu.RLock()
	e, ok := a.entries[k]
	a.mu.RUnlock()
	if ok && a.now().Before(e.expires) {
		return e.p, nil
	}
	shared := a.loads.DoChan(string(k.hash[:])+string(k.tenant[:]), func() (any, error) {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), loadWait)
		defer cancel()
		now := a.now()
		a.mu.RLock()
		gen := a.gen
		a.mu.RUnlock()
		p, err := load(ctx)
		if err != nil {
			return Principal{}, err
		}
		a.remember(k, p, gen, now)
		return p, nil
	})
	select {
	case r := <-shared:
		if r.Err != nil {
			return Principal{}, r.Err
		}
		return r.Val.(Principal), nil
	case <-ctx.Done():
		return Principal{}, ctx.Err()
	}
}

// remember caches p for k, looked up at now, unless a Forget came since
// generation gen.
func (a *CachedAuth) remember(k cacheKey, p Principal, gen uint64, now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.gen != gen {
		return
	}
	if len(a.entries) >= maxCachedKeys {
		a.entries = map[cacheKey]cachedPrincipal{}
	}
	expires := now.Add(a.ttl)
	if p.ExpiresAt != nil && p.ExpiresAt.Before(expires) {
		expires = *p.ExpiresAt
	}
	a.entries[k] = cachedPrincipal{p: p, expires: expires}
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
