package dlqcli

import (
	"net/url"
	"time"
)

// Filter selects dead-lettered deliveries. Empty fields select everything;
// values within a field are alternatives.
type Filter struct {
	WebhookIDs        []string   `json:"webhook_ids,omitempty"`
	EventTypes        []string   `json:"event_types,omitempty"`
	FailureCategories []string   `json:"failure_categories,omitempty"`
	From              *time.Time `json:"from,omitempty"`
	To                *time.Time `json:"to,omitempty"`
}

// Empty reports whether the filter selects the whole DLQ.
func (f Filter) Empty() bool {
	return len(f.WebhookIDs) == 0 && len(f.EventTypes) == 0 && len(f.FailureCategories) == 0 &&
		f.From == nil && f.To == nil
}

// query returns the filter as the query parameters of GET /v1/dlq.
func (f Filter) query() url.Values {
	q := url.Values{}
	for _, v := range f.WebhookIDs {
		q.Add("webhook_id", v)
	}
	for _, v := range f.EventTypes {
		q.Add("event_type", v)
	}
	for _, v := range f.FailureCategories {
		q.Add("failure_category", v)
	}
	if f.From != nil {
		q.Set("from", f.From.UTC().Format(time.RFC3339Nano))
	}
	if f.To != nil {
		q.Set("to", f.To.UTC().Format(time.RFC3339Nano))
	}
	return q
}

// Entry is one exhausted delivery in the DLQ.
type Entry struct {
	ID              string `json:"id"`
	EventID         string `json:"event_id"`
	WebhookID       string `json:"webhook_id"`
	EventType       string `json:"event_type"`
	FailureCategory string `json:"failure_category"`
	AttemptCount    int    `json:"attempt_count"`
	LastStatusCode  *int   `json:"last_status_code"`
	LastError       string `json:"last_error"`
	// CompletedAt is when the delivery was exhausted.
	CompletedAt *time.Time `json:"completed_at"`
}

// Page is one page of GET /v1/dlq; NextCursor is empty on the last page.
type Page struct {
	Data       []Entry `json:"data"`
	NextCursor string  `json:"next_cursor"`
}

// Counts are the sizes of the DLQ selected by a filter.
type Counts struct {
	Total      int64            `json:"total"`
	ByCategory map[string]int64 `json:"by_category"`
}

// BatchRequest starts a batch retry.
type BatchRequest struct {
	Filter    Filter    `json:"filter"`
	RateLimit RateLimit `json:"rate_limit"`
	// Priority of the new deliveries; empty leaves the api's default.
	Priority string `json:"priority,omitempty"`
}

// RateLimit is the rate at which a batch enqueues its retries.
type RateLimit struct {
	RequestsPerSecond int `json:"requests_per_second"`
}

// Batch operation states.
const (
	StatePending   = "pending"
	StateRunning   = "running"
	StateCompleted = "completed"
	StateCancelled = "cancelled"
	StateFailed    = "failed"
)

// BatchOperation is the progress of a batch retry or a recovery.
type BatchOperation struct {
	ID    string `json:"id"`
	State string `json:"state"`
	// Kind is retry or recover; Recovery says what a recovery covers.
	Kind       string     `json:"kind"`
	Recovery   *Recovery  `json:"recovery"`
	Total      int64      `json:"total"`
	Processed  int64      `json:"processed"`
	Skipped    int64      `json:"skipped"`
	Succeeded  int64      `json:"succeeded"`
	Failed     int64      `json:"failed"`
	Error      string     `json:"error"`
	CreatedAt  time.Time  `json:"created_at"`
	StartedAt  *time.Time `json:"started_at"`
	FinishedAt *time.Time `json:"finished_at"`
}

// Final reports whether the operation has stopped for good.
func (b BatchOperation) Final() bool {
	return b.State == StateCompleted || b.State == StateCancelled || b.State == StateFailed
}
