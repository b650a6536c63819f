package console

import (
	"errors"
	"net/http"

	"github.com/gin-gonic/gin"
	"github.com/google/uuid"

	"github.com/hookline/hookline/internal/audit"
	"github.com/hookline/hookline/internal/dlq"
	"github.com/hookline/hookline/internal/event"
	"github.com/hookline/hookline/internal/fielderr"
	"github.com/hookline/hookline/internal/history"
	"github.com/hookline/hookline/internal/webhook"
)

type deliveryData struct {
	base
	Delivery history.Detail
	// Hook is nil once the webhook was deleted.
	Hook  *webhook.Webhook
	Event event.Event
	// Payload is the event's data, indented; empty once retention removed
	// it.
	Payload string
	// Others are the event's other deliveries to the same webhook (its
	// retries, or the delivery it retries).
	Others []event.DeliverySummary
}

// loadDelivery returns the tenant's delivery named by the :id parameter, or
// answers 404.
func (c *Console) loadDelivery(ctx *gin.Context, id string) (history.Detail, bool) {
	did, err := uuid.Parse(id)
	if err != nil {
		c.notFound(ctx)
		return history.Detail{}, false
	}
	d, err := c.deliveries.Get(ctx.Request.Context(), session(ctx).TenantID, did)
	if errors.Is(err, history.ErrNotFound) {
		c.notFound(ctx)
		return history.Detail{}, false
	}
	if err != nil {
		c.fail(ctx, err)
		return history.Detail{}, false
	}
	return d, true
}

func (c *Console) deliveryPage(ctx *gin.Context) {
	d, ok := c.loadDelivery(ctx, ctx.Param("id"))
	if !ok {
		return
	}
	c.deliveryPageWith(ctx, d, http.StatusOK, "")
}

// deliveryPageWith renders a delivery with its event payload and attempts,
// with status and an optional error message (a refused action).
func (c *Console) deliveryPageWith(ctx *gin.Context, dl history.Detail, status int, errMsg string) {
	rctx := ctx.Request.Context()
	tenantID := session(ctx).TenantID
	d := deliveryData{Delivery: dl}
	d.Title, d.Nav, d.Error = "Delivery "+dl.ID.String(), "webhooks", errMsg
	d.noticeFrom(ctx)
	if !dl.Status.Terminal() {
		d.Refresh = 2
	}
	w, err := c.webhooks.Get(rctx, tenantID, dl.WebhookID)
	switch {
	case err == nil:
		d.Hook = &w
	case !errors.Is(err, webhook.ErrNotFound):
		c.fail(ctx, err)
		return
	}
	if d.Event, err = c.events.Get(rctx, tenantID, dl.EventID); err != nil {
		c.fail(ctx, err)
		return
	}
	d.Payload = indentJSON(d.Event.Data)
	for _, o := range d.Event.Deliveries {
		if o.WebhookID == dl.WebhookID && o.ID != dl.ID {
			d.Others = append(d.Others, o)
		}
	}
	c.render(ctx, status, "delivery", &d)
}

// retryDelivery gives an exhausted delivery a new delivery (dlq.Store.Retry,
// as POST /v1/webhooks/{id}/deliveries/{delivery_id}/retry does) and shows
// the new one.
func (c *Console) retryDelivery(ctx *gin.Context) {
	d, ok := c.loadDelivery(ctx, ctx.Param("id"))
	if !ok {
		return
	}
	if c.publishLimited(ctx) {
		c.deliveryPageWith(ctx, d, http.StatusTooManyRequests, overLimit)
		return
	}
	id, err := c.dlq.Retry(ctx.Request.Context(), session(ctx).TenantID, d.WebhookID, d.ID, ctx.PostForm("priority"))
	var fe *fielderr.Error
	switch {
	case errors.Is(err, dlq.ErrNotFound):
		c.notFound(ctx)
		return
	case errors.As(err, &fe):
		c.deliveryPageWith(ctx, d, http.StatusBadRequest, "Priority: "+fe.Message)
		return
	case errors.Is(err, dlq.ErrNotExhausted), errors.Is(err, dlq.ErrRetryInFlight), errors.Is(err, dlq.ErrInactive),
		errors.Is(err, dlq.ErrPayloadPruned), errors.Is(err, dlq.ErrAlreadyResolved), errors.Is(err, dlq.ErrFilteredOut):
		c.deliveryPageWith(ctx, d, http.StatusConflict, "Not retried: "+err.Error()+".")
		return
	case err != nil:
		c.fail(ctx, err)
		return
	}
	c.recordAudit(ctx, audit.DeliveryRetried, "delivery", d.ID.String(), map[string]any{"retry_delivery_id": id})
	c.log.Info("delivery retried", "delivery_id", d.ID.String(), "retry_delivery_id", id.String(),
		"tenant_id", session(ctx).TenantID.String(), "via", via(ctx))
	ctx.Redirect(http.StatusSeeOther, root(ctx)+"/deliveries/"+id.String()+"?notice=retried")
}

// replayEvent publishes an event again as a new event (event.Service.Replay,
// as POST /v1/events/{id}/replay does): to one webhook when the form names
// it, else to every webhook subscribed now.
func (c *Console) replayEvent(ctx *gin.Context) {
	tenantID := session(ctx).TenantID
	eventID, err := uuid.Parse(ctx.Param("id"))
	if err != nil {
		c.notFound(ctx)
		return
	}
	var hook *uuid.UUID
	if v := ctx.PostForm("webhook_id"); v != "" && ctx.PostForm("target") != "all" {
		h, err := uuid.Parse(v)
		if err != nil {
			c.notFound(ctx)
			return
		}
		hook = &h
	}
	if c.publishLimited(ctx) {
		c.replayRefused(ctx, http.StatusTooManyRequests, overLimit)
		return
	}
	res, err := c.events.Replay(ctx.Request.Context(), tenantID, eventID, hook)
	switch {
	case errors.Is(err, event.ErrNotFound), errors.Is(err, event.ErrWebhookNotFound):
		c.notFound(ctx)
		return
	case errors.Is(err, event.ErrPayloadPruned), errors.Is(err, event.ErrWebhookInactive), errors.Is(err, event.ErrFilteredOut):
		c.replayRefused(ctx, http.StatusConflict, "Not replayed: "+err.Error()+".")
		return
	case err != nil:
		c.fail(ctx, err)
		return
	}
	c.recordAudit(ctx, audit.EventReplayed, "event", eventID.String(), map[string]any{"replay_event_id": res.ID, "webhook_id": hook})
	c.log.Info("event replayed", "event_id", eventID.String(), "replay_event_id", res.ID.String(),
		"tenant_id", tenantID.String(), "deliveries", res.Deliveries, "via", via(ctx))
	back := root(ctx) + "/deliveries/" + ctx.PostForm("delivery_id")
	if _, err := uuid.Parse(ctx.PostForm("delivery_id")); err != nil {
		back = root(ctx) + "/webhooks"
	}
	switch {
	case res.Deliveries == 0:
		ctx.Redirect(http.StatusSeeOther, back+"?notice=replayed_none")
	case hook != nil:
		ev, err := c.events.Get(ctx.Request.Context(), tenantID, res.ID)
		if err != nil || len(ev.Deliveries) == 0 {
			ctx.Redirect(http.StatusSeeOther, back+"?notice=replayed_all")
			return
		}
		ctx.Redirect(http.StatusSeeOther, root(ctx)+"/deliveries/"+ev.Deliveries[0].ID.String()+"?notice=replayed")
	default:
		ctx.Redirect(http.StatusSeeOther, back+"?notice=replayed_all")
	}
}

// replayRefused shows a refused replay, with status, on the delivery page
// it came from.
func (c *Console) replayRefused(ctx *gin.Context, status int, msg string) {
	if _, err := uuid.Parse(ctx.PostForm("delivery_id")); err == nil {
		if d, ok := c.loadDelivery(ctx, ctx.PostForm("delivery_id")); ok {
			c.deliveryPageWith(ctx, d, status, msg)
		}
		return
	}
	c.renderError(ctx, status, msg)
}
