// Package wire holds what hookline's processes share about a delivery: the
// Task its message carries from the publishing side (the api's outbox, the
// dlq's batch retries, the wakers of parked deliveries) to the workers, the
// mark that says a delivery's message is confirmed on the queue, and the
// delivery statuses as the API and the database spell them.
package wire

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/hookline/hookline/internal/queue"
)

// Task is the message an enqueued delivery carries. Workers load the event
// and webhook it names from Postgres.
type Task struct {
	DeliveryID uuid.UUID `json:"delivery_id"`
	EventID    uuid.UUID `json:"event_id"`
	WebhookID  uuid.UUID `json:"webhook_id"`
	TenantID   uuid.UUID `json:"tenant_id"`
	Priority   string    `json:"priority"`
	// Attempt is the attempt number this message is for (1-based).
	Attempt int `json:"attempt"`
	// CreatedAt is the delivery's creation time (the attempt log's
	// partition key).
	CreatedAt time.Time `json:"created_at"`
	// CorrelationID follows the event from publish to every attempt.
	CorrelationID string `json:"correlation_id,omitempty"`
}

// Message encodes t for the queue, due at notBefore (zero: now), on its
// webhook's shard of the work queues.
func (t Task) Message(notBefore time.Time) queue.Message {
	body, _ := json.Marshal(t)
	return queue.Message{ID: t.DeliveryID.String(), Priority: t.Priority, ShardKey: t.WebhookID.String(), Body: body, NotBefore: notBefore}
}

// DecodeTask parses a message body.
func DecodeTask(body []byte) (Task, error) {
	var t Task
	if err := json.Unmarshal(body, &t); err != nil {
		return Task{}, fmt.Errorf("decode task: %w", err)
	}
	if t.DeliveryID == uuid.Nil || t.EventID == uuid.Nil || t.WebhookID == uuid.Nil || t.Attempt < 1 {
		return Task{}, fmt.Errorf("decode task: missing fields")
	}
	return t, nil
}
