package httpapi

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/google/uuid"

	"github.com/hookline/hookline/internal/config"
	"github.com/hookline/hookline/internal/tenant"
)

const (
	principalKey = "principal"
	loggerKey    = "logger"
	// adminKey is set on routes that take either credential when the
	// caller presented the admin token.
	adminKey = "admin"
)

func bearer(c *gin.Context) (string, bool) {
	return bearerToken(c.GetHeader("Authorization"))
}

// bearerToken reads the token of an Authorization header value.
func bearerToken(h string) (string, bool) {
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(token) == "" {
		return "", false
	}
	return strings.TrimSpace(token), true
}

// requireAdmin lets through only requests bearing the admin token.
func (s *Server) requireAdmin(c *gin.Context) {
	token, ok := bearer(c)
	if !ok || subtle.ConstantTimeCompare([]byte(token), []byte(s.cfg.API.AdminToken)) != 1 {
		abort(c, newError(errUnauthorized.Status, "unauthorized", "missing or invalid admin token: send Authorization: Bearer $ADMIN_TOKEN"))
		return
	}
	c.Next()
}

// TenantHeader names the tenant a service key acts for (docs/API.md,
// "Service keys").
const TenantHeader = "Hookline-Tenant"

// requireTenant authenticates the caller of a tenant route and stores its
// principal: a tenant API key, which acts for its own tenant, or a service
// key acting for the tenant named in the Hookline-Tenant header, within the
// scopes the route needs (routeScopes). A tenant outside the service key's
// set is the same 404 as one that does not exist; a tenant API key naming
// another tenant in the header gets that 404 too.
func (s *Server) requireTenant(c *gin.Context) {
	p, err := s.authenticate(c.Request.Context(), c.GetHeader("Authorization"), c.GetHeader(TenantHeader),
		c.Request.Method, c.FullPath())
	if err != nil {
		abort(c, err)
		return
	}
	s.setPrincipal(c, p)
	c.Next()
}

// authenticate is requireTenant's check of the credential in
// authorization (an Authorization header value) acting for tenantRef (a
// Hookline-Tenant header value, may be empty) on the route of method.
func (s *Server) authenticate(ctx context.Context, authorization, tenantRef, method, route string) (tenant.Principal, error) {
	token, ok := bearerToken(authorization)
	if !ok {
		return tenant.Principal{}, errUnauthorized
	}
	if strings.HasPrefix(token, tenant.ServiceKeyPrefix) {
		p, err := s.authenticateService(ctx, token, tenantRef, method, route, routeScopes(method, route)...)
		return p, authErr(err)
	}
	p, err := s.auth.Authenticate(ctx, token)
	if err != nil {
		return tenant.Principal{}, authErr(err)
	}
	if tenantRef != "" {
		if id, perr := uuid.Parse(tenantRef); perr != nil || id != p.TenantID {
			return tenant.Principal{}, errNotFound
		}
	}
	return p, nil
}

// AuthenticatePublisher authenticates a producer as POST /v1/events does:
// authorization is its Authorization value (Bearer and a tenant API key
// or a service key with the publish scope), tenantRef its Hookline-Tenant
// value. Its errors are answered by PublishProblem. The RabbitMQ source of
// publishes authenticates its messages with it.
func (s *Server) AuthenticatePublisher(ctx context.Context, authorization, tenantRef string) (tenant.Principal, error) {
	return s.authenticate(ctx, authorization, tenantRef, http.MethodPost, "/v1/events")
}

// adminOrService lets through the admin token, and a service key acting
// for the tenant of the route's :id with every scope given.
func (s *Server) adminOrService(scopes ...string) gin.HandlerFunc {
	return func(c *gin.Context) {
		token, ok := bearer(c)
		if ok && subtle.ConstantTimeCompare([]byte(token), []byte(s.cfg.API.AdminToken)) == 1 {
			c.Set(adminKey, true)
			c.Next()
			return
		}
		if !ok || !strings.HasPrefix(token, tenant.ServiceKeyPrefix) {
			abort(c, newError(errUnauthorized.Status, "unauthorized", "missing or invalid credential: send Authorization: Bearer with the admin token or a service key"))
			return
		}
		p, err := s.authenticateService(c.Request.Context(), token, c.Param("id"), c.Request.Method, c.FullPath(), scopes...)
		if err != nil {
			abort(c, authErr(err))
			return
		}
		s.setPrincipal(c, p)
		c.Next()
	}
}

// authenticateService checks a service key acting for the tenant named by
// tenantRef with the scopes given (all of them). The key is checked first:
// a wrong key is 401 whatever the tenant named.
func (s *Server) authenticateService(ctx context.Context, token, tenantRef, method, route string, scopes ...string) (tenant.Principal, error) {
	id, perr := uuid.Parse(tenantRef)
	p, err := s.auth.AuthenticateService(ctx, token, id)
	switch {
	case errors.Is(err, tenant.ErrUnauthorized):
		return tenant.Principal{}, err
	case tenantRef == "":
		return tenant.Principal{}, newError(http.StatusBadRequest, "tenant_required",
			"a service key acts for one tenant per request: name it in the %s header", TenantHeader)
	case perr != nil:
		return tenant.Principal{}, errNotFound
	case err != nil:
		return tenant.Principal{}, err
	}
	for _, scope := range scopes {
		switch {
		case scope == scopeNone:
			return tenant.Principal{}, newError(http.StatusForbidden, "forbidden_for_service_keys",
				"service keys cannot use %s; the admin manages a tenant's API keys under /v1/tenants/{id}/api-keys", route)
		case !p.Service.Allows(scope):
			return tenant.Principal{}, newError(http.StatusForbidden, "insufficient_scope",
				"this service key lacks the %s scope that %s %s needs", scope, method, route)
		}
	}
	return p, nil
}

// scopeNone marks routes no service key may use.
const scopeNone = ""

// sendsStoredPayloads are the routes that send payloads hookline already
// stores to an endpoint: whoever may start them could read those payloads
// (by pointing a webhook at itself first), so they need read as well as
// manage.
var sendsStoredPayloads = map[string]bool{
	"/v1/webhooks/:id/recover":                       true,
	"/v1/webhooks/:id/deliveries/:delivery_id/retry": true,
	"/v1/events/:id/replay":                          true,
	"/v1/dlq/retry-batch":                            true,
}

// routeScopes are the service-key scopes a tenant route needs (all of
// them): publish for publishing, read for every GET, manage for every other
// change, and read too for a change that sends stored payloads; the
// tenant's own API keys are not a service key's to manage (scopeNone).
// docs/API.md lists them per route.
func routeScopes(method, route string) []string {
	switch {
	case route == "/v1/api-keys" || strings.HasPrefix(route, "/v1/api-keys/"):
		return []string{scopeNone}
	case method == http.MethodGet || method == http.MethodHead:
		return []string{tenant.ScopeRead}
	case method == http.MethodPost && (route == "/v1/events" || route == "/v1/events/batch"):
		return []string{tenant.ScopePublish}
	case method == http.MethodPost && sendsStoredPayloads[route]:
		return []string{tenant.ScopeManage, tenant.ScopeRead}
	}
	return []string{tenant.ScopeManage}
}

// authErr maps the authenticator's errors to answers.
func authErr(err error) error {
	switch {
	case errors.Is(err, tenant.ErrUnauthorized):
		return errUnauthorized
	case errors.Is(err, tenant.ErrTenantNotInSet):
		return errNotFound
	}
	return err
}

// setPrincipal stores who acts, and names the tenant (and the service key)
// in the request's log lines.
func (s *Server) setPrincipal(c *gin.Context, p tenant.Principal) {
	c.Set(principalKey, p)
	l := logger(c).With("tenant_id", p.TenantID.String())
	if p.Service != nil {
		l = l.With("service_key_id", p.Service.ID.String())
	}
	c.Set(loggerKey, l)
}

func principal(c *gin.Context) tenant.Principal {
	return c.MustGet(principalKey).(tenant.Principal)
}

// AuthThrottle answers 429 to a client that failed to authenticate too
// often: a wrong admin token, API key or console sign-in key. Each client
// address has a bucket of failures (api.auth_failures): a failure takes a
// token, a client without one is refused before its credentials are looked
// at, and tokens come back at a steady rate. A failure is an answer of
// 401, so that every way of authenticating, present and future, is
// counted without each handler having to remember to.
//
// The buckets live in this process's memory, not in Redis: authentication
// runs on every API request and must not wait on another round trip, nor
// fail open or closed with Redis. With several api processes a client gets
// the allowance once per process, which still keeps guessing an admin
// token or a 32-byte key hopeless. A failure made while others are in
// flight is still counted: the bucket goes into debt, so that a burst of
// concurrent guesses is paid for with a longer wait, never with more
// guesses over time.
//
// A bucket is kept as the time it will be full again (GCRA's theoretical
// arrival time): tokens are (burst - (full - now) / interval), in whole
// durations, so that waits are exact.
type AuthThrottle struct {
	// interval earns one failure back; tolerance is (burst - 1) intervals.
	interval, tolerance time.Duration
	trusted             []netip.Prefix
	log                 *slog.Logger
	now                 func() time.Time

	mu        sync.Mutex
	fullAt    map[netip.Prefix]time.Time
	lastSweep time.Time
}

// maxThrottledClients bounds the buckets kept. Full buckets carry nothing
// and are dropped first; beyond that an arbitrary one goes.
const maxThrottledClients = 100_000

// NewAuthThrottle returns the throttle configured by cfg (auth_failures,
// trusted_proxies); clients it starts refusing are logged to log.
func NewAuthThrottle(cfg config.API, log *slog.Logger) (*AuthThrottle, error) {
	if cfg.AuthFailures.Burst < 1 || cfg.AuthFailures.PerMinute < 1 {
		return nil, errors.New("api.auth_failures: burst and per_minute must be at least 1")
	}
	interval := time.Minute / time.Duration(cfg.AuthFailures.PerMinute)
	t := &AuthThrottle{interval: interval, tolerance: time.Duration(cfg.AuthFailures.Burst-1) * interval,
		log: log, now: time.Now, fullAt: map[netip.Prefix]time.Time{}}
	for _, c := range cfg.TrustedProxies {
		p, err := netip.ParsePrefix(strings.TrimSpace(c))
		if err != nil {
			return nil, fmt.Errorf("api.trusted_proxies: %w", err)
		}
		t.trusted = append(t.trusted, p.Masked())
	}
	return t, nil
}

// Wrap returns next behind the throttle.
func (t *AuthThrottle) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, ok := t.client(r)
		if !ok || !presentsCredential(r) {
			next.ServeHTTP(w, r)
			return
		}
		if wait := t.wait(key); wait > 0 {
			tooManyFailures(w, wait)
			return
		}
		rec := &statusRecorder{ResponseWriter: w}
		next.ServeHTTP(rec, r)
		if rec.status == http.StatusUnauthorized {
			t.fail(key)
		}
	})
}

// presentsCredential reports whether r asks to be authenticated: it bears
// an Authorization header or posts the console's sign-in form. Other
// requests (health, metrics, console pages under a signed session) pass a
// refused client by.
func presentsCredential(r *http.Request) bool {
	return r.Header.Get("Authorization") != "" || (r.Method == http.MethodPost && r.URL.Path == "/console/sign-in")
}

// client returns the bucket key of r's client: its address, taken from
// X-Forwarded-For only past trusted proxies (the right-most address that is
// not one); an IPv6 client is its /64, which one holder usually has whole.
func (t *AuthThrottle) client(r *http.Request) (netip.Prefix, bool) {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return netip.Prefix{}, false
	}
	addr := ap.Addr().Unmap().WithZone("")
	if t.trusts(addr) {
		hops := strings.Split(strings.Join(r.Header.Values("X-Forwarded-For"), ","), ",")
		for i := len(hops) - 1; i >= 0 && t.trusts(addr); i-- {
			hop, err := netip.ParseAddr(strings.TrimSpace(hops[i]))
			if err != nil {
				break
			}
			addr = hop.Unmap().WithZone("")
		}
	}
	bits := 32
	if addr.Is6() {
		bits = 64
	}
	p, err := addr.Prefix(bits)
	return p, err == nil
}

func (t *AuthThrottle) trusts(a netip.Addr) bool {
	for _, p := range t.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// wait returns how long the client must wait for a failure token, 0 when
// it has one.
func (t *AuthThrottle) wait(key netip.Prefix) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	full, ok := t.fullAt[key]
	if !ok {
		return 0
	}
	now := t.now()
	if !full.After(now) {
		delete(t.fullAt, key)
		return 0
	}
	return max(0, full.Sub(now)-t.tolerance)
}

// fail takes a token from the client's bucket, into debt if need be.
func (t *AuthThrottle) fail(key netip.Prefix) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	full, ok := t.fullAt[key]
	if !ok {
		t.makeRoom(now)
	}
	if full.Before(now) {
		full = now
	}
	full = full.Add(t.interval)
	t.fullAt[key] = full
	if ahead := full.Sub(now); ahead > t.tolerance && ahead <= t.tolerance+t.interval {
		t.log.Warn("client refused after failed authentications", "client", key.String())
	}
}

// makeRoom drops buckets when there are too many: the full ones (swept at
// most once a second), else arbitrary ones.
func (t *AuthThrottle) makeRoom(now time.Time) {
	if len(t.fullAt) < maxThrottledClients {
		return
	}
	if now.Sub(t.lastSweep) >= time.Second {
		t.lastSweep = now
		for k, full := range t.fullAt {
			if !full.After(now) {
				delete(t.fullAt, k)
			}
		}
	}
	for k := range t.fullAt {
		if len(t.fullAt) < maxThrottledClients {
			break
		}
		delete(t.fullAt, k)
	}
}

// tooManyFailures answers a throttled client: 429, Retry-After in whole
// seconds.
func tooManyFailures(w http.ResponseWriter, wait time.Duration) {
	secs := max(1, int(math.Ceil(wait.Seconds())))
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(http.StatusTooManyRequests)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": newError(http.StatusTooManyRequests, "too_many_auth_failures",
		"too many failed authentications from your address: retry in %d s", secs)})
}

// statusRecorder remembers the status a handler answered.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(code int) {
	if r.status == 0 && code >= 200 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

// Flush lets handlers below (Gin's writer) flush through the recorder.
func (r *statusRecorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap gives http.ResponseController the writer underneath.
func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }
