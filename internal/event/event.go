// Package event is the publish path: validation, idempotency, fan-out to
// the tenant's matching webhooks, the durable commit, and the hand-over to
// the outbox. The HTTP API and the in-process publisher package both call
// Service.Publish.
package event

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/hookline/hookline/internal/fielderr"
	"github.com/hookline/hookline/internal/notify"
	"github.com/hookline/hookline/internal/webhook"
)

// Priorities an event may have.
const (
	PriorityHigh   = "high"
	PriorityNormal = "normal"
	PriorityLow    = "low"
)

// Errors of the publish path besides *fielderr.Error.
var (
	// ErrIdempotencyConflict: the key was used before with a different body.
	ErrIdempotencyConflict = errors.New("idempotency key already used with a different request")
	// ErrNotFound: no such event for this tenant.
	ErrNotFound = errors.New("event not found")
)

const (
	maxSourceLen = 256
	maxKeyLen    = 255
	keyPrefix    = "idk_"
)

// Request is an event to publish.
type Request struct {
	EventType      string
	Data           json.RawMessage
	Source         string
	IdempotencyKey string
	Priority       string
	CorrelationID  string
	// OwnKey marks an IdempotencyKey that was not the producer's but made
	// for this publish by its caller (the RabbitMQ source's message id):
	// like a key Publish generates, it skips the Redis fast path, which
	// serves producers repeating their own keys.
	OwnKey bool
}

// Result answers a publish.
type Result struct {
	ID             uuid.UUID `json:"id"`
	IdempotencyKey string    `json:"idempotency_key"`
	EventType      string    `json:"event_type"`
	Priority       string    `json:"priority"`
	Deliveries     int       `json:"deliveries"`
	CreatedAt      time.Time `json:"created_at"`
	// ReplayOf names the original of an event made by Replay.
	ReplayOf *uuid.UUID `json:"replay_of,omitempty"`
	// Replayed is true when the key was seen before with the same request:
	// nothing new was created and this is the original event.
	Replayed bool `json:"-"`
}

// normalize validates r, fills the default priority and returns the hash
// that tells a replay from a conflict. An event published without a key
// gets its own (generatedKey) once its id is chosen.
func normalize(r *Request) ([]byte, error) {
	if r.EventType == "" {
		return nil, fielderr.New("event_type", "is required")
	}
	if err := webhook.ValidateEventType(r.EventType); err != nil {
		return nil, fielderr.New("event_type", "%s", err.Error())
	}
	if notify.Reserved(r.EventType) {
		return nil, fielderr.New("event_type", "%s* event types are reserved for owner notifications", notify.ReservedPrefix)
	}
	if len(r.Data) == 0 {
		return nil, fielderr.New("data", "is required: a JSON object")
	}
	if r.Data[0] != '{' {
		return nil, fielderr.New("data", "must be a JSON object")
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, r.Data); err != nil {
		return nil, fielderr.New("data", "is not valid JSON")
	}
	// Go's JSON scanner passes invalid UTF-8 inside strings; Postgres
	// refuses it, and would fail the whole group commit. \u0000 and lone
	// surrogate escapes are kept: the json column stores them as sent.
	if !utf8.Valid(compact.Bytes()) {
		return nil, fielderr.New("data", "must be valid UTF-8")
	}
	r.Data = compact.Bytes()
	if len(r.Source) > maxSourceLen {
		return nil, fielderr.New("source", "must be at most %d characters", maxSourceLen)
	}
	if err := fielderr.Text("source", r.Source); err != nil {
		return nil, err
	}
	switch r.Priority {
	case "":
		r.Priority = PriorityNormal
	case PriorityHigh, PriorityNormal, PriorityLow:
	default:
		return nil, fielderr.New("priority", "must be high, normal or low, got %q", r.Priority)
	}
	if r.IdempotencyKey != "" {
		if err := checkKey(r.IdempotencyKey); err != nil {
			return nil, err
		}
	}
	r.CorrelationID = strings.ReplaceAll(strings.ToValidUTF8(r.CorrelationID, ""), "\x00", "")
	for len(r.CorrelationID) > 128 {
		_, size := utf8.DecodeLastRuneInString(r.CorrelationID)
		r.CorrelationID = r.CorrelationID[:len(r.CorrelationID)-size]
	}
	h := sha256.New()
	for _, part := range []string{r.EventType, r.Source, r.Priority} {
		h.Write([]byte(part))
		h.Write([]byte{0})
	}
	h.Write(r.Data)
	return h.Sum(nil), nil
}

// generatedKey is the idempotency key of an event published without one:
// idk_ and the event's id. No other event can hold it, so the publish
// stores it in no idempotency key table (eventlog.KeysSQL); a producer
// repeating it is answered from the event itself (claimedID).
func generatedKey(id uuid.UUID) string { return keyPrefix + id.String() }

// claimedID is the id of the event whose generated key key would be: a
// producer's key of that form may repeat an event published without a
// key. It is only a claim: the event must also hold key, and belong to
// the publishing tenant.
func claimedID(key string) (uuid.UUID, bool) {
	rest, ok := strings.CutPrefix(key, keyPrefix)
	if !ok || len(rest) != 36 {
		return uuid.UUID{}, false
	}
	id, err := uuid.Parse(rest)
	return id, err == nil
}

func checkKey(k string) error {
	if len(k) > maxKeyLen {
		return fielderr.New("idempotency_key", "must be at most %d characters", maxKeyLen)
	}
	if strings.TrimSpace(k) != k {
		return fielderr.New("idempotency_key", "must not start or end with spaces")
	}
	for _, c := range k {
		if c < 0x21 || c > 0x7e {
			return fielderr.New("idempotency_key", "must be printable ASCII without spaces")
		}
	}
	return nil
}
