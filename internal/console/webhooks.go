package console

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/google/uuid"

	"github.com/hookline/hookline/internal/history"
	"github.com/hookline/hookline/internal/webhook"
	"github.com/hookline/hookline/internal/wire"
)

// pageSize is how many rows a list page shows.
const pageSize = 50

// notices are the messages an action's redirect asks the next page to
// show (by code, so that no text is taken from the URL).
var notices = map[string]string{
	"reset":                "Circuit reset: it is closed and its window is cleared.",
	"force_open":           "Circuit forced open: no delivery is attempted until it is reset or the override ends.",
	"force_close":          "Circuit forced closed: deliveries go ahead whatever the error rate.",
	"retried":              "Retry created. This is the new delivery; the exhausted one is kept as it was.",
	"replayed":             "Event replayed as a new event. This is its delivery to the webhook.",
	"replayed_all":         "Event replayed as a new event to every webhook subscribed to it now.",
	"replayed_none":        "Event replayed as a new event, but no webhook is subscribed to it now: nothing will be delivered.",
	"batch_created":        "Batch retry created: a dlq process picks it up within a second or two.",
	"batch_cancelled":      "Batch retry cancelled. Retries it already made go on.",
	"recovery_created":     "Recovery created: a dlq process picks it up within a second or two; it is listed with the batch operations below.",
	"updated":              "Endpoint saved.",
	"headers_cleared":      "Endpoint saved. Its URL is on another origin, so the values of its custom headers were cleared: set them again through the API for the new address.",
	"paused":               "Endpoint paused: events published meanwhile make no delivery to it (a recovery can deliver them later).",
	"resumed":              "Endpoint resumed: new events are delivered to it again.",
	"deleted":              "Endpoint deleted. Its pending deliveries were cancelled; its history is kept.",
	"test_sent":            "Test event sent: its delivery is at the top of the list below.",
	"verified":             "Endpoint verified: it echoed the challenge, and deliveries go to it.",
	"verification_pending": "The endpoint could not be checked yet: it receives nothing until it echoes a challenge. Try Verify again.",
	"verification_failed":  "The endpoint did not echo the challenge: it receives nothing until it does. See what it answered above, fix it and Verify again.",
}

func (b *base) noticeFrom(ctx *gin.Context) {
	b.Notice = notices[ctx.Query("notice")]
}

type webhookRow struct {
	Hook    webhook.Webhook
	Circuit circuitView
	Summary *summary
}

type webhooksData struct {
	base
	Charts    []chartSet
	Rows      []webhookRow
	Exhausted []exhaustedHook
	// Total is the number of deliveries in Exhausted.
	Total int
	Next  string
}

// webhooksPage lists the tenant's webhooks with their circuit, last attempt
// and 24-hour success rate, under a banner naming the webhooks with
// deliveries exhausted in the last 24 hours.
func (c *Console) webhooksPage(ctx *gin.Context) {
	s := session(ctx)
	rctx := ctx.Request.Context()
	after, ok := c.cursor(ctx, "after")
	if !ok {
		return
	}
	hooks, err := c.webhooks.List(rctx, s.TenantID, webhook.ListFilter{After: after, Limit: pageSize + 1})
	if err != nil {
		c.fail(ctx, err)
		return
	}
	d := webhooksData{}
	d.Title, d.Nav = "Webhooks", "webhooks"
	d.noticeFrom(ctx)
	if len(hooks) > pageSize {
		hooks = hooks[:pageSize]
		d.Next = root(ctx) + "/webhooks?after=" + hooks[pageSize-1].ID.String()
	}
	ids := make([]uuid.UUID, len(hooks))
	for i, h := range hooks {
		ids[i] = h.ID
	}
	sums, err := c.summaries(rctx, s.TenantID, ids)
	if err != nil {
		c.fail(ctx, err)
		return
	}
	circuits, err := c.circuits(rctx, hooks)
	if err != nil {
		c.fail(ctx, err)
		return
	}
	for i, h := range hooks {
		d.Rows = append(d.Rows, webhookRow{Hook: h, Circuit: circuits[i], Summary: sums[h.ID]})
	}
	if d.Exhausted, err = c.recentlyExhausted(rctx, s.TenantID); err != nil {
		c.fail(ctx, err)
		return
	}
	for _, e := range d.Exhausted {
		d.Total += e.Count
	}
	if d.Charts, err = c.charts(rctx, s.TenantID, nil); err != nil {
		c.fail(ctx, err)
		return
	}
	c.render(ctx, http.StatusOK, "webhooks", &d)
}

// cursor reads an id query parameter; a malformed one is a 404 page.
func (c *Console) cursor(ctx *gin.Context, name string) (*uuid.UUID, bool) {
	v := ctx.Query(name)
	if v == "" {
		return nil, true
	}
	id, err := uuid.Parse(v)
	if err != nil {
		c.notFound(ctx)
		return nil, false
	}
	return &id, true
}

// loadWebhook returns the tenant's webhook named by the :id parameter, or
// answers 404.
func (c *Console) loadWebhook(ctx *gin.Context) (webhook.Webhook, bool) {
	id, err := uuid.Parse(ctx.Param("id"))
	if err != nil {
		c.notFound(ctx)
		return webhook.Webhook{}, false
	}
	w, err := c.webhooks.Get(ctx.Request.Context(), session(ctx).TenantID, id)
	if errors.Is(err, webhook.ErrNotFound) {
		c.notFound(ctx)
		return webhook.Webhook{}, false
	}
	if err != nil {
		c.fail(ctx, err)
		return webhook.Webhook{}, false
	}
	return w, true
}

// historyQuery is the filter form of the webhook page, as typed.
type historyQuery struct {
	State, EventType, From, To string
}

type webhookData struct {
	base
	Charts     []chartSet
	Hook       webhook.Webhook
	Circuit    circuitView
	Health     history.Health
	Query      historyQuery
	States     []wire.Status
	Deliveries []history.Delivery
	// Newest is set when this is not the first page; Next when there is
	// an older one.
	Newest, Next string
	// Recover is the recovery form.
	Recover recoverForm
}

func (c *Console) webhookPage(ctx *gin.Context) {
	w, ok := c.loadWebhook(ctx)
	if !ok {
		return
	}
	c.webhookPageWith(ctx, w, http.StatusOK, "")
}

// webhookPageWith renders the webhook page with status and, when not
// empty, an error message (the outcome of a failed action).
func (c *Console) webhookPageWith(ctx *gin.Context, w webhook.Webhook, status int, errMsg string) {
	c.renderWebhookPage(ctx, w, status, errMsg, c.defaultRecoverForm())
}

// renderWebhookPage is webhookPageWith with the recovery form as given.
func (c *Console) renderWebhookPage(ctx *gin.Context, w webhook.Webhook, status int, errMsg string, form recoverForm) {
	rctx := ctx.Request.Context()
	d := webhookData{Hook: w, States: wire.Statuses, Recover: form}
	d.Title, d.Nav, d.Error = "Webhook "+w.URL, "webhooks", errMsg
	d.noticeFrom(ctx)
	var err error
	if d.Circuit, err = c.circuit(rctx, w); err != nil {
		c.fail(ctx, err)
		return
	}
	if d.Health, err = c.deliveries.Health(rctx, w.ID, c.now()); err != nil {
		c.fail(ctx, err)
		return
	}
	if d.Charts, err = c.charts(rctx, session(ctx).TenantID, &w.ID); err != nil {
		c.fail(ctx, err)
		return
	}
	before, ok := c.cursor(ctx, "before")
	if !ok {
		return
	}
	d.Query = historyQuery{State: ctx.Query("state"), EventType: strings.TrimSpace(ctx.Query("event_type")),
		From: ctx.Query("from"), To: ctx.Query("to")}
	f, msg := parseHistoryQuery(d.Query)
	if msg != "" {
		d.Error, status = msg, http.StatusBadRequest
		c.render(ctx, status, "webhook", &d)
		return
	}
	f.Before, f.Limit = before, pageSize+1
	if d.Deliveries, err = c.history(rctx, session(ctx).TenantID, w.ID, f); err != nil {
		c.fail(ctx, err)
		return
	}
	base := root(ctx) + "/webhooks/" + w.ID.String()
	q := url.Values{}
	for k, v := range map[string]string{"state": d.Query.State, "event_type": d.Query.EventType, "from": d.Query.From, "to": d.Query.To} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if before != nil {
		d.Newest = base + "?" + q.Encode()
	}
	if len(d.Deliveries) > pageSize {
		d.Deliveries = d.Deliveries[:pageSize]
		q.Set("before", d.Deliveries[pageSize-1].ID.String())
		d.Next = base + "?" + q.Encode()
	}
	c.render(ctx, status, "webhook", &d)
}

// parseHistoryQuery checks the filter form; the message says what is wrong.
func parseHistoryQuery(q historyQuery) (historyFilter, string) {
	var f historyFilter
	if q.State != "" && !wire.Status(q.State).Valid() {
		return f, "Unknown state."
	}
	f.Status = q.State
	if q.EventType != "" {
		if err := webhook.ValidateEventType(q.EventType); err != nil {
			return f, "Event type: " + err.Error()
		}
		f.EventType = q.EventType
	}
	var ok bool
	if f.From, ok = parseFormTime(q.From); !ok {
		return f, "From: enter a date and time (UTC)."
	}
	if f.To, ok = parseFormTime(q.To); !ok {
		return f, "To: enter a date and time (UTC)."
	}
	if f.From != nil && f.To != nil && !f.From.Before(*f.To) {
		return f, "To must be after From."
	}
	return f, ""
}

// parseFormTime reads a datetime-local input (taken as UTC) or an RFC 3339
// time; empty is no time.
func parseFormTime(v string) (*time.Time, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return nil, true
	}
	for _, layout := range []string{"2006-01-02T15:04", "2006-01-02T15:04:05", time.RFC3339Nano} {
		if t, err := time.Parse(layout, v); err == nil {
			t = t.UTC()
			return &t, true
		}
	}
	return nil, false
}
