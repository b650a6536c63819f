package httpapi

import (
	"net/http"

	"github.com/gin-gonic/gin"
	"github.com/google/uuid"

	"github.com/hookline/hookline/internal/audit"
	"github.com/hookline/hookline/internal/tenant"
)

// auditActor puts who is calling into the request context, for the audit
// rows that stores write inside their transactions: the tenant's API key,
// the service key acting for the tenant, or the admin token; and the
// address of the peer that connected (not X-Forwarded-For, which a client
// can forge). It runs after the route's authentication.
func (s *Server) auditActor(c *gin.Context) {
	a := audit.Actor{Type: audit.ActorAdmin, RemoteAddr: c.RemoteIP()}
	if v, ok := c.Get(principalKey); ok {
		p := v.(tenant.Principal)
		if p.Service != nil {
			a.Type, a.ServiceKeyID = audit.ActorServiceKey, &p.Service.ID
		} else {
			a.Type, a.KeyID = audit.ActorAPIKey, &p.KeyID
		}
	}
	c.Request = c.Request.WithContext(audit.WithActor(c.Request.Context(), a))
	c.Next()
}

// recordAudit writes an audit row for an action whose store call committed
// on its own. The action has happened: a failure to record it is logged,
// not answered, so that the client does not repeat the action.
func (s *Server) recordAudit(c *gin.Context, action, targetType string, targetID uuid.UUID, details map[string]any) {
	err := s.auditLog.Record(c.Request.Context(), principal(c).TenantID, action, targetType, targetID.String(), details)
	if err != nil {
		logger(c).Error("audit record failed", "action", action, "target_id", targetID.String(), "error", err)
	}
}

// listAudit answers GET /v1/audit: the tenant's own audit rows, newest
// first.
func (s *Server) listAudit(c *gin.Context) {
	p, err := parsePage(c)
	if err != nil {
		abort(c, err)
		return
	}
	rows, err := s.auditLog.List(c.Request.Context(), principal(c).TenantID, p.After, p.Limit+1)
	if err != nil {
		abort(c, err)
		return
	}
	c.JSON(http.StatusOK, listResponse(rows, p.Limit, func(e audit.Entry) uuid.UUID { return e.ID }))
}
