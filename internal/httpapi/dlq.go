package httpapi

import (
	"errors"
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"
	"github.com/google/uuid"

	"github.com/hookline/hookline/internal/audit"
	"github.com/hookline/hookline/internal/dlq"
	"github.com/hookline/hookline/internal/event"
	"github.com/hookline/hookline/internal/fielderr"
	"github.com/hookline/hookline/internal/history"
)

// maxDLQBody bounds the bodies of DLQ and replay requests.
const maxDLQBody = 64 << 10

// deadLetterQuery reads the DLQ filter of a list or count request:
// repeatable (or comma-separated) webhook_id, event_type and
// failure_category, from and to, include_retried.
func deadLetterQuery(c *gin.Context) (history.DeadLetterQuery, error) {
	var q history.DeadLetterQuery
	for _, v := range queryList(c, "webhook_id") {
		id, err := uuid.Parse(v)
		if err != nil {
			return q, fielderr.New("webhook_id", "%q is not a webhook id", v)
		}
		q.Filter.WebhookIDs = append(q.Filter.WebhookIDs, id)
	}
	q.Filter.EventTypes = queryList(c, "event_type")
	q.Filter.FailureCategories = queryList(c, "failure_category")
	var err error
	if q.Filter.From, err = parseTimeQuery(c, "from"); err != nil {
		return q, err
	}
	if q.Filter.To, err = parseTimeQuery(c, "to"); err != nil {
		return q, err
	}
	if err := q.Filter.Validate(""); err != nil {
		return q, err
	}
	inc, err := parseBoolQuery(c, "include_retried")
	if err != nil {
		return q, err
	}
	q.IncludeRetried = inc != nil && *inc
	return q, nil
}

// queryList returns every value of a repeatable query parameter, each also
// split on commas.
func queryList(c *gin.Context, name string) []string {
	var out []string
	for _, v := range c.QueryArray(name) {
		for _, part := range strings.Split(v, ",") {
			if part = strings.TrimSpace(part); part != "" {
				out = append(out, part)
			}
		}
	}
	return out
}

// listDLQ pages through the tenant's exhausted deliveries, oldest first.
func (s *Server) listDLQ(c *gin.Context) {
	q, err := deadLetterQuery(c)
	if err != nil {
		abort(c, err)
		return
	}
	p, err := parsePage(c)
	if err != nil {
		abort(c, err)
		return
	}
	q.After, q.Limit = p.After, p.Limit+1
	list, err := s.deliveries.DeadLetters(c.Request.Context(), principal(c).TenantID, q)
	if err != nil {
		abort(c, err)
		return
	}
	c.JSON(http.StatusOK, listResponse(list, p.Limit, func(d history.DeadLetter) uuid.UUID { return d.ID }))
}

// countDLQ counts the tenant's exhausted deliveries by failure category.
func (s *Server) countDLQ(c *gin.Context) {
	q, err := deadLetterQuery(c)
	if err != nil {
		abort(c, err)
		return
	}
	counts, err := s.deliveries.CountDeadLetters(c.Request.Context(), principal(c).TenantID, q)
	if err != nil {
		abort(c, err)
		return
	}
	c.JSON(http.StatusOK, counts)
}

// decodeOptionalJSON is decodeJSON for bodies that may be left out.
func decodeOptionalJSON(c *gin.Context, dst any) error {
	if c.Request.ContentLength == 0 {
		return nil
	}
	return decodeJSON(c, maxDLQBody, dst)
}

// retryDelivery gives an exhausted delivery a new delivery: 202 with its id.
// An entry already resolved (a retry of it succeeded) answers 409
// already_resolved unless the body says "force": true.
func (s *Server) retryDelivery(c *gin.Context) {
	hookID, err := pathID(c, "id")
	if err != nil {
		abort(c, err)
		return
	}
	deliveryID, err := pathID(c, "delivery_id")
	if err != nil {
		abort(c, err)
		return
	}
	var in struct {
		Priority string `json:"priority"`
		Force    bool   `json:"force"`
	}
	if err := decodeOptionalJSON(c, &in); err != nil {
		abort(c, err)
		return
	}
	if s.refusedByPublishLimit(c) {
		return
	}
	id, err := s.dlq.RetryWith(c.Request.Context(), principal(c).TenantID, hookID, deliveryID,
		dlq.RetryOptions{Priority: in.Priority, Force: in.Force})
	if err != nil {
		abort(c, mapDLQErr(err))
		return
	}
	details := map[string]any{"retry_delivery_id": id}
	if in.Force {
		details["force"] = true
	}
	s.recordAudit(c, audit.DeliveryRetried, "delivery", deliveryID, details)
	logger(c).Info("delivery retried", "delivery_id", deliveryID.String(), "retry_delivery_id", id.String(),
		"tenant_id", principal(c).TenantID.String())
	c.JSON(http.StatusAccepted, gin.H{"delivery_id": id, "retry_of": deliveryID})
}

// createBatch starts a batch retry: 202 with the batch operation id.
func (s *Server) createBatch(c *gin.Context) {
	var in dlq.BatchRequest
	if err := decodeJSON(c, maxDLQBody, &in); err != nil {
		abort(c, err)
		return
	}
	b, err := s.dlq.CreateBatch(c.Request.Context(), principal(c).TenantID, in)
	if err != nil {
		abort(c, mapDLQErr(err))
		return
	}
	s.recordAudit(c, audit.BatchRetryCreated, "batch_operation", b.ID, map[string]any{"filter": in.Filter, "requests_per_second": b.RequestsPerSecond})
	logger(c).Info("batch retry created", "batch_operation_id", b.ID.String(), "tenant_id", principal(c).TenantID.String(),
		"requests_per_second", b.RequestsPerSecond)
	c.JSON(http.StatusAccepted, gin.H{"batch_operation_id": b.ID, "batch_operation": b})
}

func (s *Server) getBatch(c *gin.Context) {
	id, err := pathID(c, "id")
	if err != nil {
		abort(c, err)
		return
	}
	b, err := s.dlq.Batch(c.Request.Context(), principal(c).TenantID, id)
	if err != nil {
		abort(c, mapDLQErr(err))
		return
	}
	c.JSON(http.StatusOK, b)
}

// listBatches pages through the tenant's batch operations, newest first.
func (s *Server) listBatches(c *gin.Context) {
	p, err := parsePage(c)
	if err != nil {
		abort(c, err)
		return
	}
	list, err := s.dlq.Batches(c.Request.Context(), principal(c).TenantID, p.After, p.Limit+1)
	if err != nil {
		abort(c, err)
		return
	}
	c.JSON(http.StatusOK, listResponse(list, p.Limit, func(b dlq.Batch) uuid.UUID { return b.ID }))
}

func (s *Server) cancelBatch(c *gin.Context) {
	id, err := pathID(c, "id")
	if err != nil {
		abort(c, err)
		return
	}
	b, err := s.dlq.CancelBatch(c.Request.Context(), principal(c).TenantID, id)
	if err != nil {
		abort(c, mapDLQErr(err))
		return
	}
	s.recordAudit(c, audit.BatchRetryCanceled, "batch_operation", id, nil)
	logger(c).Info("batch retry cancelled", "batch_operation_id", id.String(), "tenant_id", principal(c).TenantID.String())
	c.JSON(http.StatusOK, b)
}

// replayEvent publishes an event again as a new event: 202 like a publish.
func (s *Server) replayEvent(c *gin.Context) {
	id, err := pathID(c, "id")
	if err != nil {
		abort(c, err)
		return
	}
	var in struct {
		WebhookID *string `json:"webhook_id"`
	}
	if err := decodeOptionalJSON(c, &in); err != nil {
		abort(c, err)
		return
	}
	var hook *uuid.UUID
	if in.WebhookID != nil {
		h, err := uuid.Parse(*in.WebhookID)
		if err != nil {
			abort(c, fielderr.New("webhook_id", "is not a webhook id"))
			return
		}
		hook = &h
	}
	if s.refusedByPublishLimit(c) {
		return
	}
	res, err := s.events.Replay(c.Request.Context(), principal(c).TenantID, id, hook)
	switch {
	case errors.Is(err, event.ErrPayloadPruned):
		abort(c, newError(http.StatusConflict, "payload_pruned", "%s", err.Error()))
		return
	case errors.Is(err, event.ErrWebhookNotFound):
		abort(c, fielderr.New("webhook_id", "no such webhook"))
		return
	case errors.Is(err, event.ErrWebhookInactive):
		abort(c, newError(http.StatusConflict, "webhook_inactive", "%s", err.Error()))
		return
	case errors.Is(err, event.ErrFilteredOut):
		abort(c, newError(http.StatusConflict, "filtered_out", "%s", err.Error()))
		return
	case err != nil:
		abort(c, mapEventErr(err))
		return
	}
	s.recordAudit(c, audit.EventReplayed, "event", id, map[string]any{"replay_event_id": res.ID, "webhook_id": hook})
	logger(c).Info("event replayed", "event_id", id.String(), "replay_event_id", res.ID.String(),
		"tenant_id", principal(c).TenantID.String(), "deliveries", res.Deliveries)
	c.JSON(http.StatusAccepted, res)
}

func mapDLQErr(err error) error {
	switch {
	case errors.Is(err, dlq.ErrNotFound):
		return errNotFound
	case errors.Is(err, dlq.ErrNotExhausted):
		return newError(http.StatusConflict, "not_exhausted", "%s", err.Error())
	case errors.Is(err, dlq.ErrRetryInFlight):
		return newError(http.StatusConflict, "retry_in_flight", "%s", err.Error())
	case errors.Is(err, dlq.ErrAlreadyResolved):
		return newError(http.StatusConflict, "already_resolved", "%s", err.Error())
	case errors.Is(err, dlq.ErrInactive):
		return newError(http.StatusConflict, "webhook_inactive", "%s", err.Error())
	case errors.Is(err, dlq.ErrPayloadPruned):
		return newError(http.StatusConflict, "payload_pruned", "%s", err.Error())
	case errors.Is(err, dlq.ErrFilteredOut):
		return newError(http.StatusConflict, "filtered_out", "%s", err.Error())
	case errors.Is(err, dlq.ErrFinished):
		return newError(http.StatusConflict, "batch_finished", "%s", err.Error())
	}
	return err
}
