package console

import (
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"
	"github.com/google/uuid"

	"github.com/hookline/hookline/internal/audit"
	"github.com/hookline/hookline/internal/dlq"
	"github.com/hookline/hookline/internal/fielderr"
	"github.com/hookline/hookline/internal/history"
	"github.com/hookline/hookline/internal/webhook"
)

// dlqForm is the DLQ filter as typed; the page's filter form sends it as a
// query, the batch form as a post.
type dlqForm struct {
	Webhook    string
	EventType  string
	Categories []string
	From, To   string
	RPS        string
	Priority   string
}

func dlqFormFrom(values url.Values) dlqForm {
	f := dlqForm{Webhook: values.Get("webhook_id"), EventType: strings.TrimSpace(values.Get("event_type")),
		Categories: values["failure_category"], From: values.Get("from"), To: values.Get("to"),
		RPS: values.Get("requests_per_second"), Priority: values.Get("priority")}
	if f.RPS == "" {
		f.RPS = "10"
	}
	return f
}

// query is the form's filter as a URL query.
func (f dlqForm) query() url.Values {
	q := url.Values{}
	for k, v := range map[string]string{"webhook_id": f.Webhook, "event_type": f.EventType, "from": f.From, "to": f.To} {
		if v != "" {
			q.Set(k, v)
		}
	}
	for _, c := range f.Categories {
		q.Add("failure_category", c)
	}
	return q
}

// filter turns the form into the DLQ's own filter, validated by it.
func (f dlqForm) filter() (history.DeadLetterFilter, string) {
	var out history.DeadLetterFilter
	if f.Webhook != "" {
		id, err := uuid.Parse(f.Webhook)
		if err != nil {
			return out, "Webhook: not a webhook id."
		}
		out.WebhookIDs = []uuid.UUID{id}
	}
	if f.EventType != "" {
		out.EventTypes = []string{f.EventType}
	}
	out.FailureCategories = f.Categories
	var ok bool
	if out.From, ok = parseFormTime(f.From); !ok {
		return out, "From: enter a date and time (UTC)."
	}
	if out.To, ok = parseFormTime(f.To); !ok {
		return out, "To: enter a date and time (UTC)."
	}
	if err := out.Validate(""); err != nil {
		return out, err.Error()
	}
	return out, ""
}

type dlqData struct {
	base
	Form       dlqForm
	Hooks      []webhook.Webhook
	Categories []string
	Counts     history.DeadLetterCounts
	Entries    []history.DeadLetter
	Next       string
	Batches    []batchRow
}

// batchRow is a batch operation with what the page shows of it.
type batchRow struct {
	dlq.Batch
	// Describe says what the batch's filter selects.
	Describe string
	// Done (given a retry or skipped) out of Max, for the progress bar.
	Done, Max int
}

func newBatchRow(b dlq.Batch, urls map[uuid.UUID]string) batchRow {
	r := batchRow{Batch: b, Done: b.Processed + b.Skipped, Max: b.Total}
	if r.Max == 0 {
		r.Max = 1
		if b.Final() {
			r.Done = 1
		}
	}
	if rec := b.Recovery; rec != nil {
		hook := rec.WebhookID.String()
		if u, ok := urls[rec.WebhookID]; ok {
			hook = u
		}
		r.Describe = "recovery of webhook " + hook + ": " + strings.Join(rec.Include, " and ") +
			", events from " + formatUTC(&rec.From) + " to " + formatUTC(&rec.To)
		return r
	}
	var parts []string
	for _, id := range b.Filter.WebhookIDs {
		if u, ok := urls[id]; ok {
			parts = append(parts, "webhook "+u)
		} else {
			parts = append(parts, "webhook "+id.String())
		}
	}
	if len(b.Filter.EventTypes) > 0 {
		parts = append(parts, "event type "+strings.Join(b.Filter.EventTypes, ", "))
	}
	if len(b.Filter.FailureCategories) > 0 {
		parts = append(parts, "category "+strings.Join(b.Filter.FailureCategories, ", "))
	}
	if b.Filter.From != nil {
		parts = append(parts, "from "+formatUTC(b.Filter.From))
	}
	if b.Filter.To != nil {
		parts = append(parts, "to "+formatUTC(b.Filter.To))
	}
	r.Describe = strings.Join(parts, "; ")
	return r
}

// dlqPage shows the DLQ (counts by category and the entries waiting for an
// operator, filtered), a form to retry what the filter selects in a batch,
// and the batch operations, reloading itself while one runs.
func (c *Console) dlqPage(ctx *gin.Context) {
	c.dlqPageWith(ctx, dlqFormFrom(ctx.Request.URL.Query()), http.StatusOK, "")
}

// maxWebhookChoices bounds the webhook list of the filter form.
const maxWebhookChoices = 200

func (c *Console) dlqPageWith(ctx *gin.Context, form dlqForm, status int, errMsg string) {
	rctx := ctx.Request.Context()
	tenantID := session(ctx).TenantID
	d := dlqData{Form: form, Categories: history.FailureCategories}
	d.Title, d.Nav, d.Error = "Dead-letter queue", "dlq", errMsg
	d.noticeFrom(ctx)
	var err error
	if d.Hooks, err = c.webhooks.List(rctx, tenantID, webhook.ListFilter{Limit: maxWebhookChoices}); err != nil {
		c.fail(ctx, err)
		return
	}
	batches, err := c.dlq.Batches(rctx, tenantID, nil, 10)
	if err != nil {
		c.fail(ctx, err)
		return
	}
	urls := make(map[uuid.UUID]string, len(d.Hooks))
	for _, h := range d.Hooks {
		urls[h.ID] = h.URL
	}
	for _, b := range batches {
		d.Batches = append(d.Batches, newBatchRow(b, urls))
		if !b.Final() {
			d.Refresh = 2
		}
	}
	filter, msg := form.filter()
	if msg != "" {
		if d.Error == "" {
			d.Error, status = msg, http.StatusBadRequest
		}
		c.render(ctx, status, "dlq", &d)
		return
	}
	after, ok := c.cursor(ctx, "after")
	if !ok {
		return
	}
	q := history.DeadLetterQuery{Filter: filter, After: after, Limit: pageSize + 1}
	if d.Counts, err = c.deliveries.CountDeadLetters(rctx, tenantID, q); err != nil {
		c.fail(ctx, err)
		return
	}
	if d.Entries, err = c.deliveries.DeadLetters(rctx, tenantID, q); err != nil {
		c.fail(ctx, err)
		return
	}
	if len(d.Entries) > pageSize {
		d.Entries = d.Entries[:pageSize]
		nq := form.query()
		nq.Set("after", d.Entries[pageSize-1].ID.String())
		d.Next = root(ctx) + "/dlq?" + nq.Encode()
	}
	c.render(ctx, status, "dlq", &d)
}

// createBatch starts a batch retry of what the filter selects
// (dlq.Store.CreateBatch, as POST /v1/dlq/retry-batch does).
func (c *Console) createBatch(ctx *gin.Context) {
	form := dlqFormFrom(ctx.Request.PostForm)
	filter, msg := form.filter()
	if msg != "" {
		c.dlqPageWith(ctx, form, http.StatusBadRequest, msg)
		return
	}
	rps, err := strconv.Atoi(strings.TrimSpace(form.RPS))
	if err != nil {
		c.dlqPageWith(ctx, form, http.StatusBadRequest, "Rate: enter a whole number of retries per second.")
		return
	}
	req := dlq.BatchRequest{Filter: filter, Priority: form.Priority}
	req.RateLimit.RequestsPerSecond = rps
	b, err := c.dlq.CreateBatch(ctx.Request.Context(), session(ctx).TenantID, req)
	var fe *fielderr.Error
	switch {
	case errors.As(err, &fe):
		c.dlqPageWith(ctx, form, http.StatusBadRequest, "Not started: "+batchFieldLabel(fe.Field)+" "+fe.Message+".")
		return
	case err != nil:
		c.fail(ctx, err)
		return
	}
	c.recordAudit(ctx, audit.BatchRetryCreated, "batch_operation", b.ID.String(),
		map[string]any{"filter": filter, "requests_per_second": b.RequestsPerSecond})
	c.log.Info("batch retry created", "batch_operation_id", b.ID.String(), "tenant_id", session(ctx).TenantID.String(),
		"requests_per_second", b.RequestsPerSecond, "via", via(ctx))
	q := form.query()
	q.Set("notice", "batch_created")
	ctx.Redirect(http.StatusSeeOther, root(ctx)+"/dlq?"+q.Encode())
}

func batchFieldLabel(field string) string {
	switch {
	case field == "filter":
		return "the filter"
	case strings.HasPrefix(field, "rate_limit"):
		return "the rate"
	case field == "priority":
		return "the priority"
	}
	return field
}

// cancelBatch stops a pending or running batch (dlq.Store.CancelBatch).
func (c *Console) cancelBatch(ctx *gin.Context) {
	id, err := uuid.Parse(ctx.Param("id"))
	if err != nil {
		c.notFound(ctx)
		return
	}
	_, err = c.dlq.CancelBatch(ctx.Request.Context(), session(ctx).TenantID, id)
	switch {
	case errors.Is(err, dlq.ErrNotFound):
		c.notFound(ctx)
		return
	case errors.Is(err, dlq.ErrFinished):
		c.dlqPageWith(ctx, dlqForm{RPS: "10"}, http.StatusConflict, "Not cancelled: "+err.Error()+".")
		return
	case err != nil:
		c.fail(ctx, err)
		return
	}
	c.recordAudit(ctx, audit.BatchRetryCanceled, "batch_operation", id.String(), nil)
	c.log.Info("batch retry cancelled", "batch_operation_id", id.String(), "tenant_id", session(ctx).TenantID.String(), "via", via(ctx))
	ctx.Redirect(http.StatusSeeOther, root(ctx)+"/dlq?notice=batch_cancelled")
}
