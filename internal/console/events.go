package console

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/gin-gonic/gin"
	"github.com/google/uuid"

	"github.com/hookline/hookline/internal/event"
	"github.com/hookline/hookline/internal/webhook"
)

type eventData struct {
	base
	Event event.Event
	// Payload is the event's data, indented; empty once retention removed
	// it.
	Payload string
	Rows    []eventDelivery
}

// eventDelivery is a row of the event page: a delivery and the URL of its
// webhook ("" once the webhook was deleted).
type eventDelivery struct {
	event.DeliverySummary
	URL string
}

// eventPage shows an event and every delivery it made: one per webhook it
// fanned out to, and their retries.
func (c *Console) eventPage(ctx *gin.Context) {
	id, err := uuid.Parse(ctx.Param("id"))
	if err != nil {
		c.notFound(ctx)
		return
	}
	rctx := ctx.Request.Context()
	tenantID := session(ctx).TenantID
	ev, err := c.events.Get(rctx, tenantID, id)
	if errors.Is(err, event.ErrNotFound) {
		c.notFound(ctx)
		return
	}
	if err != nil {
		c.fail(ctx, err)
		return
	}
	d := eventData{Event: ev, Payload: indentJSON(ev.Data)}
	d.Title, d.Nav = "Event "+ev.ID.String(), "webhooks"
	ids := make([]uuid.UUID, 0, len(ev.Deliveries))
	for _, dl := range ev.Deliveries {
		ids = append(ids, dl.WebhookID)
	}
	urls, err := c.webhookURLs(rctx, tenantID, ids)
	if err != nil {
		c.fail(ctx, err)
		return
	}
	for _, dl := range ev.Deliveries {
		d.Rows = append(d.Rows, eventDelivery{DeliverySummary: dl, URL: urls[dl.WebhookID]})
	}
	c.render(ctx, http.StatusOK, "event", &d)
}

// indentJSON is raw indented for reading, as it is when it is not JSON,
// and "" when there is none.
func indentJSON(raw []byte) string {
	if len(raw) == 0 {
		return ""
	}
	var buf bytes.Buffer
	if json.Indent(&buf, raw, "", "  ") != nil {
		return string(raw)
	}
	return buf.String()
}

// maxWebhookLookups is how many webhooks webhookURLs looks up one by one;
// an event fanned out to more reads the tenant's whole list instead.
const maxWebhookLookups = 20

// webhookURLsPage is the page size of that list.
const webhookURLsPage = 500

// webhookURLs returns the URLs of the tenant's live webhooks among ids; a
// deleted one is absent.
func (c *Console) webhookURLs(ctx context.Context, tenantID uuid.UUID, ids []uuid.UUID) (map[uuid.UUID]string, error) {
	want := make(map[uuid.UUID]bool, len(ids))
	for _, id := range ids {
		want[id] = true
	}
	urls := make(map[uuid.UUID]string, len(want))
	if len(want) <= maxWebhookLookups {
		for id := range want {
			w, err := c.webhooks.Get(ctx, tenantID, id)
			switch {
			case err == nil:
				urls[id] = w.URL
			case !errors.Is(err, webhook.ErrNotFound):
				return nil, err
			}
		}
		return urls, nil
	}
	f := webhook.ListFilter{Limit: webhookURLsPage}
	for {
		hooks, err := c.webhooks.List(ctx, tenantID, f)
		if err != nil {
			return nil, err
		}
		for _, w := range hooks {
			if want[w.ID] {
				urls[w.ID] = w.URL
			}
		}
		if len(hooks) < webhookURLsPage {
			return urls, nil
		}
		last := hooks[len(hooks)-1].ID
		f.After = &last
	}
}
