// Package console is the operator console served by the api under
// /console: server-rendered HTML pages (html/template, stylesheet embedded,
// no JavaScript) to look at webhooks and their delivery history, retry and
// replay, override circuit breakers, run DLQ batch retries and webhook
// recoveries, and read the audit log.
//
// The console holds no business logic of its own: every action calls the
// store the REST API calls (dlq.Store, event.Service, breaker.Overrides)
// and writes the same audit row. Its only SQL is a handful of read queries
// the stores do not offer (newest-first history, per-webhook summaries);
// they live in queries.go.
//
// Sign-in takes a tenant API key. The session is a cookie signed with
// HMAC-SHA256 that names the key (never the key itself) and an expiry, so
// that any api process accepts it; every request checks again that the key
// is neither revoked nor expired. Every form carries a CSRF token derived
// from the session. The signing key is random and shared through Postgres
// (signingkey.go), never derived from another credential.
package console

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookline/hookline/internal/audit"
	"github.com/hookline/hookline/internal/breaker"
	"github.com/hookline/hookline/internal/delivery"
	"github.com/hookline/hookline/internal/dlq"
	"github.com/hookline/hookline/internal/event"
	"github.com/hookline/hookline/internal/history"
	"github.com/hookline/hookline/internal/metrics"
	"github.com/hookline/hookline/internal/ratelimit"
	"github.com/hookline/hookline/internal/secret"
	"github.com/hookline/hookline/internal/tenant"
	"github.com/hookline/hookline/internal/verify"
	"github.com/hookline/hookline/internal/webhook"
)

// Config configures the console.
type Config struct {
	// DB runs the console's read queries. The api serves the console only
	// when it is set.
	DB *pgxpool.Pool
	// Keys seal the console's signing keys at rest (security.secret_keys);
	// nil stores them in clear, as webhook secrets are without keys.
	Keys *secret.Keyring
	// SessionTTL is how long a sign-in lasts (never past the key's own
	// expiry). Default 12h.
	SessionTTL time.Duration
	// SecureCookies marks cookies Secure on every request. By default they
	// are Secure when the request came over TLS or through a proxy that
	// says so (X-Forwarded-Proto: https); set this when a TLS-terminating
	// proxy does not send that header.
	SecureCookies bool
	// SecretRotationGrace is how long a rotated secret keeps signing
	// (api.secret_rotation_grace). Default 24h.
	SecretRotationGrace time.Duration
}

// Authenticator checks a tenant API key (tenant.Store, or the api's cache
// in front of it).
type Authenticator interface {
	Authenticate(ctx context.Context, key string) (tenant.Principal, error)
}

// Deps are the stores the console calls: the same ones as the REST API.
type Deps struct {
	Log        *slog.Logger
	Tenants    *tenant.Store
	Auth       Authenticator
	Webhooks   *webhook.Store
	Events     *event.Service
	Deliveries *history.Reader
	DLQ        *dlq.Store
	Breaker    *breaker.Breaker
	Overrides  *breaker.Overrides
	// Rules validate webhooks created and changed, as in the REST API.
	Rules webhook.Rules
	// Limits holds the tenants' publish buckets, which test events,
	// retries and replays take from as in the REST API; nil: unlimited.
	Limits *ratelimit.Limiter
}

// Console serves the pages; Register mounts them.
type Console struct {
	cfg        Config
	log        *slog.Logger
	db         *pgxpool.Pool
	tenants    *tenant.Store
	auth       Authenticator
	auditLog   *audit.Store
	webhooks   *webhook.Store
	events     *event.Service
	deliveries *history.Reader
	dlq        *dlq.Store
	breaker    *breaker.Breaker
	overrides  *breaker.Overrides
	rules      webhook.Rules
	limits     *ratelimit.Limiter
	checker    *verify.Checker
	chartCache chartCache
	keys       *signingKeys
	pages      pages
	now        func() time.Time
}

// defaultSessionTTL is how long a sign-in lasts by default.
const defaultSessionTTL = 12 * time.Hour

// New returns a Console on cfg.DB and the stores of d.
func New(cfg Config, d Deps) *Console {
	if cfg.SessionTTL <= 0 {
		cfg.SessionTTL = defaultSessionTTL
	}
	if cfg.SecretRotationGrace <= 0 {
		cfg.SecretRotationGrace = 24 * time.Hour
	}
	c := &Console{cfg: cfg, log: d.Log, db: cfg.DB, tenants: d.Tenants, auth: d.Auth, auditLog: d.Tenants.AuditLog(),
		webhooks: d.Webhooks, events: d.Events, deliveries: d.Deliveries, dlq: d.DLQ, breaker: d.Breaker,
		overrides: d.Overrides, rules: d.Rules, limits: d.Limits, now: time.Now,
		keys:    &signingKeys{db: cfg.DB, seal: cfg.Keys, log: d.Log},
		checker: verify.New(verify.Config{Policy: d.Rules.Network, UserAgent: delivery.UserAgent})}
	c.pages = parsePages(c.funcs())
	return c
}

// Register mounts the console's routes on g (the /console group).
func (c *Console) Register(g *gin.RouterGroup) {
	g.Use(securityHeaders)
	g.GET("/static/console.css", serveStylesheet)
	g.GET("/sign-in", c.signInPage)
	g.POST("/sign-in", c.signIn)

	s := g.Group("", c.requireSession)
	s.POST("/sign-out", c.signOut)
	c.registerPages(s, true)
}

// registerPages mounts the pages the console and the portal share on g,
// and the operator's pages when operator is set (the console's).
func (c *Console) registerPages(g *gin.RouterGroup, operator bool) {
	g.GET("", func(ctx *gin.Context) { ctx.Redirect(http.StatusSeeOther, root(ctx)+"/webhooks") })
	g.GET("/webhooks", c.webhooksPage)
	g.GET("/webhooks/new", c.newWebhookPage)
	g.POST("/webhooks", c.createWebhook)
	g.GET("/webhooks/:id", c.webhookPage)
	g.GET("/webhooks/:id/edit", c.editWebhookPage)
	g.POST("/webhooks/:id/edit", c.updateWebhook)
	g.POST("/webhooks/:id/pause", c.setActive(false))
	g.POST("/webhooks/:id/resume", c.setActive(true))
	g.POST("/webhooks/:id/delete", c.deleteWebhook)
	g.POST("/webhooks/:id/secret/reveal", c.revealSecret)
	g.POST("/webhooks/:id/secret/rotate", c.rotateSecret)
	g.POST("/webhooks/:id/test", c.sendTestEvent)
	g.POST("/webhooks/:id/verify", c.verifyWebhook)
	g.POST("/webhooks/:id/recover", c.recoverWebhook)
	g.GET("/deliveries/:id", c.deliveryPage)
	g.POST("/deliveries/:id/retry", c.retryDelivery)
	g.GET("/events/:id", c.eventPage)
	g.POST("/events/:id/replay", c.replayEvent)
	g.GET("/search", c.searchPage)
	g.GET("/dlq", c.dlqPage)
	g.POST("/dlq/batches", c.createBatch)
	g.POST("/dlq/batches/:id/cancel", c.cancelBatch)
	if operator {
		g.POST("/webhooks/:id/circuit-breaker", c.overrideCircuit)
		g.GET("/audit", c.auditPage)
		g.GET("/api-keys", c.apiKeysPage)
		g.POST("/api-keys", c.createAPIKey)
		g.POST("/api-keys/:id/revoke", c.revokeAPIKey)
	}
}

// securityHeaders keeps the pages out of caches and frames, and allows
// nothing but the console's own stylesheet to load: the pages run no
// script at all.
func securityHeaders(c *gin.Context) {
	h := c.Writer.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cache-Control", "no-store")
	c.Next()
}

// publishLimited takes a token from the tenant's publish bucket for an
// action that creates a delivery (a test event, a retry, a replay), and
// reports whether the tenant is over its limit: then the page says so and
// nothing is created. When Redis does not answer the action goes ahead,
// as a publish does.
func (c *Console) publishLimited(ctx *gin.Context) bool {
	if c.limits == nil {
		return false
	}
	s := session(ctx)
	ok, _, err := c.limits.TakePublish(ctx.Request.Context(), c.now(), s.TenantID.String(), s.PublishLimit.RequestsPerSecond,
		s.PublishLimit.Burst)
	if err != nil {
		c.log.Warn("publish limit not checked", "error", err)
		return false
	}
	if !ok {
		metrics.RateLimitHits.WithLabelValues("publish").Inc()
	}
	return !ok
}

// overLimit is the message of an action refused by the publish limit.
const overLimit = "Your publish rate limit is used up for the moment (test events, retries and replays count against it). Try again in a few seconds."

// recordAudit writes the audit row of an action whose store call
// committed on its own, as the REST API does; the action has happened, so
// a failure to record it is logged, not shown.
func (c *Console) recordAudit(ctx *gin.Context, action, targetType, targetID string, details map[string]any) {
	if details == nil {
		details = map[string]any{}
	}
	details["via"] = via(ctx)
	s := session(ctx)
	if err := c.auditLog.Record(ctx.Request.Context(), s.TenantID, action, targetType, targetID, details); err != nil {
		c.log.Error("audit record failed", "action", action, "target_id", targetID, "error", err)
	}
}
