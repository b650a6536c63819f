package httpapi

import (
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/google/uuid"

	"github.com/hookline/hookline/internal/console"
	"github.com/hookline/hookline/internal/fielderr"
	"github.com/hookline/hookline/internal/tenant"
)

// listTenants answers the admin's GET /v1/tenants: tenants by id, in
// cursor pages; ?q= keeps the tenant of that id and those whose name
// contains it.
func (s *Server) listTenants(c *gin.Context) {
	p, err := parsePage(c)
	if err != nil {
		abort(c, err)
		return
	}
	q := strings.TrimSpace(c.Query("q"))
	if err := fielderr.Text("q", q); err != nil {
		abort(c, err)
		return
	}
	if len(q) > 200 {
		abort(c, fielderr.New("q", "must be at most 200 characters"))
		return
	}
	list, err := s.tenants.List(c.Request.Context(), q, p.After, p.Limit+1)
	if err != nil {
		abort(c, err)
		return
	}
	c.JSON(http.StatusOK, listResponse(list, p.Limit, func(t tenant.Tenant) uuid.UUID { return t.ID }))
}

// createdServiceKey is the answer of POST /v1/service-keys, the only one
// carrying the key itself.
type createdServiceKey struct {
	tenant.ServiceKey
	Secret string `json:"service_key"`
}

// createServiceKey answers the admin's POST /v1/service-keys: 201 with the
// key, shown once.
func (s *Server) createServiceKey(c *gin.Context) {
	var in tenant.ServiceKeyInput
	if err := decodeJSON(c, maxAdminBody, &in); err != nil {
		abort(c, err)
		return
	}
	k, err := tenant.BuildServiceKey(in, s.now())
	if err != nil {
		abort(c, err)
		return
	}
	k, secret, err := s.tenants.CreateServiceKey(c.Request.Context(), k)
	var unknown *tenant.UnknownTenantsError
	if errors.As(err, &unknown) {
		abort(c, fielderr.New("tenant_ids", "%s", unknown.Error()))
		return
	}
	if err != nil {
		abort(c, err)
		return
	}
	logger(c).Info("service key created", "service_key_id", k.ID.String(), "prefix", k.Prefix, "scopes", k.Scopes,
		"tenants", len(k.TenantIDs))
	c.JSON(http.StatusCreated, createdServiceKey{ServiceKey: k, Secret: secret})
}

// listServiceKeys answers the admin's GET /v1/service-keys: oldest first,
// revoked and expired ones included, never the keys themselves.
func (s *Server) listServiceKeys(c *gin.Context) {
	p, err := parsePage(c)
	if err != nil {
		abort(c, err)
		return
	}
	keys, err := s.tenants.ListServiceKeys(c.Request.Context(), p.After, p.Limit+1)
	if err != nil {
		abort(c, err)
		return
	}
	c.JSON(http.StatusOK, listResponse(keys, p.Limit, func(k tenant.ServiceKey) uuid.UUID { return k.ID }))
}

// getServiceKey answers the admin's GET /v1/service-keys/{id}.
func (s *Server) getServiceKey(c *gin.Context) {
	id, err := pathID(c, "id")
	if err != nil {
		abort(c, err)
		return
	}
	k, err := s.tenants.GetServiceKey(c.Request.Context(), id)
	if err != nil {
		abort(c, mapKeyErr(err))
		return
	}
	c.JSON(http.StatusOK, k)
}

// revokeServiceKey answers the admin's DELETE /v1/service-keys/{id}: 204,
// and the key is refused from the next request on (by this process at
// once, by others within api.auth_cache_ttl).
func (s *Server) revokeServiceKey(c *gin.Context) {
	id, err := pathID(c, "id")
	if err != nil {
		abort(c, err)
		return
	}
	if err := s.tenants.RevokeServiceKey(c.Request.Context(), id); err != nil {
		abort(c, mapKeyErr(err))
		return
	}
	if f, ok := s.auth.(keyForgetter); ok {
		f.Forget(id)
	}
	logger(c).Info("service key revoked", "service_key_id", id.String())
	c.Status(http.StatusNoContent)
}

// portalSession is the answer of POST /v1/tenants/{id}/portal-sessions.
type portalSession struct {
	URL       string    `json:"url"`
	ExpiresAt time.Time `json:"expires_at"`
}

// createPortalSession answers POST /v1/tenants/{id}/portal-sessions (the
// admin, or a service key with the manage scope acting for the tenant):
// 201 with a one-time link into the tenant's portal.
func (s *Server) createPortalSession(c *gin.Context) {
	if s.console == nil {
		abort(c, newError(http.StatusServiceUnavailable, "portal_unavailable", "this api serves no console, and so no portal"))
		return
	}
	id, err := pathID(c, "id")
	if err != nil {
		abort(c, err)
		return
	}
	var by *uuid.UUID
	if v, ok := c.Get(principalKey); ok {
		by = &v.(tenant.Principal).Service.ID
	}
	link, err := s.console.OpenPortalSession(c.Request.Context(), id, by)
	if errors.Is(err, tenant.ErrNotFound) {
		abort(c, errNotFound)
		return
	}
	if errors.Is(err, console.ErrPortalDisabled) {
		abort(c, newError(http.StatusConflict, "portal_disabled", "this tenant's portal is turned off: PATCH /v1/tenants/{id} with portal.enabled true first"))
		return
	}
	if err != nil {
		abort(c, err)
		return
	}
	logger(c).Info("portal session opened", "tenant_id", id.String(), "portal_session_id", link.SessionID.String())
	c.JSON(http.StatusCreated, portalSession{URL: s.publicURL(c) + link.Path, ExpiresAt: link.ExpiresAt})
}

// publicURL is where browsers reach this api: api.public_url, else the
// scheme and host of the request.
func (s *Server) publicURL(c *gin.Context) string {
	if u := strings.TrimSuffix(s.cfg.API.PublicURL, "/"); u != "" {
		return u
	}
	scheme := "http"
	if c.Request.TLS != nil || strings.EqualFold(c.GetHeader("X-Forwarded-Proto"), "https") {
		scheme = "https"
	}
	return scheme + "://" + c.Request.Host
}
