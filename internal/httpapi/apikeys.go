package httpapi

import (
	"errors"
	"net/http"

	"github.com/gin-gonic/gin"
	"github.com/google/uuid"

	"github.com/hookline/hookline/internal/tenant"
)

// createdKey is the answer of POST /v1/api-keys, the only one carrying the
// key itself.
type createdKey struct {
	tenant.Key
	APIKey string `json:"api_key"`
}

// createAPIKey answers POST /v1/api-keys: 201 with the key, shown once.
func (s *Server) createAPIKey(c *gin.Context) { s.createKeyFor(c, principal(c).TenantID) }

// createTenantAPIKey answers the admin's POST /v1/tenants/{id}/api-keys,
// which gives a tenant that lost its keys a new one.
func (s *Server) createTenantAPIKey(c *gin.Context) {
	if id, ok := s.pathTenant(c); ok {
		s.createKeyFor(c, id)
	}
}

// pathTenant returns the tenant of the route's :id, answering 404 when
// there is none.
func (s *Server) pathTenant(c *gin.Context) (uuid.UUID, bool) {
	t, err := s.loadTenant(c)
	if err != nil {
		abort(c, err)
		return uuid.Nil, false
	}
	return t.ID, true
}

func (s *Server) createKeyFor(c *gin.Context, tenantID uuid.UUID) {
	var in tenant.KeyInput
	if err := decodeJSON(c, maxAdminBody, &in); err != nil {
		abort(c, err)
		return
	}
	k, err := tenant.BuildKey(in, s.now())
	if err != nil {
		abort(c, err)
		return
	}
	k, secret, err := s.tenants.CreateKey(c.Request.Context(), tenantID, k)
	if err != nil {
		abort(c, mapKeyErr(err))
		return
	}
	logger(c).Info("api key created", "tenant_id", tenantID.String(), "api_key_id", k.ID.String(), "prefix", k.Prefix)
	c.JSON(http.StatusCreated, createdKey{Key: k, APIKey: secret})
}

// listAPIKeys answers GET /v1/api-keys: the tenant's keys, oldest first,
// revoked and expired ones included, never the keys themselves.
func (s *Server) listAPIKeys(c *gin.Context) { s.listKeysOf(c, principal(c).TenantID) }

// listTenantAPIKeys answers the admin's GET /v1/tenants/{id}/api-keys.
func (s *Server) listTenantAPIKeys(c *gin.Context) {
	if id, ok := s.pathTenant(c); ok {
		s.listKeysOf(c, id)
	}
}

func (s *Server) listKeysOf(c *gin.Context, tenantID uuid.UUID) {
	p, err := parsePage(c)
	if err != nil {
		abort(c, err)
		return
	}
	keys, err := s.tenants.ListKeys(c.Request.Context(), tenantID, p.After, p.Limit+1)
	if err != nil {
		abort(c, err)
		return
	}
	c.JSON(http.StatusOK, listResponse(keys, p.Limit, func(k tenant.Key) uuid.UUID { return k.ID }))
}

// keyForgetter is the cache that must drop a revoked key at once.
type keyForgetter interface {
	Forget(keyID uuid.UUID)
}

// revokeAPIKey answers DELETE /v1/api-keys/{id}: 204; 409 for the last
// active key. The key is refused from the next request on: this process
// drops it from its authentication cache, and the database refuses it.
func (s *Server) revokeAPIKey(c *gin.Context) { s.revokeKeyOf(c, principal(c).TenantID, "id") }

// revokeTenantAPIKey answers the admin's DELETE
// /v1/tenants/{id}/api-keys/{key_id}, with the same rules.
func (s *Server) revokeTenantAPIKey(c *gin.Context) {
	if id, ok := s.pathTenant(c); ok {
		s.revokeKeyOf(c, id, "key_id")
	}
}

func (s *Server) revokeKeyOf(c *gin.Context, tenantID uuid.UUID, param string) {
	id, err := pathID(c, param)
	if err != nil {
		abort(c, err)
		return
	}
	if err := s.tenants.RevokeKey(c.Request.Context(), tenantID, id); err != nil {
		abort(c, mapKeyErr(err))
		return
	}
	if f, ok := s.auth.(keyForgetter); ok {
		f.Forget(id)
	}
	logger(c).Info("api key revoked", "tenant_id", tenantID.String(), "api_key_id", id.String())
	c.Status(http.StatusNoContent)
}

func mapKeyErr(err error) error {
	switch {
	case errors.Is(err, tenant.ErrKeyNotFound), errors.Is(err, tenant.ErrNotFound):
		return errNotFound
	case errors.Is(err, tenant.ErrLastKey):
		return newError(http.StatusConflict, "last_active_key", "%s", err.Error())
	case errors.Is(err, tenant.ErrTooManyKeys):
		return newError(http.StatusConflict, "too_many_api_keys", "a tenant may hold at most %d active API keys; revoke one first", tenant.MaxActiveKeys)
	}
	return err
}
