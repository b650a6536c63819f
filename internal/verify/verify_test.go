package verify

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/netguard"
	"github.com/hookline/hookline/internal/signature"
	"github.com/hookline/hookline/internal/webhook"
)

func TestJudge(t *testing.T) {
	t.Parallel()
	const v = "c2FtcGxlLWNoYWxsZW5nZQ"
	tests := []struct {
		name   string
		status int
		body   string
		want   string // "" passes; else substrings of the problem, |-separated
	}{
		{"json echo", 200, `{"challenge":"` + v + `"}`, ""},
		{"json echo with other members", 200, `{"ok": true, "challenge": "` + v + `"}`, ""},
		{"json echo with spaces", 200, "\n  {\"challenge\": \"" + v + "\"}\n", ""},
		{"bare echo", 200, v, ""},
		{"bare echo with newline", 200, v + "\n", ""},
		{"json string echo", 200, `"` + v + `"`, ""},
		{"201", 201, v, ""},
		{"204 without body", 204, "", "204 No Content without echoing the challenge|with an empty body"},
		{"ok text", 200, "ok", `200 OK without echoing the challenge|body "ok"`},
		{"empty 200", 200, "", "200 OK without echoing|empty body"},
		{"another challenge", 200, `{"challenge":"nope"}`, `another challenge|body "{\"challenge\":\"nope\"}"`},
		{"json without challenge", 200, `{"status":"ok"}`, `without echoing the challenge|"{\"status\":\"ok\"}"`},
		{"echo in a longer text", 200, "challenge=" + v, "without echoing"},
		{"null challenge", 200, `{"challenge":null}`, "without echoing"},
		{"not found", 404, "no such route", `404 Not Found|body "no such route"`},
		{"server error that echoes", 500, v, "500 Internal Server Error"},
		{"redirect", 302, "", "302 Found (redirects are not followed)|empty body"},
		{"unknown status", 299, v, ""},
		{"odd status", 599, "x", "599, body"},
		{"long body is cut", 400, strings.Repeat("a", 500), `400 Bad Request|"` + strings.Repeat("a", 200) + `"...`},
		{"control bytes are escaped", 400, "bad\x00\r\n", `body "bad\x00\r\n"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := judge(tt.status, []byte(tt.body), v)
			if tt.want == "" {
				require.Empty(t, got)
				return
			}
			for _, part := range strings.Split(tt.want, "|") {
				require.Contains(t, got, part)
			}
		})
	}
}

// challenged is one challenge a receiver got.
type challenged struct {
	header http.Header
	body   []byte
}

// endpoint is a real HTTP server answering challenges with answer.
type endpoint struct {
	*httptest.Server
	mu   sync.Mutex
	seen []challenged
}

func newEndpoint(t *testing.T, answer func(w http.ResponseWriter, r *http.Request, challenge string)) *endpoint {
	t.Helper()
	e := &endpoint{}
	e.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		e.mu.Lock()
		e.seen = append(e.seen, challenged{header: r.Header.Clone(), body: body})
		e.mu.Unlock()
		var c struct {
			Challenge string `json:"challenge"`
		}
		_ = json.Unmarshal(body, &c)
		answer(w, r, c.Challenge)
	}))
	t.Cleanup(e.Close)
	return e
}

func (e *endpoint) challenges() []challenged {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]challenged(nil), e.seen...)
}

func echoJSON(w http.ResponseWriter, _ *http.Request, challenge string) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]string{"challenge": challenge})
}

func hookAt(url string) webhook.Webhook {
	return webhook.Webhook{ID: uuid.Must(uuid.NewV7()), URL: url, Secret: webhook.NewSecret(),
		Headers: map[string]string{"Authorization": "Bearer team-token"}}
}

func testChecker() *Checker {
	return New(Config{Policy: netguard.Policy{AllowPrivate: true}, UserAgent: "hookline/test"})
}

// The challenge is signed like a delivery, by every active secret, and
// carries the webhook's own headers; each check sends a new challenge.
func TestChallengeIsSignedLikeADelivery(t *testing.T) {
	t.Parallel()
	e := newEndpoint(t, echoJSON)
	w := hookAt(e.URL + "/hooks?src=hookline")
	grace := time.Now().Add(time.Hour)
	w.PreviousSecret, w.PreviousSecretExpiresAt = webhook.NewSecret(), &grace

	for range 2 {
		res, err := testChecker().Check(context.Background(), w)
		require.NoError(t, err)
		require.True(t, res.Verified(), res.Problem)
		require.Equal(t, 200, res.StatusCode)
	}
	seen := e.challenges()
	require.Len(t, seen, 2)
	for _, c := range seen {
		var body map[string]string
		require.NoError(t, json.Unmarshal(c.body, &body))
		require.Equal(t, EventType, body["type"])
		require.Len(t, body, 2, "type and challenge only: %s", c.body)
		require.Len(t, body["challenge"], 43, "32 random bytes")
		h := c.header
		for _, secret := range []string{w.Secret, w.PreviousSecret} {
			require.NoError(t, signature.VerifyStandard(secret, h.Get("webhook-id"), h.Get("webhook-timestamp"),
				h.Get("webhook-signature"), c.body, time.Now(), 5*time.Minute))
			require.NoError(t, signature.VerifyLegacy(secret, h.Get("X-Webhook-Signature"), c.body, time.Now(), 5*time.Minute))
		}
		require.Equal(t, "application/json", h.Get("Content-Type"))
		require.Equal(t, "hookline/test", h.Get("User-Agent"))
		require.Equal(t, w.ID.String(), h.Get("X-Webhook-ID"))
		require.Equal(t, EventType, h.Get("X-Webhook-Event"))
		require.Equal(t, h.Get("webhook-timestamp"), h.Get("X-Webhook-Timestamp"))
		require.Equal(t, "Bearer team-token", h.Get("Authorization"))
	}
	require.NotEqual(t, seen[0].body, seen[1].body, "a fresh challenge per check")
	require.NotEqual(t, seen[0].header.Get("webhook-id"), seen[1].header.Get("webhook-id"))
}

// Real endpoints answering in every way that passes or fails; a failure
// says what the endpoint answered.
func TestCheckAgainstEndpoints(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		answer func(w http.ResponseWriter, r *http.Request, challenge string)
		want   string
	}{
		{"json echo", echoJSON, ""},
		{"bare echo", func(w http.ResponseWriter, _ *http.Request, c string) { _, _ = io.WriteString(w, c) }, ""},
		{"plain ok", func(w http.ResponseWriter, _ *http.Request, _ string) { _, _ = io.WriteString(w, "ok") },
			`the endpoint answered 200 OK without echoing the challenge, body "ok"`},
		{"not found", func(w http.ResponseWriter, r *http.Request, _ string) { http.NotFound(w, r) },
			`the endpoint answered 404 Not Found, body "404 page not found\n"`},
		{"redirect", func(w http.ResponseWriter, r *http.Request, _ string) {
			http.Redirect(w, r, "/elsewhere", http.StatusFound)
		},
			"the endpoint answered 302 Found (redirects are not followed), with an empty body"},
		{"echo after a kilobyte", func(w http.ResponseWriter, _ *http.Request, c string) {
			_, _ = io.WriteString(w, strings.Repeat(" ", 1024)+c)
		}, `the endpoint answered 200 OK without echoing the challenge, body "` + strings.Repeat(" ", 200) + `"...`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEndpoint(t, tt.answer)
			res, err := testChecker().Check(context.Background(), hookAt(e.URL))
			require.NoError(t, err)
			require.Equal(t, tt.want, res.Problem)
			require.Len(t, e.challenges(), 1)
		})
	}
}

// An endpoint that does not answer in time fails with that reason; one
// that is gone fails with the connection error.
func TestCheckWithoutAnswer(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	hanging := newEndpoint(t, func(w http.ResponseWriter, r *http.Request, _ string) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	defer close(release)
	c := New(Config{Policy: netguard.Policy{AllowPrivate: true}, Timeout: 300 * time.Millisecond})
	start := time.Now()
	res, err := c.Check(context.Background(), hookAt(hanging.URL))
	require.NoError(t, err)
	require.Equal(t, "no answer within 300ms", res.Problem)
	require.Less(t, time.Since(start), 5*time.Second)

	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	res, err = testChecker().Check(context.Background(), hookAt(closed.URL))
	require.NoError(t, err)
	require.Contains(t, res.Problem, "the request failed: ")
	require.Contains(t, res.Problem, "connection refused")
	require.NotContains(t, res.Problem, closed.URL, "the cause, not the client's wrapping")
}

// A check cut off by our own side (the caller went away) is an error, not
// the endpoint's failure.
func TestCheckCutOffByTheCaller(t *testing.T) {
	t.Parallel()
	arrived := make(chan struct{})
	e := newEndpoint(t, func(_ http.ResponseWriter, r *http.Request, _ string) {
		close(arrived)
		<-r.Context().Done()
	})
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-arrived; cancel() }()
	_, err := testChecker().Check(ctx, hookAt(e.URL))
	require.ErrorIs(t, err, context.Canceled)
}

// The challenge goes through the SSRF guard: a loopback endpoint is
// refused at dial time and receives nothing.
func TestCheckRefusesBlockedAddresses(t *testing.T) {
	t.Parallel()
	e := newEndpoint(t, echoJSON)
	c := New(Config{Policy: netguard.Policy{}})
	res, err := c.Check(context.Background(), hookAt(e.URL))
	require.NoError(t, err)
	require.Contains(t, res.Problem, "address is not allowed")
	require.Empty(t, e.challenges())
}
