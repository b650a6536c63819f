package httpapi

import (
	"errors"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/google/uuid"

	"github.com/hookline/hookline/internal/fielderr"
	"github.com/hookline/hookline/internal/history"
	"github.com/hookline/hookline/internal/webhook"
	"github.com/hookline/hookline/internal/wire"
)

// listDeliveries pages through a webhook's deliveries, oldest first, with
// optional status, event_type and created-time (from inclusive, to
// exclusive) filters.
func (s *Server) listDeliveries(c *gin.Context) {
	hookID, err := pathID(c, "id")
	if err != nil {
		abort(c, err)
		return
	}
	tenantID := principal(c).TenantID
	if _, err := s.webhooks.Get(c.Request.Context(), tenantID, hookID); err != nil {
		abort(c, mapWebhookErr(err))
		return
	}
	p, err := parsePage(c)
	if err != nil {
		abort(c, err)
		return
	}
	f := history.ListFilter{After: p.After, Limit: p.Limit + 1}
	if st := c.Query("status"); st != "" {
		if !wire.Status(st).Valid() {
			abort(c, fielderr.New("status", "must be pending, retrying, succeeded, exhausted or cancelled"))
			return
		}
		f.Status = &st
	}
	if f.EventType, f.From, f.To, err = typeAndTimes(c); err != nil {
		abort(c, err)
		return
	}
	list, err := s.deliveries.List(c.Request.Context(), tenantID, hookID, f)
	if err != nil {
		abort(c, err)
		return
	}
	c.JSON(http.StatusOK, listResponse(list, p.Limit, func(d history.Delivery) uuid.UUID { return d.ID }))
}

// getDelivery returns a delivery with every attempt.
func (s *Server) getDelivery(c *gin.Context) {
	id, err := pathID(c, "id")
	if err != nil {
		abort(c, err)
		return
	}
	d, err := s.deliveries.Get(c.Request.Context(), principal(c).TenantID, id)
	if errors.Is(err, history.ErrNotFound) {
		abort(c, errNotFound)
		return
	}
	if err != nil {
		abort(c, err)
		return
	}
	c.JSON(http.StatusOK, d)
}

// typeAndTimes reads the ?event_type=, ?from= and ?to= filters of a list.
func typeAndTimes(c *gin.Context) (eventType *string, from, to *time.Time, err error) {
	if et := c.Query("event_type"); et != "" {
		if err := webhook.ValidateEventType(et); err != nil {
			return nil, nil, nil, fielderr.New("event_type", "%s", err.Error())
		}
		eventType = &et
	}
	if from, err = parseTimeQuery(c, "from"); err != nil {
		return nil, nil, nil, err
	}
	if to, err = parseTimeQuery(c, "to"); err != nil {
		return nil, nil, nil, err
	}
	return eventType, from, to, nil
}

func parseTimeQuery(c *gin.Context, name string) (*time.Time, error) {
	v := c.Query(name)
	if v == "" {
		return nil, nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return nil, fielderr.New(name, "must be an RFC 3339 time such as 2026-01-02T15:04:05Z")
	}
	return &t, nil
}
