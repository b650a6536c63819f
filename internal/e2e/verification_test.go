package e2e

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/testwait"
)

// echoing returns a receiver that answers a verification challenge with
// its value, when echo says so, and anything else with 200.
func echoing(t *testing.T, echo func(n int) bool) *receiver {
	var rc *receiver
	rc = newReceiver(t, func(n int, w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Webhook-Event") != "webhook.verification" || !echo(n) {
			return
		}
		var c struct {
			Challenge string `json:"challenge"`
		}
		_ = json.Unmarshal(rc.requests()[n].Body, &c)
		_ = json.NewEncoder(w).Encode(map[string]string{"challenge": c.Challenge})
	})
	return rc
}

// An endpoint that does not echo the challenge stays unverified and
// receives no event: its delivery is postponed, never attempted, while a
// verified endpoint subscribed to the same event gets it.
func TestUnverifiedEndpointReceivesNothing(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	silent := newReceiver(t, func(int, http.ResponseWriter, *http.Request) {}) // 200, empty body
	echoes := echoing(t, func(int) bool { return true })

	var unverified, verified map[string]any
	s.call("POST", "/v1/webhooks", s.key, map[string]any{"url": silent.URL, "events": []string{"*"}, "verify_url": true},
		http.StatusCreated, &unverified)
	v := unverified["verification"].(map[string]any)
	require.Equal(t, "failed", v["state"])
	require.Equal(t, "the endpoint answered 200 OK without echoing the challenge, with an empty body", v["last_error"])
	s.call("POST", "/v1/webhooks", s.key, map[string]any{"url": echoes.URL, "events": []string{"*"}, "verify_url": true},
		http.StatusCreated, &verified)
	require.Equal(t, "verified", verified["verification"].(map[string]any)["state"])

	event := s.publish("order.created", map[string]any{"id": 1})
	var held, sent string
	require.NoError(t, s.Pool.QueryRow(t.Context(), `SELECT id FROM deliveries WHERE event_id = $1 AND webhook_id = $2`,
		event, unverified["id"]).Scan(&held))
	require.NoError(t, s.Pool.QueryRow(t.Context(), `SELECT id FROM deliveries WHERE event_id = $1 AND webhook_id = $2`,
		event, verified["id"]).Scan(&sent))
	testwait.Eventually(t, 15*time.Second, func() bool {
		return s.Count(`SELECT count(*) FROM deliveries WHERE id = $1 AND status = 'succeeded'`, sent) == 1 &&
			s.Count(`SELECT postponed_count FROM deliveries WHERE id = $1`, held) > 0
	}, "the verified endpoint's delivery to succeed and the other's to be postponed")

	require.Equal(t, 1, s.Count(`SELECT count(*) FROM deliveries WHERE id = $1 AND status = 'pending' AND attempt_count = 0`, held),
		"postponed, not attempted")
	require.Zero(t, s.Count(`SELECT count(*) FROM delivery_attempts WHERE delivery_id = $1`, held))
	reqs := silent.requests()
	require.Len(t, reqs, 1, "the challenge only")
	require.Equal(t, "webhook.verification", reqs[0].Header.Get("X-Webhook-Event"))
	reqs = echoes.requests()
	require.Len(t, reqs, 2, "the challenge, then the event")
	require.Equal(t, "order.created", reqs[1].Header.Get("X-Webhook-Event"))
}

// An endpoint that did not echo at first starts receiving once it echoes
// and is verified again; events published after that reach it at once.
func TestEndpointReceivesOnceVerified(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	rc := echoing(t, func(n int) bool { return n > 0 })
	var hook map[string]any
	s.call("POST", "/v1/webhooks", s.key, map[string]any{"url": rc.URL, "events": []string{"*"}, "verify_url": true},
		http.StatusCreated, &hook)
	require.Equal(t, "failed", hook["verification"].(map[string]any)["state"])

	s.call("POST", "/v1/webhooks/"+hook["id"].(string)+"/verify", s.key, nil, http.StatusOK, &hook)
	require.Equal(t, "verified", hook["verification"].(map[string]any)["state"])
	event := s.publish("order.created", map[string]any{"id": 1})
	s.waitStatus(s.deliveryOf(event), "succeeded", 15*time.Second)
	reqs := rc.requests()
	require.Len(t, reqs, 3, "two challenges and the event")
	require.Equal(t, "order.created", reqs[2].Header.Get("X-Webhook-Event"))
}
