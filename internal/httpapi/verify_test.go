package httpapi

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/signature"
)

// challengeEndpoint is a real endpoint that echoes verification challenges
// while echo is true and answers 200 "ok" otherwise; it keeps what it got.
type challengeEndpoint struct {
	*httptest.Server
	echo   atomic.Bool
	mu     sync.Mutex
	bodies [][]byte
	heads  []http.Header
}

func newChallengeEndpoint(t *testing.T, echo bool) *challengeEndpoint {
	t.Helper()
	e := &challengeEndpoint{}
	e.echo.Store(echo)
	e.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		e.mu.Lock()
		e.bodies = append(e.bodies, body)
		e.heads = append(e.heads, r.Header.Clone())
		e.mu.Unlock()
		var c struct {
			Challenge string `json:"challenge"`
		}
		_ = json.Unmarshal(body, &c)
		if e.echo.Load() {
			_ = json.NewEncoder(w).Encode(map[string]string{"challenge": c.Challenge})
			return
		}
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(e.Close)
	return e
}

func (e *challengeEndpoint) count() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.bodies)
}

func verificationOf(t *testing.T, body map[string]any) map[string]any {
	t.Helper()
	v, ok := body["verification"].(map[string]any)
	require.True(t, ok, "verification in %v", body)
	return v
}

// verify_url runs the check before the answer: an endpoint that does not
// echo is failed, with what it answered; one that echoes is verified. The
// route runs it again; a new url is checked again; false drops it.
func TestWebhookVerificationRoutes(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	e.srv.rules.Network.AllowPrivate = true
	_, key := e.tenantKey("acme")
	_, otherKey := e.tenantKey("other")
	silent := newChallengeEndpoint(t, false)

	plain := e.createWebhook(key, map[string]any{"url": silent.URL})
	require.Contains(t, plain, "verification")
	require.Nil(t, plain["verification"], "no verification unless asked for")
	require.Zero(t, silent.count(), "no challenge unless asked for")

	created := e.createWebhook(key, map[string]any{"url": silent.URL + "/in", "verify_url": true,
		"headers": map[string]string{"X-Team": "ops"}})
	id := created["id"].(string)
	v := verificationOf(t, created)
	require.Equal(t, "failed", v["state"])
	require.Nil(t, v["verified_at"])
	require.Equal(t, `the endpoint answered 200 OK without echoing the challenge, body "ok"`, v["last_error"])
	require.NotEmpty(t, created["secret"], "the secret is still returned once")
	require.Equal(t, 1, silent.count())
	h, body := silent.heads[0], silent.bodies[0]
	require.NoError(t, signature.VerifyStandard(created["secret"].(string), h.Get("webhook-id"), h.Get("webhook-timestamp"),
		h.Get("webhook-signature"), body, time.Now(), time.Minute))
	require.Equal(t, "webhook.verification", h.Get("X-Webhook-Event"))
	require.Equal(t, "ops", h.Get("X-Team"))

	got := e.do("GET", "/v1/webhooks/"+id, key, nil)
	require.Equal(t, v, verificationOf(t, got.Body))

	silent.echo.Store(true)
	r := e.do("POST", "/v1/webhooks/"+id+"/verify", key, nil)
	require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
	v = verificationOf(t, r.Body)
	require.Equal(t, "verified", v["state"])
	require.Nil(t, v["last_error"])
	at, err := time.Parse(time.RFC3339Nano, v["verified_at"].(string))
	require.NoError(t, err)
	require.WithinDuration(t, time.Now(), at, time.Minute)
	require.NotContains(t, r.Body, "secret")

	// A change that keeps the url keeps the verification; a new url is
	// checked again, at once.
	r = e.do("PATCH", "/v1/webhooks/"+id, key, map[string]any{"metadata": map[string]any{"a": 1}})
	require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
	require.Equal(t, "verified", verificationOf(t, r.Body)["state"])
	mute := newChallengeEndpoint(t, false)
	r = e.do("PATCH", "/v1/webhooks/"+id, key, map[string]any{"url": mute.URL})
	require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
	require.Equal(t, "failed", verificationOf(t, r.Body)["state"])
	require.Equal(t, 1, mute.count())
	r = e.do("PUT", "/v1/webhooks/"+id, key, map[string]any{"url": silent.URL, "events": []string{"a"}})
	require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
	require.Equal(t, "verified", verificationOf(t, r.Body)["state"], "a replace with a new url is checked again")

	r = e.do("PATCH", "/v1/webhooks/"+id, key, map[string]any{"verify_url": false})
	require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
	require.Nil(t, r.Body["verification"])

	// The route on a webhook without verification starts one.
	r = e.do("POST", "/v1/webhooks/"+plain["id"].(string)+"/verify", key, nil)
	require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
	require.Equal(t, "verified", verificationOf(t, r.Body)["state"])

	sent := silent.count() + mute.count()
	for _, path := range []string{"/v1/webhooks/" + id + "/verify", "/v1/webhooks/01a2018f-e8de-721d-84c4-01870d5923f9/verify"} {
		r = e.do("POST", path, otherKey, nil)
		require.Equal(t, http.StatusNotFound, r.Status, "another tenant's webhook, or none")
	}
	r = e.do("POST", "/v1/webhooks/not-a-uuid/verify", key, nil)
	require.Equal(t, http.StatusNotFound, r.Status)
	require.Equal(t, sent, silent.count()+mute.count(), "nothing sent for a refused request")
}

// A webhook whose url the policy refuses at dial time fails its check and
// the endpoint receives nothing.
func TestWebhookVerificationThroughTheGuard(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	e.srv.rules.Network.AllowPrivate = true
	_, key := e.tenantKey("acme")
	ep := newChallengeEndpoint(t, true)
	w := e.createWebhook(key, map[string]any{"url": ep.URL})
	e.srv.rules.Network.AllowPrivate = false
	r := e.do("POST", "/v1/webhooks/"+w["id"].(string)+"/verify", key, nil)
	require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
	v := verificationOf(t, r.Body)
	require.Equal(t, "failed", v["state"])
	require.Contains(t, v["last_error"], "address is not allowed")
	require.Zero(t, ep.count())
}
