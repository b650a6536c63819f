package httpapi

import (
	"errors"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/google/uuid"

	"github.com/hookline/hookline/internal/audit"
	"github.com/hookline/hookline/internal/event"
	"github.com/hookline/hookline/internal/fielderr"
	"github.com/hookline/hookline/internal/metrics"
	"github.com/hookline/hookline/internal/webhook"
)

const maxWebhookBody = 64 << 10

// withSecret is the webhook as answered by create and rotate, the only
// responses that carry the secret.
type withSecret struct {
	webhook.Webhook
	Secret                  string     `json:"secret"`
	PreviousSecretExpiresAt *time.Time `json:"previous_secret_expires_at,omitempty"`
}

func (s *Server) createWebhook(c *gin.Context) {
	var in webhook.Input
	if err := decodeJSON(c, maxWebhookBody, &in); err != nil {
		abort(c, err)
		return
	}
	base := webhook.Webhook{TenantID: principal(c).TenantID}
	w, err := s.rules.Build(c.Request.Context(), base, in, true)
	if err != nil {
		abort(c, err)
		return
	}
	if w, err = s.webhooks.Create(c.Request.Context(), w); err != nil {
		abort(c, mapWebhookErr(err))
		return
	}
	logger(c).Info("webhook created", "webhook_id", w.ID.String())
	w = s.verifyIfPending(c, w)
	c.JSON(http.StatusCreated, withSecret{Webhook: w, Secret: w.Secret})
}

func (s *Server) listWebhooks(c *gin.Context) {
	p, err := parsePage(c)
	if err != nil {
		abort(c, err)
		return
	}
	active, err := parseBoolQuery(c, "active")
	if err != nil {
		abort(c, err)
		return
	}
	f := webhook.ListFilter{After: p.After, Active: active, Limit: p.Limit + 1}
	if et := c.Query("event_type"); et != "" {
		if err := webhook.ValidateEventType(et); err != nil {
			abort(c, fielderr.New("event_type", "%s", err.Error()))
			return
		}
		f.EventType = &et
	}
	list, err := s.webhooks.List(c.Request.Context(), principal(c).TenantID, f)
	if err != nil {
		abort(c, err)
		return
	}
	c.JSON(http.StatusOK, listResponse(list, p.Limit, func(w webhook.Webhook) uuid.UUID { return w.ID }))
}

func (s *Server) getWebhook(c *gin.Context) {
	w, err := s.loadWebhook(c)
	if err != nil {
		abort(c, err)
		return
	}
	c.JSON(http.StatusOK, w)
}

// replaceWebhook (PUT) sets the whole definition: url and events are
// required and every field left out goes back to its default. The secret
// and id are kept.
func (s *Server) replaceWebhook(c *gin.Context) {
	s.updateWebhook(c, true)
}

// patchWebhook (PATCH) changes only the fields given; nested configurations
// are merged field by field.
func (s *Server) patchWebhook(c *gin.Context) {
	s.updateWebhook(c, false)
}

func (s *Server) updateWebhook(c *gin.Context, replace bool) {
	current, err := s.loadWebhook(c)
	if err != nil {
		abort(c, err)
		return
	}
	var in webhook.Input
	if err := decodeJSON(c, maxWebhookBody, &in); err != nil {
		abort(c, err)
		return
	}
	base := current
	if replace {
		if in.Secret != nil {
			abort(c, fielderr.New("secret", "cannot be changed by an update; use POST /v1/webhooks/{id}/secret/rotate"))
			return
		}
		// The url and verification are kept for comparison: a verified
		// webhook replaced with the same url stays verified.
		base = webhook.Webhook{ID: current.ID, TenantID: current.TenantID, Secret: current.Secret,
			URL: current.URL, Verification: current.Verification}
	}
	w, err := s.rules.Build(c.Request.Context(), base, in, replace)
	if err != nil {
		abort(c, err)
		return
	}
	w.CreatedAt = current.CreatedAt
	if w, err = s.webhooks.Update(c.Request.Context(), w); err != nil {
		abort(c, mapWebhookErr(err))
		return
	}
	if current.Active && !w.Active {
		metrics.WebhooksDisabled.WithLabelValues(webhook.DisabledManual).Inc()
		logger(c).Info("webhook disabled", "webhook_id", w.ID.String(), "disabled_reason", w.DisabledReason)
	}
	c.JSON(http.StatusOK, s.verifyIfPending(c, w))
}

func (s *Server) deleteWebhook(c *gin.Context) {
	id, err := pathID(c, "id")
	if err != nil {
		abort(c, err)
		return
	}
	if err := s.webhooks.Delete(c.Request.Context(), principal(c).TenantID, id); err != nil {
		abort(c, mapWebhookErr(err))
		return
	}
	logger(c).Info("webhook deleted", "webhook_id", id.String())
	c.Status(http.StatusNoContent)
}

type rotateInput struct {
	// Secret is the new secret; generated when absent.
	Secret *string `json:"secret"`
	// GracePeriodSeconds is how long the old secret keeps signing; the
	// configured default (24 h) when absent.
	GracePeriodSeconds *int64 `json:"grace_period_seconds"`
}

const maxGraceSeconds = 30 * 24 * 60 * 60

func (s *Server) rotateSecret(c *gin.Context) {
	id, err := pathID(c, "id")
	if err != nil {
		abort(c, err)
		return
	}
	var in rotateInput
	if c.Request.ContentLength != 0 {
		if err := decodeJSON(c, maxAdminBody, &in); err != nil {
			abort(c, err)
			return
		}
	}
	secret := webhook.NewSecret()
	if in.Secret != nil {
		if _, err := webhook.DecodeSecret(*in.Secret); err != nil {
			abort(c, fielderr.New("secret", "%s", err.Error()))
			return
		}
		secret = *in.Secret
	}
	grace := s.cfg.API.SecretRotationGrace.D()
	if in.GracePeriodSeconds != nil {
		if err := fielderr.InRange("grace_period_seconds", *in.GracePeriodSeconds, 0, maxGraceSeconds); err != nil {
			abort(c, err)
			return
		}
		grace = time.Duration(*in.GracePeriodSeconds) * time.Second
	}
	until := s.now().UTC().Add(grace).Truncate(time.Microsecond)
	w, err := s.webhooks.RotateSecret(c.Request.Context(), principal(c).TenantID, id, secret, until)
	if err != nil {
		abort(c, mapWebhookErr(err))
		return
	}
	logger(c).Info("webhook secret rotated", "webhook_id", id.String(), "grace_until", until)
	c.JSON(http.StatusOK, withSecret{Webhook: w, Secret: w.Secret, PreviousSecretExpiresAt: &until})
}

func (s *Server) loadWebhook(c *gin.Context) (webhook.Webhook, error) {
	id, err := pathID(c, "id")
	if err != nil {
		return webhook.Webhook{}, err
	}
	w, err := s.webhooks.Get(c.Request.Context(), principal(c).TenantID, id)
	return w, mapWebhookErr(err)
}

func mapWebhookErr(err error) error {
	switch {
	case errors.Is(err, webhook.ErrNotFound):
		return errNotFound
	case errors.Is(err, webhook.ErrTooMany):
		return newError(http.StatusConflict, "webhook_limit_reached", "%s; delete one first", err.Error())
	}
	return err
}

// sendTestEvent answers POST /v1/webhooks/{id}/test: 202 with a new event
// of type hookline.test delivered to this webhook alone, whatever its
// event types and filter; 409 when the webhook is paused. It counts
// against the tenant's publish limit like any event.
func (s *Server) sendTestEvent(c *gin.Context) {
	id, err := pathID(c, "id")
	if err != nil {
		abort(c, err)
		return
	}
	if s.refusedByPublishLimit(c) {
		return
	}
	res, err := s.events.SendTest(c.Request.Context(), principal(c).TenantID, id)
	switch {
	case errors.Is(err, event.ErrWebhookNotFound):
		abort(c, errNotFound)
		return
	case errors.Is(err, event.ErrWebhookInactive):
		abort(c, newError(http.StatusConflict, "webhook_inactive", "%s", err.Error()))
		return
	case err != nil:
		abort(c, err)
		return
	}
	s.recordAudit(c, audit.WebhookTestSent, "webhook", id, map[string]any{"event_id": res.ID})
	logger(c).Info("test event sent", "webhook_id", id.String(), "event_id", res.ID.String())
	c.JSON(http.StatusAccepted, res)
}
