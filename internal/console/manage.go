package console

import (
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/hookline/hookline/internal/audit"
	"github.com/hookline/hookline/internal/event"
	"github.com/hookline/hookline/internal/fielderr"
	"github.com/hookline/hookline/internal/metrics"
	"github.com/hookline/hookline/internal/webhook"
)

// Managing endpoints from the console and the portal: create, edit, pause
// and resume, delete, reveal and rotate the secret, send a test event. Each
// action calls the store the REST API calls, with the same validation
// (webhook.Rules), and writes the same audit rows.

// actionSecretRevealed is the audit action of showing a webhook's secret
// again.
const actionSecretRevealed = "webhook.secret_revealed"

// webhookForm is the create and edit form, as typed.
type webhookForm struct {
	URL, Events, Filter string
}

type webhookFormData struct {
	base
	// Hook is the webhook edited; nil when creating one.
	Hook *webhook.Webhook
	Form webhookForm
}

type secretData struct {
	base
	Hook   webhook.Webhook
	Secret string
	// Created, Rotated say why the secret is shown; PreviousUntil is how
	// long the previous secret still signs after a rotation.
	Created, Rotated bool
	PreviousUntil    *time.Time
}

// newWebhookPage shows the empty create form.
func (c *Console) newWebhookPage(ctx *gin.Context) {
	d := webhookFormData{Form: webhookForm{Events: "*"}}
	d.Title, d.Nav = "Add an endpoint", "webhooks"
	c.render(ctx, http.StatusOK, "webhookform", &d)
}

// editWebhookPage shows the edit form of a webhook.
func (c *Console) editWebhookPage(ctx *gin.Context) {
	w, ok := c.loadWebhook(ctx)
	if !ok {
		return
	}
	d := webhookFormData{Hook: &w, Form: webhookForm{URL: w.URL, Events: strings.Join(w.Events, ", "), Filter: w.Filter}}
	d.Title, d.Nav = "Edit "+w.URL, "webhooks"
	c.render(ctx, http.StatusOK, "webhookform", &d)
}

// formInput reads the create and edit form into the API's input.
func formInput(ctx *gin.Context) (webhookForm, webhook.Input) {
	f := webhookForm{URL: strings.TrimSpace(ctx.PostForm("url")), Events: ctx.PostForm("events"),
		Filter: strings.TrimSpace(ctx.PostForm("filter"))}
	events := strings.FieldsFunc(f.Events, func(r rune) bool { return r == ',' || r == ' ' || r == '\n' || r == '\r' || r == '\t' })
	return f, webhook.Input{URL: &f.URL, Events: events, Filter: &f.Filter}
}

// formError says what is wrong with the form, or "" when err is not the
// input's fault.
func formError(err error) string {
	var fe *fielderr.Error
	switch {
	case errors.As(err, &fe):
		return fe.Error()
	case errors.Is(err, webhook.ErrTooMany):
		return err.Error()
	}
	return ""
}

// createWebhook registers an endpoint and shows its secret, this once.
func (c *Console) createWebhook(ctx *gin.Context) {
	form, in := formInput(ctx)
	w, err := c.rules.Build(ctx.Request.Context(), webhook.Webhook{TenantID: session(ctx).TenantID}, in, true)
	if err == nil {
		w, err = c.webhooks.Create(ctx.Request.Context(), w)
	}
	if msg := formError(err); msg != "" {
		d := webhookFormData{Form: form}
		d.Title, d.Nav, d.Error = "Add an endpoint", "webhooks", msg
		c.render(ctx, http.StatusBadRequest, "webhookform", &d)
		return
	}
	if err != nil {
		c.fail(ctx, err)
		return
	}
	c.log.Info("webhook created", "tenant_id", w.TenantID.String(), "webhook_id", w.ID.String(), "via", via(ctx))
	d := newSecretData("Endpoint added", w, nil)
	d.Created = true
	c.render(ctx, http.StatusCreated, "secret", d)
}

// updateWebhook changes a webhook's URL, event types and filter.
func (c *Console) updateWebhook(ctx *gin.Context) {
	current, ok := c.loadWebhook(ctx)
	if !ok {
		return
	}
	form, in := formInput(ctx)
	w, err := c.change(ctx, current, in)
	if errors.Is(err, webhook.ErrNotFound) {
		c.notFound(ctx)
		return
	}
	if msg := formError(err); msg != "" {
		d := webhookFormData{Hook: &current, Form: form}
		d.Title, d.Nav, d.Error = "Edit "+current.URL, "webhooks", msg
		c.render(ctx, http.StatusBadRequest, "webhookform", &d)
		return
	}
	if err != nil {
		c.fail(ctx, err)
		return
	}
	// A new URL of a verified endpoint is checked again, as the REST API
	// does after a change.
	cleared := len(w.ClearedHeaders) > 0
	w = c.checker.Settle(ctx.Request.Context(), c.webhooks, w, c.now(), c.log)
	done := "updated"
	if cleared {
		done = "headers_cleared"
	}
	ctx.Redirect(http.StatusSeeOther, root(ctx)+"/webhooks/"+w.ID.String()+"?notice="+verifyNotice(w, done))
}

// verifyWebhook (re)starts the endpoint verification of a webhook and
// checks the endpoint at once, as POST /v1/webhooks/{id}/verify does.
func (c *Console) verifyWebhook(ctx *gin.Context) {
	w, ok := c.loadWebhook(ctx)
	if !ok {
		return
	}
	w, err := c.webhooks.StartVerification(ctx.Request.Context(), session(ctx).TenantID, w.ID)
	if c.failed(ctx, err) {
		return
	}
	w = c.checker.Settle(ctx.Request.Context(), c.webhooks, w, c.now(), c.log)
	var details map[string]any
	if w.Verification != nil {
		details = map[string]any{"state": w.Verification.State}
	}
	c.recordAudit(ctx, audit.WebhookVerified, "webhook", w.ID.String(), details)
	ctx.Redirect(http.StatusSeeOther, root(ctx)+"/webhooks/"+w.ID.String()+"?notice="+verifyNotice(w, "verified"))
}

// verifyNotice is the notice after a change of w: done when its endpoint
// needs no verification or passed it, else what its state asks for.
func verifyNotice(w webhook.Webhook, done string) string {
	if w.Verification == nil || w.Verification.State == webhook.VerificationVerified {
		return done
	}
	return "verification_" + w.Verification.State
}

// change applies in to the webhook current, as PATCH /v1/webhooks/{id}
// does, and stores it.
func (c *Console) change(ctx *gin.Context, current webhook.Webhook, in webhook.Input) (webhook.Webhook, error) {
	w, err := c.rules.Build(ctx.Request.Context(), current, in, false)
	if err != nil {
		return webhook.Webhook{}, err
	}
	w.CreatedAt = current.CreatedAt
	return c.webhooks.Update(ctx.Request.Context(), w)
}

// setActive pauses or resumes a webhook.
func (c *Console) setActive(active bool) gin.HandlerFunc {
	return func(ctx *gin.Context) {
		current, ok := c.loadWebhook(ctx)
		if !ok {
			return
		}
		w, err := c.change(ctx, current, webhook.Input{Active: &active})
		if c.failed(ctx, err) {
			return
		}
		notice := "resumed"
		if !active {
			notice = "paused"
			if current.Active {
				metrics.WebhooksDisabled.WithLabelValues(webhook.DisabledManual).Inc()
			}
		}
		ctx.Redirect(http.StatusSeeOther, root(ctx)+"/webhooks/"+w.ID.String()+"?notice="+notice)
	}
}

// deleteWebhook deletes a webhook once the form confirms it: its pending
// deliveries are cancelled, its history kept.
func (c *Console) deleteWebhook(ctx *gin.Context) {
	w, ok := c.loadWebhook(ctx)
	if !ok {
		return
	}
	if ctx.PostForm("confirm") != w.URL {
		c.webhookPageWith(ctx, w, http.StatusBadRequest, "To delete this endpoint, type its URL exactly in the confirmation box.")
		return
	}
	err := c.webhooks.Delete(ctx.Request.Context(), session(ctx).TenantID, w.ID)
	if c.failed(ctx, err) {
		return
	}
	c.log.Info("webhook deleted", "tenant_id", w.TenantID.String(), "webhook_id", w.ID.String(), "via", via(ctx))
	ctx.Redirect(http.StatusSeeOther, root(ctx)+"/webhooks?notice=deleted")
}

// revealSecret shows a webhook's current secret, and audits that it was
// shown.
func (c *Console) revealSecret(ctx *gin.Context) {
	w, ok := c.loadWebhook(ctx)
	if !ok {
		return
	}
	c.recordAudit(ctx, actionSecretRevealed, "webhook", w.ID.String(), nil)
	c.render(ctx, http.StatusOK, "secret", newSecretData("Signing secret", w, nil))
}

// newSecretData is the secret page of w, titled; rotatedUntil is when the
// previous secret stops signing, after a rotation.
func newSecretData(title string, w webhook.Webhook, rotatedUntil *time.Time) *secretData {
	d := secretData{Hook: w, Secret: w.Secret, Rotated: rotatedUntil != nil, PreviousUntil: rotatedUntil}
	d.Title, d.Nav = title, "webhooks"
	return &d
}

// rotateSecret gives a webhook a new secret; the previous one keeps
// signing (beside it) for the configured grace period.
func (c *Console) rotateSecret(ctx *gin.Context) {
	w, ok := c.loadWebhook(ctx)
	if !ok {
		return
	}
	until := c.now().UTC().Add(c.cfg.SecretRotationGrace).Truncate(time.Microsecond)
	w, err := c.webhooks.RotateSecret(ctx.Request.Context(), session(ctx).TenantID, w.ID, webhook.NewSecret(), until)
	if c.failed(ctx, err) {
		return
	}
	c.render(ctx, http.StatusOK, "secret", newSecretData("Secret rotated", w, &until))
}

// sendTestEvent sends a hookline.test event to this webhook alone and
// shows the event.
func (c *Console) sendTestEvent(ctx *gin.Context) {
	w, ok := c.loadWebhook(ctx)
	if !ok {
		return
	}
	if c.publishLimited(ctx) {
		c.webhookPageWith(ctx, w, http.StatusTooManyRequests, overLimit)
		return
	}
	res, err := c.events.SendTest(ctx.Request.Context(), session(ctx).TenantID, w.ID)
	switch {
	case errors.Is(err, event.ErrWebhookNotFound):
		c.notFound(ctx)
		return
	case errors.Is(err, event.ErrWebhookInactive):
		c.webhookPageWith(ctx, w, http.StatusConflict, "This endpoint is paused: resume it to send a test event.")
		return
	case err != nil:
		c.fail(ctx, err)
		return
	}
	c.recordAudit(ctx, audit.WebhookTestSent, "webhook", w.ID.String(), map[string]any{"event_id": res.ID})
	c.log.Info("test event sent", "tenant_id", w.TenantID.String(), "webhook_id", w.ID.String(), "event_id", res.ID.String(),
		"via", via(ctx))
	ctx.Redirect(http.StatusSeeOther, root(ctx)+"/webhooks/"+w.ID.String()+"?notice=test_sent")
}

// failed answers err, when there is one, with the not-found page for a
// webhook that is gone (or another tenant's) and the error page otherwise,
// and reports whether it did.
func (c *Console) failed(ctx *gin.Context, err error) bool {
	switch {
	case err == nil:
		return false
	case errors.Is(err, webhook.ErrNotFound):
		c.notFound(ctx)
	default:
		c.fail(ctx, err)
	}
	return true
}

// via names where an action came from, for log lines.
func via(ctx *gin.Context) string {
	if session(ctx).Portal {
		return "portal"
	}
	return "console"
}
