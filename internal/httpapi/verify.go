package httpapi

import (
	"context"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/hookline/hookline/internal/delivery"
	"github.com/hookline/hookline/internal/verify"
	"github.com/hookline/hookline/internal/webhook"
)

// verifyWebhook answers POST /v1/webhooks/{id}/verify: it (re)starts the
// endpoint verification, checks the endpoint at once (at most
// verify.Timeout) and answers 200 with the webhook and the outcome in its
// verification. Until the endpoint has echoed a challenge the webhook
// receives nothing.
func (s *Server) verifyWebhook(c *gin.Context) {
	id, err := pathID(c, "id")
	if err != nil {
		abort(c, err)
		return
	}
	w, err := s.webhooks.StartVerification(c.Request.Context(), principal(c).TenantID, id)
	if err != nil {
		abort(c, mapWebhookErr(err))
		return
	}
	c.JSON(http.StatusOK, s.verifyIfPending(c, w))
}

// verifyIfPending checks the endpoint of w when its verification is
// pending, records the outcome and returns the webhook as it then is. A
// check or a record we could not finish (the caller went away, the
// database failed) leaves it pending, as it is stored, and is logged.
func (s *Server) verifyIfPending(c *gin.Context, w webhook.Webhook) webhook.Webhook {
	if w.Verification == nil || w.Verification.State != webhook.VerificationPending {
		return w
	}
	log := logger(c).With("webhook_id", w.ID.String())
	checker := verify.New(verify.Config{Policy: s.rules.Network, UserAgent: delivery.UserAgent})
	res, err := checker.Check(c.Request.Context(), w)
	if err != nil {
		log.Warn("webhook verification not finished; it stays pending", "error", err)
		return w
	}
	got, err := s.webhooks.FinishVerification(context.WithoutCancel(c.Request.Context()), w.TenantID, w.ID, w.URL,
		res.Problem, s.now())
	if err != nil {
		log.Error("webhook verification outcome not recorded; it stays pending", "error", err,
			"verified", res.Verified(), "problem", res.Problem)
		return w
	}
	log.Info("webhook verification", "verified", res.Verified(), "status_code", res.StatusCode,
		"duration_ms", res.Duration.Milliseconds(), "problem", res.Problem)
	return got
}
