package httpapi

import (
	"encoding/json"
	"io"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/hookline/hookline/internal/event"
	"github.com/hookline/hookline/internal/fielderr"
	"github.com/hookline/hookline/internal/metrics"
)

// maxBatchBytes bounds the body of POST /v1/events/batch.
const maxBatchBytes = 5 << 20

// batchItem is one event's answer in a batch: its event (202 accepted,
// 200 replayed) or its error.
type batchItem struct {
	Status int           `json:"status"`
	Event  *event.Result `json:"event,omitempty"`
	Error  *apiError     `json:"error,omitempty"`
}

// publishBatch accepts up to event.MaxBatch events in one request and
// answers 200 with one result per event, in order. The events it accepts
// are committed together; an event refused (invalid, a conflicting key,
// over the payload limit) is refused alone. The request as a whole is
// refused, storing nothing, when it is over maxBatchBytes or
// event.MaxBatch events (413), not a JSON object with an events array
// (400), or over the publish rate limit, which it takes one token of, as a
// request (429).
func (s *Server) publishBatch(c *gin.Context) {
	start := time.Now()
	defer func() { metrics.PublishDuration.Observe(time.Since(start).Seconds()) }()
	if c.GetHeader("Idempotency-Key") != "" {
		abort(c, fielderr.New("Idempotency-Key", "a batch has no key of its own: give each event its idempotency_key"))
		return
	}
	if s.refusedByPublishLimit(c) {
		metrics.PublishRequests.WithLabelValues("rate_limited").Inc()
		return
	}
	raws, err := readBatch(c)
	if err != nil {
		metrics.PublishRequests.WithLabelValues(publishOutcome(err)).Inc()
		abort(c, err)
		return
	}
	items := make([]batchItem, len(raws))
	reqs := make([]event.Request, 0, len(raws))
	at := make([]int, 0, len(raws))
	corr := c.GetHeader("X-Correlation-Id")
	for i, raw := range raws {
		r, err := s.parseBatchEvent(raw, corr)
		if err != nil {
			items[i] = s.batchError(c, err)
			continue
		}
		reqs, at = append(reqs, r), append(at, i)
	}
	results, err := s.events.PublishBatch(c.Request.Context(), principal(c).TenantID, reqs)
	if err != nil {
		metrics.PublishRequests.WithLabelValues("error").Add(float64(len(raws)))
		abort(c, err)
		return
	}
	for j, res := range results {
		i := at[j]
		switch {
		case res.Err != nil:
			items[i] = s.batchError(c, res.Err)
		case res.Result.Replayed:
			metrics.PublishRequests.WithLabelValues("replayed").Inc()
			items[i] = batchItem{Status: http.StatusOK, Event: &results[j].Result}
		default:
			metrics.PublishRequests.WithLabelValues("accepted").Inc()
			items[i] = batchItem{Status: http.StatusAccepted, Event: &results[j].Result}
		}
	}
	c.JSON(http.StatusOK, gin.H{"data": items})
}

// readBatch reads the events of a batch body, refusing it whole when it is
// over the size or count limit or not {"events": [...]}.
func readBatch(c *gin.Context) ([]json.RawMessage, error) {
	if c.Request.ContentLength > maxBatchBytes {
		return nil, errBatchTooLarge()
	}
	raw, err := io.ReadAll(http.MaxBytesReader(c.Writer, c.Request.Body, maxBatchBytes))
	if err != nil {
		if ae := clientError(jsonError(err)); ae != nil && ae.Status == http.StatusRequestEntityTooLarge {
			return nil, errBatchTooLarge()
		}
		return nil, jsonError(err)
	}
	var body map[string]json.RawMessage
	if err := json.Unmarshal(raw, &body); err != nil {
		return nil, jsonError(err)
	}
	if body == nil {
		return nil, newError(http.StatusBadRequest, "invalid_json", "request body must be a JSON object")
	}
	for k := range body {
		if k != "events" {
			return nil, fielderr.New(k, "unknown field")
		}
	}
	var events []json.RawMessage
	if err := json.Unmarshal(body["events"], &events); err != nil || len(events) == 0 {
		return nil, fielderr.New("events", "is required: an array of 1 to %d events, each the body of POST /v1/events", event.MaxBatch)
	}
	if len(events) > event.MaxBatch {
		return nil, newError(http.StatusRequestEntityTooLarge, "payload_too_large",
			"a batch holds at most %d events, this one %d", event.MaxBatch, len(events))
	}
	return events, nil
}

func errBatchTooLarge() *apiError {
	return newError(http.StatusRequestEntityTooLarge, "payload_too_large", "a batch request body exceeds the %d byte limit", maxBatchBytes)
}

// parseBatchEvent parses one event of a batch as POST /v1/events parses
// its body, within the same payload limit.
func (s *Server) parseBatchEvent(raw json.RawMessage, correlationID string) (event.Request, error) {
	if limit := s.cfg.API.MaxPayloadBytes; int64(len(raw)) > limit {
		return event.Request{}, newError(http.StatusRequestEntityTooLarge, "payload_too_large", "event exceeds the %d byte limit", limit)
	}
	return parsePublish(raw, "", correlationID)
}

// batchError is the answer of one event refused in a batch; an error of
// ours is logged and answered internal_error, for that event alone.
func (s *Server) batchError(c *gin.Context, err error) batchItem {
	metrics.PublishRequests.WithLabelValues(publishOutcome(err)).Inc()
	ae := clientError(mapEventErr(err))
	if ae == nil {
		logger(c).ErrorContext(c.Request.Context(), "batch event failed", "error", err)
		ae = errInternal
	}
	return batchItem{Status: ae.Status, Error: ae}
}
