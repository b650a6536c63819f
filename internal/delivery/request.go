package delivery

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/hookline/hookline/internal/signature"
	"github.com/hookline/hookline/internal/webhook"
	"github.com/hookline/hookline/internal/wire"
)

// Version is the product version sent in User-Agent.
const Version = "0.1.0"

// UserAgent identifies hookline to endpoints.
const UserAgent = "hookline/" + Version

// envelope is the body every endpoint receives.
type envelope struct {
	ID        string          `json:"id"`
	EventType string          `json:"event_type"`
	Timestamp string          `json:"timestamp"`
	Data      json.RawMessage `json:"data"`
	Source    string          `json:"source"`
}

// buildRequest makes the body and headers of attempt t.Attempt, signed with
// every active secret of the webhook at now.
func buildRequest(t wire.Task, j job, now time.Time) (body []byte, h http.Header, err error) {
	// Without HTML escaping, and RawMessage kept as stored, data reaches
	// the endpoint byte for byte as it was published.
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(envelope{
		ID:        t.EventID.String(),
		EventType: j.EventType,
		Timestamp: j.EventTime.UTC().Format(time.RFC3339Nano),
		Data:      j.Data,
		Source:    j.Source,
	}); err != nil {
		return nil, nil, fmt.Errorf("encode envelope: %w", err)
	}
	body = bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	keys := make([][]byte, 0, len(j.Secrets))
	for _, s := range j.Secrets {
		k, err := webhook.DecodeSecret(s)
		if err != nil {
			return nil, nil, fmt.Errorf("webhook secret: %w", err)
		}
		keys = append(keys, k)
	}
	ts := now.Unix()
	msgID := t.EventID.String()
	h = make(http.Header, 16+len(j.Headers))
	for k, v := range j.Headers {
		h.Set(k, v)
	}
	h.Set("Content-Type", "application/json")
	h.Set("X-Webhook-ID", t.WebhookID.String())
	h.Set("X-Webhook-Event", j.EventType)
	h.Set("X-Webhook-Delivery", t.DeliveryID.String())
	h.Set("X-Webhook-Attempt", strconv.Itoa(t.Attempt))
	h.Set("X-Webhook-Timestamp", strconv.FormatInt(ts, 10))
	h.Set("X-Idempotency-Key", j.IdemKey)
	h.Set("X-Correlation-Id", j.CorrelationID)
	h.Set("X-Webhook-Signature", signature.Legacy(ts, body, keys...))
	// The Standard Webhooks headers are lower-case in the specification;
	// HTTP header names are case-insensitive, Go canonicalises them.
	h.Set("Webhook-Id", msgID)
	h.Set("Webhook-Timestamp", strconv.FormatInt(ts, 10))
	h.Set("Webhook-Signature", signature.Standard(msgID, ts, body, keys...))
	return body, h, nil
}
