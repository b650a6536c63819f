package httpapi

import (
	"crypto/subtle"
	"net/http"

	"github.com/gin-gonic/gin"
	"github.com/google/uuid"
)

// adminOrTenant lets the admin token through as the admin, and otherwise
// authenticates a tenant API key as requireTenant does.
func (s *Server) adminOrTenant(c *gin.Context) {
	if token, ok := bearer(c); ok && subtle.ConstantTimeCompare([]byte(token), []byte(s.cfg.API.AdminToken)) == 1 {
		c.Set(adminKey, true)
		c.Next()
		return
	}
	s.requireTenant(c)
}

// stats answers GET /v1/stats: with a tenant's API key, that tenant's
// totals; with the admin token, every tenant's together.
func (s *Server) stats(c *gin.Context) {
	if c.GetBool(adminKey) {
		s.writeStats(c, nil)
		return
	}
	id := principal(c).TenantID
	s.writeStats(c, &id)
}

// tenantStats answers the admin's GET /v1/tenants/{id}/stats.
func (s *Server) tenantStats(c *gin.Context) {
	t, err := s.loadTenant(c)
	if err != nil {
		abort(c, err)
		return
	}
	s.writeStats(c, &t.ID)
}

func (s *Server) writeStats(c *gin.Context, tenantID *uuid.UUID) {
	st, err := s.deliveries.Stats(c.Request.Context(), tenantID, s.now())
	if err != nil {
		abort(c, err)
		return
	}
	c.JSON(http.StatusOK, st)
}
