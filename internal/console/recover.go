package console

import (
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/hookline/hookline/internal/audit"
	"github.com/hookline/hookline/internal/dlq"
	"github.com/hookline/hookline/internal/fielderr"
	"github.com/hookline/hookline/internal/webhook"
)

// recoverForm is the recovery form of the webhook page as typed, and the
// counts of its last dry run ("Count").
type recoverForm struct {
	From, To, RPS  string
	Failed, Missed bool
	Counts         *recoveryCounts
}

// recoveryCounts are a dry run's counts as the page shows them.
type recoveryCounts struct {
	Failed, Missed, Total int
	HasFailed, HasMissed  bool
}

// defaultRecoverForm proposes the last day, both sets, 10 a second.
func (c *Console) defaultRecoverForm() recoverForm {
	from := c.now().UTC().Add(-24 * time.Hour).Format("2006-01-02T15:04")
	return recoverForm{From: from, RPS: "10", Failed: true, Missed: true}
}

func recoverFormFrom(v url.Values) recoverForm {
	return recoverForm{From: v.Get("from"), To: v.Get("to"), RPS: v.Get("requests_per_second"),
		Failed: slices.Contains(v["include"], dlq.IncludeFailed), Missed: slices.Contains(v["include"], dlq.IncludeMissed)}
}

// request checks the form; the message says what is wrong.
func (f recoverForm) request(dryRun bool) (dlq.RecoverRequest, string) {
	req := dlq.RecoverRequest{DryRun: dryRun}
	var ok bool
	if req.From, ok = parseFormTime(f.From); !ok || req.From == nil {
		return req, "From: enter a date and time (UTC)."
	}
	if req.To, ok = parseFormTime(f.To); !ok {
		return req, "To: enter a date and time (UTC), or leave it empty for now."
	}
	if f.Failed {
		req.Include = append(req.Include, dlq.IncludeFailed)
	}
	if f.Missed {
		req.Include = append(req.Include, dlq.IncludeMissed)
	}
	if len(req.Include) == 0 {
		return req, "Include failed deliveries, missed events, or both."
	}
	if !dryRun {
		rps, err := strconv.Atoi(strings.TrimSpace(f.RPS))
		if err != nil {
			return req, "Rate: enter a whole number of deliveries per second."
		}
		req.RateLimit.RequestsPerSecond = rps
	}
	return req, ""
}

// recoverWebhook counts (action "count") or starts a webhook's recovery
// with the store the REST API's POST /v1/webhooks/{id}/recover uses.
func (c *Console) recoverWebhook(ctx *gin.Context) {
	w, ok := c.loadWebhook(ctx)
	if !ok {
		return
	}
	form := recoverFormFrom(ctx.Request.PostForm)
	dryRun := ctx.PostForm("action") == "count"
	req, msg := form.request(dryRun)
	if msg != "" {
		c.renderWebhookPage(ctx, w, http.StatusBadRequest, msg, form)
		return
	}
	rctx, tenantID := ctx.Request.Context(), session(ctx).TenantID
	if dryRun {
		rec, err := c.dlq.CountRecovery(rctx, tenantID, w.ID, req)
		if err != nil {
			c.recoveryRefused(ctx, w, form, err)
			return
		}
		form.Counts = countsOf(rec)
		c.renderWebhookPage(ctx, w, http.StatusOK, "", form)
		return
	}
	b, err := c.dlq.Recover(rctx, tenantID, w.ID, req)
	if err != nil {
		c.recoveryRefused(ctx, w, form, err)
		return
	}
	c.recordAudit(ctx, audit.RecoveryCreated, "webhook", w.ID.String(), map[string]any{"batch_operation_id": b.ID,
		"from": b.Recovery.From, "to": b.Recovery.To, "include": b.Recovery.Include, "requests_per_second": b.RequestsPerSecond})
	c.log.Info("webhook recovery created", "batch_operation_id", b.ID.String(), "webhook_id", w.ID.String(),
		"tenant_id", tenantID.String(), "requests_per_second", b.RequestsPerSecond, "via", via(ctx))
	ctx.Redirect(http.StatusSeeOther, root(ctx)+"/dlq?notice=recovery_created#batch-"+b.ID.String())
}

// recoveryRefused shows why the store refused a recovery on the webhook
// page.
func (c *Console) recoveryRefused(ctx *gin.Context, w webhook.Webhook, form recoverForm, err error) {
	var fe *fielderr.Error
	switch {
	case errors.As(err, &fe):
		c.renderWebhookPage(ctx, w, http.StatusBadRequest, "Not started: "+recoverFieldLabel(fe.Field)+" "+fe.Message+".", form)
	case errors.Is(err, dlq.ErrInactive):
		c.renderWebhookPage(ctx, w, http.StatusConflict,
			"Not started: the webhook is disabled. Enable it first: what is recovered would only wait for it.", form)
	default:
		c.fail(ctx, err)
	}
}

func recoverFieldLabel(field string) string {
	switch {
	case strings.HasPrefix(field, "rate_limit"):
		return "the rate"
	case field == "from", field == "to":
		return "the window"
	}
	return field
}

func countsOf(r dlq.Recovery) *recoveryCounts {
	n := &recoveryCounts{}
	if r.Failed != nil {
		n.HasFailed, n.Failed = true, *r.Failed
	}
	if r.Missed != nil {
		n.HasMissed, n.Missed = true, *r.Missed
	}
	n.Total = n.Failed + n.Missed
	return n
}
