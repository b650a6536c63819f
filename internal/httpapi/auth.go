package httpapi

import (
	"crypto/subtle"
	"errors"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/hookline/hookline/internal/tenant"
)

const (
	principalKey = "principal"
	loggerKey    = "logger"
)

func bearer(c *gin.Context) (string, bool) {
	h := c.GetHeader("Authorization")
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

// requireTenant authenticates a tenant API key and stores its principal.
func (s *Server) requireTenant(c *gin.Context) {
	token, ok := bearer(c)
	if !ok {
		abort(c, errUnauthorized)
		return
	}
	p, err := s.auth.Authenticate(c.Request.Context(), token)
	if errors.Is(err, tenant.ErrUnauthorized) {
		abort(c, errUnauthorized)
		return
	}
	if err != nil {
		abort(c, err)
		return
	}
	c.Set(principalKey, p)
	c.Set(loggerKey, logger(c).With("tenant_id", p.TenantID.String()))
	c.Next()
}

func principal(c *gin.Context) tenant.Principal {
	return c.MustGet(principalKey).(tenant.Principal)
}
