// Package httpapi is the Gin REST API of hookline: routing, authentication,
// JSON errors and the handlers of every /v1 resource.
package httpapi

import (
	"context"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"slices"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/hookline/hookline/internal/audit"
	"github.com/hookline/hookline/internal/breaker"
	"github.com/hookline/hookline/internal/config"
	"github.com/hookline/hookline/internal/console"
	"github.com/hookline/hookline/internal/dlq"
	"github.com/hookline/hookline/internal/event"
	"github.com/hookline/hookline/internal/fielderr"
	"github.com/hookline/hookline/internal/health"
	"github.com/hookline/hookline/internal/history"
	"github.com/hookline/hookline/internal/metrics"
	"github.com/hookline/hookline/internal/netguard"
	"github.com/hookline/hookline/internal/ratelimit"
	"github.com/hookline/hookline/internal/tenant"
	"github.com/hookline/hookline/internal/tracing"
	"github.com/hookline/hookline/internal/webhook"
)

// Server holds what the handlers need.
type Server struct {
	cfg        config.Config
	log        *slog.Logger
	tenants    *tenant.Store
	auth       authenticator
	auditLog   *audit.Store
	webhooks   *webhook.Store
	events     *event.Service
	deliveries *history.Reader
	dlq        *dlq.Store
	breaker    *breaker.Breaker
	overrides  *breaker.Overrides
	limits     *ratelimit.Limiter
	// limitsDownUntil (unix nanoseconds) pauses publish limiting after a
	// Redis failure.
	limitsDownUntil atomic.Int64
	rules           webhook.Rules
	checks          health.Checks
	console         *console.Console
	tracer          tracing.Tracer
	now             func() time.Time
}

// Deps are the collaborators of the API.
type Deps struct {
	Config     config.Config
	Log        *slog.Logger
	Tenants    *tenant.Store
	Webhooks   *webhook.Store
	Events     *event.Service
	Deliveries *history.Reader
	// DLQ retries exhausted deliveries, alone or in batches.
	DLQ *dlq.Store
	// Breaker reads live circuits; Overrides keeps operator overrides;
	// Limits holds the publish token buckets.
	Breaker   *breaker.Breaker
	Overrides *breaker.Overrides
	Limits    *ratelimit.Limiter
	Checks    health.Checks
	// Console configures the operator console under /console; it is served
	// when Console.DB is set.
	Console console.Config
	// Tracer is set when tracing is on (Stack.WithTracer): requests then
	// continue the trace context they carry.
	Tracer tracing.Tracer
}

// New returns a Server; Handler builds its routes.
func New(d Deps) (*Server, error) {
	policy, err := netguard.NewPolicy(d.Config.Network.AllowPrivateNetworks, d.Config.Network.AllowCIDRs)
	if err != nil {
		return nil, err
	}
	s := &Server{
		cfg:        d.Config,
		log:        d.Log,
		tenants:    d.Tenants,
		auth:       d.Tenants,
		auditLog:   d.Tenants.AuditLog(),
		webhooks:   d.Webhooks,
		events:     d.Events,
		deliveries: d.Deliveries,
		dlq:        d.DLQ,
		breaker:    d.Breaker,
		overrides:  d.Overrides,
		limits:     d.Limits,
		checks:     d.Checks,
		tracer:     d.Tracer,
		now:        time.Now,
		rules: webhook.Rules{
			RequireHTTPS:     d.Config.API.RequireHTTPS,
			Network:          policy,
			Resolver:         net.DefaultResolver,
			DefaultRateLimit: webhook.RateLimit(d.Config.Defaults.WebhookRateLimit),
		},
	}
	if ttl := d.Config.API.AuthCacheTTL.D(); ttl > 0 {
		s.auth = tenant.NewCachedAuth(d.Tenants, ttl)
	}
	if d.Console.DB != nil {
		d.Console.SecretRotationGrace = d.Config.API.SecretRotationGrace.D()
		s.console = console.New(d.Console, console.Deps{Rules: s.rules, Limits: d.Limits, Log: d.Log, Tenants: d.Tenants, Auth: s.auth,
			Webhooks: d.Webhooks, Events: d.Events, Deliveries: d.Deliveries, DLQ: d.DLQ, Breaker: d.Breaker,
			Overrides: d.Overrides})
	}
	return s, nil
}

// authenticator checks tenant API keys and service keys.
type authenticator interface {
	Authenticate(ctx context.Context, key string) (tenant.Principal, error)
	AuthenticateService(ctx context.Context, key string, tenantID uuid.UUID) (tenant.Principal, error)
}

// Handler returns the HTTP handler with every route.
func (s *Server) Handler() http.Handler {
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.HandleMethodNotAllowed = true
	r.ContextWithFallback = true
	r.Use(s.recoverJSON, s.observe)
	if s.tracer.On() {
		r.Use(continueTrace)
	}
	r.NoRoute(func(c *gin.Context) { abort(c, errNotFound) })
	r.NoMethod(func(c *gin.Context) {
		abort(c, newError(http.StatusMethodNotAllowed, "method_not_allowed", "%s is not allowed on %s", c.Request.Method, c.Request.URL.Path))
	})

	r.GET("/healthz", gin.WrapH(health.LiveHandler()))
	r.GET("/readyz", gin.WrapH(health.ReadyHandler(s.checks)))
	r.GET("/metrics", gin.WrapH(promhttp.Handler()))
	r.GET("/openapi.json", serveOpenAPI)
	r.GET("/docs", serveReference)
	r.GET("/docs/:file", serveReferenceFile)

	// Admin routes: the admin token, or where named a service key acting
	// for the tenant :id.
	admin := func(auth gin.HandlerFunc, h gin.HandlerFunc) []gin.HandlerFunc {
		return []gin.HandlerFunc{auth, s.auditActor, h}
	}
	r.POST("/v1/tenants", admin(s.requireAdmin, s.createTenant)...)
	r.GET("/v1/tenants", admin(s.requireAdmin, s.listTenants)...)
	r.GET("/v1/tenants/:id", admin(s.requireAdmin, s.getTenant)...)
	r.PATCH("/v1/tenants/:id", admin(s.requireAdmin, s.updateTenant)...)
	r.GET("/v1/tenants/:id/stats", admin(s.adminOrService(tenant.ScopeRead), s.tenantStats)...)
	r.POST("/v1/tenants/:id/api-keys", admin(s.requireAdmin, s.createTenantAPIKey)...)
	r.GET("/v1/tenants/:id/api-keys", admin(s.requireAdmin, s.listTenantAPIKeys)...)
	r.DELETE("/v1/tenants/:id/api-keys/:key_id", admin(s.requireAdmin, s.revokeTenantAPIKey)...)
	r.POST("/v1/tenants/:id/portal-sessions", admin(s.adminOrService(tenant.ScopeManage, tenant.ScopeRead), s.createPortalSession)...)
	r.POST("/v1/service-keys", admin(s.requireAdmin, s.createServiceKey)...)
	r.GET("/v1/service-keys", admin(s.requireAdmin, s.listServiceKeys)...)
	r.GET("/v1/service-keys/:id", admin(s.requireAdmin, s.getServiceKey)...)
	r.DELETE("/v1/service-keys/:id", admin(s.requireAdmin, s.revokeServiceKey)...)
	r.GET("/v1/stats", s.adminOrTenant, s.stats)

	v1 := r.Group("/v1", s.requireTenant, s.auditActor, refuseUnstorableQuery)
	v1.POST("/api-keys", s.createAPIKey)
	v1.GET("/api-keys", s.listAPIKeys)
	v1.DELETE("/api-keys/:id", s.revokeAPIKey)
	v1.GET("/audit", s.listAudit)
	v1.POST("/webhooks", s.createWebhook)
	v1.GET("/webhooks", s.listWebhooks)
	v1.GET("/webhooks/:id", s.getWebhook)
	v1.PUT("/webhooks/:id", s.replaceWebhook)
	v1.PATCH("/webhooks/:id", s.patchWebhook)
	v1.DELETE("/webhooks/:id", s.deleteWebhook)
	v1.POST("/webhooks/:id/secret/rotate", s.rotateSecret)
	v1.POST("/webhooks/:id/verify", s.verifyWebhook)
	v1.POST("/webhooks/:id/test", s.sendTestEvent)
	v1.GET("/webhooks/:id/deliveries", s.listDeliveries)
	v1.GET("/webhooks/:id/health", s.webhookHealth)
	v1.PATCH("/webhooks/:id/circuit-breaker", s.overrideCircuit)
	v1.POST("/webhooks/:id/deliveries/:delivery_id/retry", s.retryDelivery)
	v1.POST("/webhooks/:id/recover", s.recoverWebhook)
	v1.GET("/deliveries/:id", s.getDelivery)
	v1.POST("/events", s.publishEvent)
	v1.POST("/events/batch", s.publishBatch)
	v1.GET("/events", s.findEvents)
	v1.GET("/events/:id", s.getEvent)
	v1.POST("/events/:id/replay", s.replayEvent)
	v1.GET("/dlq", s.listDLQ)
	v1.GET("/dlq/counts", s.countDLQ)
	v1.POST("/dlq/retry-batch", s.createBatch)
	v1.GET("/dlq/batch-operations", s.listBatches)
	v1.GET("/dlq/batch-operations/:id", s.getBatch)
	v1.POST("/dlq/batch-operations/:id/cancel", s.cancelBatch)
	if s.console != nil {
		s.console.Register(r.Group("/console"))
		s.console.RegisterPortal(r.Group("/portal"))
	}
	return r
}

// recoverJSON turns a panic into a logged 500 without leaking the stack.
func (s *Server) recoverJSON(c *gin.Context) {
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			s.log.Error("handler panicked", "method", c.Request.Method, "path", c.Request.URL.Path, "panic", v)
			abort(c, newError(http.StatusInternalServerError, "internal_error", "an internal error occurred; it has been logged"))
		}
	}()
	c.Next()
}

// refuseUnstorableQuery refuses a query parameter value that is not valid
// UTF-8 or holds NUL, naming the parameter: no route can use such a value,
// and one that reached a query would fail it with a 500.
func refuseUnstorableQuery(c *gin.Context) {
	query := c.Request.URL.Query()
	for _, name := range slices.Sorted(maps.Keys(query)) {
		for _, v := range query[name] {
			if err := fielderr.Text(name, v); err != nil {
				abort(c, err)
				return
			}
		}
	}
	c.Next()
}

// continueTrace makes the trace context a request carries (traceparent
// and tracestate headers) the parent of the spans its handler starts.
func continueTrace(c *gin.Context) {
	if p := tracing.ParentFromHeader(c.Request.Header); p.TraceParent != "" {
		c.Request = c.Request.WithContext(p.Context(c.Request.Context()))
	}
	c.Next()
}

// observe records request metrics and attaches a request logger.
func (s *Server) observe(c *gin.Context) {
	start := time.Now()
	c.Set(loggerKey, s.log)
	c.Next()
	route := c.FullPath()
	if route == "" {
		route = "unmatched"
	}
	metrics.ObserveHTTP(route, c.Request.Method, c.Writer.Status(), time.Since(start))
}
