package console

import (
	"net/http"

	"github.com/gin-gonic/gin"
	"github.com/google/uuid"

	"github.com/hookline/hookline/internal/audit"
	"github.com/hookline/hookline/internal/tenant"
)

type auditRow struct {
	audit.Entry
	// Actor names the API key that acted: "name (prefix…)", or "admin".
	Actor string
	// Link is the console page of the target, if it has one.
	Link string
}

type auditData struct {
	base
	Rows         []auditRow
	Newest, Next string
}

// maxKeysNamed bounds the keys listed to name the actors of a page.
const maxKeysNamed = 500

// auditPage lists the tenant's audit log, newest first, with the name of
// the key behind each action.
func (c *Console) auditPage(ctx *gin.Context) {
	rctx := ctx.Request.Context()
	tenantID := session(ctx).TenantID
	before, ok := c.cursor(ctx, "before")
	if !ok {
		return
	}
	entries, err := c.auditLog.List(rctx, tenantID, before, pageSize+1)
	if err != nil {
		c.fail(ctx, err)
		return
	}
	keys, err := c.tenants.ListKeys(rctx, tenantID, nil, maxKeysNamed)
	if err != nil {
		c.fail(ctx, err)
		return
	}
	names := make(map[uuid.UUID]tenant.Key, len(keys))
	for _, k := range keys {
		names[k.ID] = k
	}
	d := auditData{}
	d.Title, d.Nav = "Audit log", "audit"
	if before != nil {
		d.Newest = "/console/audit"
	}
	if len(entries) > pageSize {
		entries = entries[:pageSize]
		d.Next = "/console/audit?before=" + entries[pageSize-1].ID.String()
	}
	for _, e := range entries {
		r := auditRow{Entry: e, Actor: "admin token", Link: targetLink(e.TargetType, e.TargetID)}
		if e.ActorKeyID != nil {
			r.Actor = "key " + e.ActorKeyID.String()
			if k, ok := names[*e.ActorKeyID]; ok {
				r.Actor = k.Name + " (" + k.Prefix + "…)"
			}
		}
		d.Rows = append(d.Rows, r)
	}
	c.render(ctx, http.StatusOK, "audit", &d)
}

// targetLink is the console page of an audited object.
func targetLink(targetType, id string) string {
	if _, err := uuid.Parse(id); err != nil {
		return ""
	}
	switch targetType {
	case "delivery":
		return "/console/deliveries/" + id
	case "webhook":
		return "/console/webhooks/" + id
	case "batch_operation":
		return "/console/dlq#batch-" + id
	}
	return ""
}
