package console

import (
	"context"
	"errors"
	"net/http"

	"github.com/gin-gonic/gin"
	"github.com/google/uuid"

	"github.com/hookline/hookline/internal/audit"
	"github.com/hookline/hookline/internal/tenant"
)

type auditRow struct {
	audit.Entry
	// Actor names who acted, by kind: "API key name (prefix…)", "service
	// key name (prefix…)", a portal session and who opened it, "admin
	// token" or "hookline (automatic)".
	Actor string
	// Link is the console page of the target, if it has one.
	Link string
	// Facts are the details, flattened to key/value pairs.
	Facts []detail
}

type auditData struct {
	base
	Rows         []auditRow
	Newest, Next string
}

// maxKeysNamed bounds the keys listed to name the actors of a page.
const maxKeysNamed = 500

// auditPage lists the tenant's audit log, newest first, naming who acted
// and spelling out the details.
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
	names := actorNames{c: c, keys: make(map[uuid.UUID]string, len(keys)), serviceKeys: map[uuid.UUID]string{}}
	for _, k := range keys {
		names.keys[k.ID] = keyLabel(k.Name, k.Prefix)
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
		actor, err := names.name(rctx, e)
		if err != nil {
			c.fail(ctx, err)
			return
		}
		d.Rows = append(d.Rows, auditRow{Entry: e, Actor: actor, Link: targetLink(e.TargetType, e.TargetID),
			Facts: flattenDetails(e.Details)})
	}
	c.render(ctx, http.StatusOK, "audit", &d)
}

// actorNames names the actors of a page of the audit log. It looks each
// service key up once: a page is mostly the same few actors.
type actorNames struct {
	c *Console
	// keys and serviceKeys are "name (prefix…)" by key id.
	keys, serviceKeys map[uuid.UUID]string
}

func keyLabel(name, prefix string) string { return name + " (" + prefix + "…)" }

// name says who acted in e.
func (n actorNames) name(ctx context.Context, e audit.Entry) (string, error) {
	switch e.ActorType {
	case audit.ActorAPIKey:
		if e.ActorKeyID == nil {
			return "API key (unknown)", nil
		}
		if l, ok := n.keys[*e.ActorKeyID]; ok {
			return "API key " + l, nil
		}
		return "API key " + e.ActorKeyID.String(), nil
	case audit.ActorServiceKey:
		l, err := n.serviceKey(ctx, e.ActorServiceKeyID)
		return "service key " + l, err
	case audit.ActorPortal:
		if e.ActorServiceKeyID == nil {
			return "portal session (opened by the admin)", nil
		}
		l, err := n.serviceKey(ctx, e.ActorServiceKeyID)
		return "portal session (opened by service key " + l + ")", err
	case audit.ActorAdmin:
		return "admin token", nil
	case audit.ActorSystem:
		return "hookline (automatic)", nil
	}
	return e.ActorType, nil
}

// serviceKey is the label of service key id, or its id once it is gone.
func (n actorNames) serviceKey(ctx context.Context, id *uuid.UUID) (string, error) {
	if id == nil {
		return "(unknown)", nil
	}
	if l, ok := n.serviceKeys[*id]; ok {
		return l, nil
	}
	l := id.String()
	k, err := n.c.tenants.GetServiceKey(ctx, *id)
	switch {
	case err == nil:
		l = keyLabel(k.Name, k.Prefix)
	case !errors.Is(err, tenant.ErrKeyNotFound):
		return "", err
	}
	n.serviceKeys[*id] = l
	return l, nil
}

// targetLink is the console page of an audited object.
func targetLink(targetType, id string) string {
	if _, err := uuid.Parse(id); err != nil {
		return ""
	}
	switch targetType {
	case "delivery":
		return "/console/deliveries/" + id
	case "event":
		return "/console/events/" + id
	case "webhook":
		return "/console/webhooks/" + id
	case "api_key":
		return "/console/api-keys"
	case "batch_operation":
		return "/console/dlq#batch-" + id
	}
	return ""
}
