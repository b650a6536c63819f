package httpapi

import (
	"errors"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/hookline/hookline/internal/tenant"
)

const maxAdminBody = 64 << 10

// actionTenantUpdated is the audit action of PATCH /v1/tenants/{id}.
const actionTenantUpdated = "tenant.updated"

type createdTenant struct {
	tenant.Tenant
	APIKey string `json:"api_key"`
}

func (s *Server) createTenant(c *gin.Context) {
	var in tenant.Input
	if err := decodeJSON(c, maxAdminBody, &in); err != nil {
		abort(c, err)
		return
	}
	t, err := tenant.Build(tenant.WithDefaults(s.cfg.Defaults), in, true)
	if err != nil {
		abort(c, err)
		return
	}
	t, key, err := s.tenants.Create(c.Request.Context(), t)
	if err != nil {
		abort(c, err)
		return
	}
	logger(c).Info("tenant created", "tenant_id", t.ID.String())
	c.JSON(http.StatusCreated, createdTenant{Tenant: t, APIKey: key})
}

func (s *Server) getTenant(c *gin.Context) {
	t, err := s.loadTenant(c)
	if err != nil {
		abort(c, err)
		return
	}
	c.JSON(http.StatusOK, t)
}

// updateTenant changes a tenant's name or limits, and writes an audit row
// (in the tenant's own log, by the admin) with the values before and after.
func (s *Server) updateTenant(c *gin.Context) {
	before, err := s.loadTenant(c)
	if err != nil {
		abort(c, err)
		return
	}
	var in tenant.Input
	if err := decodeJSON(c, maxAdminBody, &in); err != nil {
		abort(c, err)
		return
	}
	t, err := tenant.Build(before, in, false)
	if err != nil {
		abort(c, err)
		return
	}
	if t, err = s.tenants.Update(c.Request.Context(), t); err != nil {
		abort(c, mapTenantErr(err))
		return
	}
	details := map[string]any{"before": tenantSettings(before), "after": tenantSettings(t)}
	if err := s.auditLog.Record(c.Request.Context(), t.ID, actionTenantUpdated, "tenant", t.ID.String(), details); err != nil {
		logger(c).Error("audit record failed", "action", actionTenantUpdated, "target_id", t.ID.String(), "error", err)
	}
	logger(c).Info("tenant updated", "tenant_id", t.ID.String())
	c.JSON(http.StatusOK, t)
}

// tenantSettings are the fields of t an update may change.
func tenantSettings(t tenant.Tenant) map[string]any {
	return map[string]any{"name": t.Name, "rate_limit": t.RateLimit, "publish_rate_limit": t.PublishRateLimit,
		"auto_disable": t.AutoDisable, "portal": t.Portal}
}

func (s *Server) loadTenant(c *gin.Context) (tenant.Tenant, error) {
	id, err := pathID(c, "id")
	if err != nil {
		return tenant.Tenant{}, err
	}
	t, err := s.tenants.Get(c.Request.Context(), id)
	return t, mapTenantErr(err)
}

func mapTenantErr(err error) error {
	if errors.Is(err, tenant.ErrNotFound) {
		return errNotFound
	}
	return err
}
