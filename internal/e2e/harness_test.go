package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/systemtest"
	"github.com/hookline/hookline/internal/testwait"
)

// system is a systemtest system with a tenant of its own.
type system struct {
	*systemtest.System
	t        *testing.T
	key      string
	tenantID uuid.UUID
}

// newSystem starts a system with a worker of 16 handlers, as opts adjust.
func newSystem(t *testing.T, opts ...func(*systemtest.Options)) *system {
	t.Helper()
	o := systemtest.Options{Workers: 16}
	for _, f := range opts {
		f(&o)
	}
	s := &system{System: systemtest.Start(t, o), t: t}
	s.tenantID, s.key = s.Tenant("e2e")
	return s
}

// call sends a request and requires status; it decodes the answer into
// out unless nil.
func (s *system) call(method, path, token string, body any, status int, out any) {
	s.t.Helper()
	got, raw := s.Call(method, path, token, body)
	require.Equal(s.t, status, got, "%s %s: %s", method, path, raw)
	if out != nil {
		require.NoError(s.t, json.Unmarshal(raw, out))
	}
}

// webhook registers an endpoint for every event and returns its id and
// secret.
func (s *system) webhook(url string, extra map[string]any) (string, string) {
	s.t.Helper()
	body := map[string]any{"url": url, "events": []string{"*"}}
	for k, v := range extra {
		body[k] = v
	}
	var w map[string]any
	s.call("POST", "/v1/webhooks", s.key, body, http.StatusCreated, &w)
	return w["id"].(string), w["secret"].(string)
}

// publish sends one event and returns its id.
func (s *system) publish(eventType string, data map[string]any) string {
	s.t.Helper()
	var r map[string]any
	s.call("POST", "/v1/events", s.key, map[string]any{"event_type": eventType, "data": data}, http.StatusAccepted, &r)
	return r["id"].(string)
}

// deliveryOf returns the single delivery of an event.
func (s *system) deliveryOf(eventID string) uuid.UUID {
	s.t.Helper()
	var id uuid.UUID
	require.NoError(s.t, s.Pool.QueryRow(context.Background(), `SELECT id FROM deliveries WHERE event_id = $1`, eventID).Scan(&id))
	return id
}

// waitStatus polls until the delivery reaches status (and, for exhausted,
// has been recorded by the dlq), failing after timeout.
func (s *system) waitStatus(id uuid.UUID, status string, timeout time.Duration) {
	s.t.Helper()
	testwait.Eventually(s.t, timeout, func() bool {
		var got string
		var dead bool
		err := s.Pool.QueryRow(context.Background(), `SELECT status, dead_lettered_at IS NOT NULL FROM deliveries WHERE id = $1`, id).Scan(&got, &dead)
		return err == nil && got == status && (status != "exhausted" || dead)
	}, "delivery %s to become %s", id, status)
}

type attemptRow struct {
	Number      int
	StatusCode  *int
	Category    *string
	Error       *string
	Sample      string
	ScheduledAt time.Time
	ExecutedAt  time.Time
	DurationMS  int
}

func (s *system) attempts(id uuid.UUID) []attemptRow {
	s.t.Helper()
	rows, err := s.Pool.Query(context.Background(), `SELECT attempt_number, status_code, failure_category, error,
		coalesce(response_body_sample, ''), scheduled_at, executed_at, duration_ms
		FROM delivery_attempts WHERE delivery_id = $1 ORDER BY attempt_number`, id)
	require.NoError(s.t, err)
	defer rows.Close()
	var out []attemptRow
	for rows.Next() {
		var a attemptRow
		require.NoError(s.t, rows.Scan(&a.Number, &a.StatusCode, &a.Category, &a.Error, &a.Sample, &a.ScheduledAt, &a.ExecutedAt, &a.DurationMS))
		out = append(out, a)
	}
	require.NoError(s.t, rows.Err())
	return out
}

// received is one request a receiver saw.
type received struct {
	At     time.Time
	Header http.Header
	Body   []byte
}

// receiver is an httptest server whose answer to the n-th request (0-based)
// is decided by respond.
type receiver struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []received
}

func newReceiver(t *testing.T, respond func(n int, w http.ResponseWriter, r *http.Request)) *receiver {
	rc := &receiver{}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rc.mu.Lock()
		n := len(rc.reqs)
		rc.reqs = append(rc.reqs, received{At: time.Now(), Header: r.Header.Clone(), Body: body})
		rc.mu.Unlock()
		respond(n, w, r)
	}))
	t.Cleanup(rc.Close)
	return rc
}

func (rc *receiver) requests() []received {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]received(nil), rc.reqs...)
}
