package httpapi

import (
	"encoding/json"
	"errors"
	"io"
	"math"
	"net/http"
	"sort"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/google/uuid"

	"github.com/hookline/hookline/internal/event"
	"github.com/hookline/hookline/internal/fielderr"
	"github.com/hookline/hookline/internal/metrics"
)

// publishEvent accepts an event: 202 with its id and delivery count once it
// is committed, 200 with Idempotent-Replayed: true for a repeat of a known
// idempotency key with the same request.
func (s *Server) publishEvent(c *gin.Context) {
	start := time.Now()
	outcome := "error"
	defer func() {
		metrics.PublishRequests.WithLabelValues(outcome).Inc()
		metrics.PublishDuration.Observe(time.Since(start).Seconds())
	}()
	if s.refusedByPublishLimit(c) {
		outcome = "rate_limited"
		return
	}
	req, err := s.readPublish(c)
	if err != nil {
		outcome = publishOutcome(err)
		abort(c, err)
		return
	}
	res, err := s.events.Publish(c.Request.Context(), principal(c).TenantID, req)
	if err != nil {
		outcome = publishOutcome(err)
		abort(c, mapEventErr(err))
		return
	}
	if res.Replayed {
		outcome = "replayed"
		c.Header("Idempotent-Replayed", "true")
		c.JSON(http.StatusOK, res)
		return
	}
	outcome = "accepted"
	c.JSON(http.StatusAccepted, res)
}

// refusedByPublishLimit answers 429 with Retry-After and reports true when
// the tenant's publish bucket has no token. Publishing, replays and
// retries of exhausted deliveries all draw from it: each makes deliveries.
func (s *Server) refusedByPublishLimit(c *gin.Context) bool {
	wait, limited := s.publishLimited(c)
	if !limited {
		return false
	}
	metrics.RateLimitHits.WithLabelValues("publish").Inc()
	c.Header("Retry-After", strconv.Itoa(int(math.Ceil(wait.Seconds()))))
	abort(c, newError(http.StatusTooManyRequests, "rate_limited",
		"publish rate limit of %d per second exceeded; retry after %s", principal(c).PublishLimit.RequestsPerSecond, wait.Round(time.Millisecond)))
	return true
}

// publishLimited takes a token from the tenant's publish bucket. When Redis
// is unreachable publishing is not limited (fail open): for 5 s after a
// failure the bucket is not even asked, so an outage costs nothing.
func (s *Server) publishLimited(c *gin.Context) (time.Duration, bool) {
	if s.limits == nil || time.Now().UnixNano() < s.limitsDownUntil.Load() {
		return 0, false
	}
	p := principal(c)
	ok, wait, err := s.limits.TakePublish(c.Request.Context(), s.now(), p.TenantID.String(),
		p.PublishLimit.RequestsPerSecond, p.PublishLimit.Burst)
	if err != nil {
		s.limitsDownUntil.Store(time.Now().Add(5 * time.Second).UnixNano())
		return 0, false
	}
	return max(wait, time.Second), !ok
}

// publishFields are the keys a publish body may have.
var publishFields = map[string]bool{"event_type": true, "data": true, "source": true, "idempotency_key": true, "priority": true}

// readPublish reads and parses a publish body in one pass, refusing a body
// over the payload limit before reading it whole.
func (s *Server) readPublish(c *gin.Context) (event.Request, error) {
	limit := s.cfg.API.MaxPayloadBytes
	if c.Request.ContentLength > limit {
		return event.Request{}, errTooLarge(limit)
	}
	raw, err := io.ReadAll(http.MaxBytesReader(c.Writer, c.Request.Body, limit))
	if err != nil {
		return event.Request{}, jsonError(err)
	}
	return parsePublish(raw, c.GetHeader("Idempotency-Key"), c.GetHeader("X-Correlation-Id"))
}

// ParsePublish parses the body of a publish (that of POST /v1/events)
// with the Idempotency-Key header given with it (may be empty), refusing
// it as the route would: a body over limit bytes, malformed JSON, an
// unknown field, a field of the wrong type, a key that differs from the
// header's. The RabbitMQ source of publishes reads its messages with it.
func ParsePublish(raw []byte, limit int64, idempotencyKey string) (event.Request, error) {
	if int64(len(raw)) > limit {
		return event.Request{}, errTooLarge(limit)
	}
	return parsePublish(raw, idempotencyKey, "")
}

func parsePublish(raw []byte, idempotencyKey, correlationID string) (event.Request, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return event.Request{}, jsonError(err)
	}
	if fields == nil {
		return event.Request{}, newError(http.StatusBadRequest, "invalid_json", "request body must be a JSON object")
	}
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !publishFields[k] {
			return event.Request{}, fielderr.New(k, "unknown field")
		}
	}
	var r event.Request
	for name, dst := range map[string]*string{"event_type": &r.EventType, "source": &r.Source,
		"idempotency_key": &r.IdempotencyKey, "priority": &r.Priority} {
		if v, ok := fields[name]; ok && string(v) != "null" {
			// Checked raw: decoded, invalid UTF-8 and lone surrogates
			// would already be U+FFFD. data is event.Publish's to check.
			if err := fielderr.JSONText(name, v); err != nil {
				return event.Request{}, err
			}
			if err := json.Unmarshal(v, dst); err != nil {
				return event.Request{}, fielderr.New(name, "must be a string")
			}
		}
	}
	if v, ok := fields["data"]; ok && string(v) != "null" {
		r.Data = v
	}
	if h := idempotencyKey; h != "" {
		if r.IdempotencyKey != "" && r.IdempotencyKey != h {
			return event.Request{}, fielderr.New("idempotency_key", "differs from the Idempotency-Key header; send one or make them equal")
		}
		r.IdempotencyKey = h
	}
	r.CorrelationID = correlationID
	return r, nil
}

func errTooLarge(limit int64) *apiError {
	return newError(http.StatusRequestEntityTooLarge, "payload_too_large", "request body exceeds the %d byte limit", limit)
}

func publishOutcome(err error) string {
	var ae *apiError
	var fe *fielderr.Error
	switch {
	case errors.Is(err, event.ErrIdempotencyConflict):
		return "conflict"
	case errors.As(err, &fe):
		return "invalid"
	case errors.As(err, &ae) && ae.Status == http.StatusRequestEntityTooLarge:
		return "too_large"
	case errors.As(err, &ae) && ae.Status < 500:
		return "invalid"
	}
	return "error"
}

func mapEventErr(err error) error {
	switch {
	case errors.Is(err, event.ErrIdempotencyConflict):
		return newError(http.StatusUnprocessableEntity, "idempotency_conflict",
			"this idempotency key was already used with a different request")
	case errors.Is(err, event.ErrNotFound):
		return errNotFound
	}
	return err
}

func (s *Server) getEvent(c *gin.Context) {
	id, err := pathID(c, "id")
	if err != nil {
		abort(c, err)
		return
	}
	e, err := s.events.Get(c.Request.Context(), principal(c).TenantID, id)
	if err != nil {
		abort(c, mapEventErr(err))
		return
	}
	c.JSON(http.StatusOK, e)
}

// findEvents lists the tenant's events, newest first, filtered by
// event_type and created time (from inclusive, to exclusive); with
// idempotency_key it looks that one event up instead, and the answer is a
// list of zero or one events with their payloads and deliveries.
func (s *Server) findEvents(c *gin.Context) {
	if key, ok := c.GetQuery("idempotency_key"); ok {
		s.findEventByKey(c, key)
		return
	}
	p, err := parsePage(c)
	if err != nil {
		abort(c, err)
		return
	}
	f := event.ListFilter{Before: p.After, Limit: p.Limit + 1}
	if f.EventType, f.From, f.To, err = typeAndTimes(c); err != nil {
		abort(c, err)
		return
	}
	if f.From != nil && f.To != nil && !f.From.Before(*f.To) {
		abort(c, fielderr.New("to", "must be after from"))
		return
	}
	list, err := s.events.List(c.Request.Context(), principal(c).TenantID, f)
	if err != nil {
		abort(c, err)
		return
	}
	c.JSON(http.StatusOK, listResponse(list, p.Limit, func(e event.Summary) uuid.UUID { return e.ID }))
}

// findEventByKey answers GET /v1/events?idempotency_key=, which takes no
// other filter.
func (s *Server) findEventByKey(c *gin.Context, key string) {
	for _, q := range []string{"event_type", "from", "to", "cursor", "limit"} {
		if _, ok := c.GetQuery(q); ok {
			abort(c, fielderr.New(q, "cannot be combined with idempotency_key, which names one event"))
			return
		}
	}
	if key == "" {
		abort(c, fielderr.New("idempotency_key", "is required: GET /v1/events?idempotency_key=..."))
		return
	}
	e, err := s.events.GetByKey(c.Request.Context(), principal(c).TenantID, key)
	switch {
	case errors.Is(err, event.ErrNotFound):
		c.JSON(http.StatusOK, gin.H{"data": []event.Event{}, "next_cursor": ""})
	case err != nil:
		abort(c, err)
	default:
		c.JSON(http.StatusOK, gin.H{"data": []event.Event{e}, "next_cursor": ""})
	}
}
