package httpapi

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/hookline/hookline/internal/audit"
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
	w = s.verifyIfPending(c, w)
	s.recordAudit(c, audit.WebhookVerified, "webhook", id, verificationDetails(w))
	c.JSON(http.StatusOK, w)
}

// verificationDetails are the audit details of a verification of w: the
// state it reached.
func verificationDetails(w webhook.Webhook) map[string]any {
	if w.Verification == nil {
		return nil
	}
	return map[string]any{"state": w.Verification.State}
}

// verifyIfPending checks the endpoint of w when its verification is
// pending and returns the webhook as it then is (verify.Checker.Settle).
func (s *Server) verifyIfPending(c *gin.Context, w webhook.Webhook) webhook.Webhook {
	checker := verify.New(verify.Config{Policy: s.rules.Network, UserAgent: delivery.UserAgent})
	return checker.Settle(c.Request.Context(), s.webhooks, w, s.now(), logger(c))
}
