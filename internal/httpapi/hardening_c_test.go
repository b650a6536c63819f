package httpapi

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/config"
	"github.com/hookline/hookline/internal/console"
	"github.com/hookline/hookline/internal/tenant"
	"github.com/hookline/hookline/internal/webhook"
)

// A second retry of a DLQ entry whose first retry succeeded would send the
// event again: it is refused unless forced, and a forced one is audited
// as such.
func TestRetryOfResolvedDLQEntry(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	tenantID, key := e.tenantKey("acme")
	hook := e.createWebhook(key, map[string]any{})["id"].(string)
	d := e.seedDelivery(tenantID, hook, "order.created", "exhausted", "server_error", time.Now())
	path := "/v1/webhooks/" + hook + "/deliveries/" + d + "/retry"

	r := e.do("POST", path, key, nil)
	require.Equal(t, http.StatusAccepted, r.Status, string(r.Raw))
	_, err := e.pool.Exec(context.Background(), `UPDATE deliveries SET status = 'succeeded', attempt_count = 1,
    completed_at = now() WHERE id = $1`, r.Body["delivery_id"])
	require.NoError(t, err)

	r = e.do("POST", path, key, nil)
	require.Equal(t, http.StatusConflict, r.Status, string(r.Raw))
	require.Equal(t, "already_resolved", r.errCode())
	require.Equal(t, 2, e.count(`SELECT count(*) FROM deliveries WHERE webhook_id = $1`, hook), "nothing sent again")

	r = e.do("POST", path, key, map[string]any{"force": true})
	require.Equal(t, http.StatusAccepted, r.Status, string(r.Raw))
	require.Equal(t, 3, e.count(`SELECT count(*) FROM deliveries WHERE webhook_id = $1`, hook))
	audit := e.do("GET", "/v1/audit?limit=1", key, nil)
	row := audit.Body["data"].([]any)[0].(map[string]any)
	require.Equal(t, "delivery.retried", row["action"])
	require.Equal(t, true, row["details"].(map[string]any)["force"])
}

// A retry of an ordered webhook's delivery carries the order key publish
// gives its deliveries, so that it waits its turn.
func TestDLQRetryKeepsTheOrderKey(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	tenantID, key := e.tenantKey("acme")
	hook := e.createWebhook(key, map[string]any{"ordering_guarantee": "per_event_type"})["id"].(string)
	d := e.seedDelivery(tenantID, hook, "order.created", "exhausted", "server_error", time.Now())
	r := e.do("POST", "/v1/webhooks/"+hook+"/deliveries/"+d+"/retry", key, nil)
	require.Equal(t, http.StatusAccepted, r.Status, string(r.Raw))
	var orderKey *string
	require.NoError(t, e.pool.QueryRow(context.Background(), `SELECT order_key FROM deliveries WHERE id = $1`,
		r.Body["delivery_id"]).Scan(&orderKey))
	require.NotNil(t, orderKey)
	require.Equal(t, webhook.OrderKey(webhook.OrderingPerEventType, hook, "order.created"), *orderKey)
}

// Custom header values are credentials: every answer that shows a webhook
// masks them, and a client that writes back what it read keeps them.
func TestWebhookHeaderValuesAreMasked(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	_, key := e.tenantKey("acme")
	const bearer = "Bearer sk_live_0123456789abcdef"
	masked := map[string]any{"Authorization": "Bear…", "X-Team": "****"}
	created := e.createWebhook(key, map[string]any{"headers": map[string]string{"Authorization": bearer, "X-Team": "payments"}})
	require.Equal(t, masked, created["headers"], "create")
	hook := created["id"].(string)

	got := e.do("GET", "/v1/webhooks/"+hook, key, nil)
	require.Equal(t, masked, got.Body["headers"], "get")
	list := e.do("GET", "/v1/webhooks", key, nil)
	require.Equal(t, masked, list.Body["data"].([]any)[0].(map[string]any)["headers"], "list")
	patched := e.do("PATCH", "/v1/webhooks/"+hook, key, map[string]any{"active": false})
	require.Equal(t, masked, patched.Body["headers"], "patch")
	rotated := e.do("POST", "/v1/webhooks/"+hook+"/secret/rotate", key, nil)
	require.Equal(t, masked, rotated.Body["headers"], "rotate")
	require.NotContains(t, string(got.Raw)+string(list.Raw)+string(patched.Raw)+string(rotated.Raw), "sk_live")

	// PUT back what GET showed, with one value changed.
	body := map[string]any{"url": got.Body["url"], "events": got.Body["events"],
		"headers": map[string]any{"Authorization": "Bear…", "X-Team": "ops"}}
	put := e.do("PUT", "/v1/webhooks/"+hook, key, body)
	require.Equal(t, http.StatusOK, put.Status, string(put.Raw))
	var stored map[string]string
	require.NoError(t, e.pool.QueryRow(context.Background(), `SELECT headers FROM webhooks WHERE id = $1`, hook).Scan(&stored))
	require.Equal(t, map[string]string{"Authorization": bearer, "X-Team": "ops"}, stored,
		"this api has no secret keys: the column is in clear, with the real values")
}

// PATCH /v1/tenants/{id} leaves an audit row in the tenant's log, by the
// admin, with what changed.
func TestTenantUpdateIsAudited(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	tenantID, key := e.tenantKey("acme")
	r := e.do("PATCH", "/v1/tenants/"+tenantID, testAdminToken, map[string]any{"name": "acme two",
		"rate_limit": map[string]any{"requests_per_minute": 42}})
	require.Equal(t, http.StatusOK, r.Status, string(r.Raw))

	audit := e.do("GET", "/v1/audit?limit=1", key, nil)
	require.Equal(t, http.StatusOK, audit.Status)
	row := audit.Body["data"].([]any)[0].(map[string]any)
	require.Equal(t, "tenant.updated", row["action"])
	require.Equal(t, tenantID, row["target_id"])
	require.Nil(t, row["actor_key_id"], "the admin token")
	details := row["details"].(map[string]any)
	require.Equal(t, "acme", details["before"].(map[string]any)["name"])
	require.Equal(t, "acme two", details["after"].(map[string]any)["name"])
	require.Equal(t, 42.0, details["after"].(map[string]any)["rate_limit"].(map[string]any)["requests_per_minute"])
}

// throttleClock is a clock the test moves.
type throttleClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *throttleClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *throttleClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// throttled serves h behind an AuthThrottle of burst failures, 3 a minute
// earned back, trusting X-Forwarded-For from loopback when trustLoopback.
func serveThrottled(t *testing.T, h http.Handler, burst int, trustLoopback bool) (*httptest.Server, *throttleClock) {
	t.Helper()
	cfg := config.Default().API
	cfg.AuthFailures = config.AuthThrottle{Burst: burst, PerMinute: 3}
	if trustLoopback {
		cfg.TrustedProxies = []string{"127.0.0.0/8", "::1/128"}
	}
	th, err := NewAuthThrottle(cfg, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	clock := &throttleClock{now: time.Now()}
	th.now = clock.Now
	srv := httptest.NewServer(th.Wrap(h))
	t.Cleanup(srv.Close)
	return srv, clock
}

// call sends a request to base from the client named by forwardedFor (when
// not empty), and returns the status, Retry-After and error code.
func throttledCall(t *testing.T, base, method, path, token, forwardedFor string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequest(method, base+path, nil)
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if forwardedFor != "" {
		req.Header.Set("X-Forwarded-For", forwardedFor)
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	var body struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	_ = json.Unmarshal(raw, &body)
	return res.StatusCode, res.Header.Get("Retry-After"), body.Error.Code
}

// After burst failures a client is answered 429 with Retry-After, even
// with the right credentials, until it has earned a failure back; the
// admin token and API keys share the budget.
func TestFailedAuthenticationsAreThrottled(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	_, key := e.tenantKey("acme")
	srv, clock := serveThrottled(t, e.srv.Handler(), 3, false)

	for _, wrong := range []string{"not-the-admin-token", "hk_wrong", "hk_wrong"} {
		path := "/v1/webhooks"
		if !strings.HasPrefix(wrong, "hk_") {
			path = "/v1/tenants/" + zeroTenantID
		}
		status, _, _ := throttledCall(t, srv.URL, "GET", path, wrong, "")
		require.Equal(t, http.StatusUnauthorized, status)
	}
	status, retryAfter, code := throttledCall(t, srv.URL, "GET", "/v1/webhooks", key, "")
	require.Equal(t, http.StatusTooManyRequests, status, "the right key too: guesses must not be told apart")
	require.Equal(t, "too_many_auth_failures", code)
	require.Equal(t, "20", retryAfter, "3 a minute: one back in 20 s")
	status, _, _ = throttledCall(t, srv.URL, "POST", "/v1/tenants", testAdminToken, "")
	require.Equal(t, http.StatusTooManyRequests, status)
	status, _, _ = throttledCall(t, srv.URL, "GET", "/healthz", "", "")
	require.Equal(t, http.StatusOK, status, "requests without credentials pass")

	clock.advance(19 * time.Second)
	status, retryAfter, _ = throttledCall(t, srv.URL, "GET", "/v1/webhooks", key, "")
	require.Equal(t, http.StatusTooManyRequests, status)
	require.Equal(t, "1", retryAfter)
	clock.advance(time.Second)
	status, _, _ = throttledCall(t, srv.URL, "GET", "/v1/webhooks", key, "")
	require.Equal(t, http.StatusOK, status)
	status, _, _ = throttledCall(t, srv.URL, "GET", "/v1/webhooks", "hk_wrong", "")
	require.Equal(t, http.StatusUnauthorized, status, "the failure earned back is spent")
	status, _, _ = throttledCall(t, srv.URL, "GET", "/v1/webhooks", key, "")
	require.Equal(t, http.StatusTooManyRequests, status)
}

const zeroTenantID = "00000000-0000-0000-0000-000000000000"

// Behind a trusted proxy each client has its own budget, X-Forwarded-For
// naming it; from an untrusted peer the header is ignored, so that a
// client cannot escape by inventing addresses.
func TestAuthThrottleIsPerClient(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	_, key := e.tenantKey("acme")
	proxied, _ := serveThrottled(t, e.srv.Handler(), 2, true)
	for range 2 {
		status, _, _ := throttledCall(t, proxied.URL, "GET", "/v1/webhooks", "hk_wrong", "198.51.100.1, 203.0.113.7")
		require.Equal(t, http.StatusUnauthorized, status)
	}
	status, _, _ := throttledCall(t, proxied.URL, "GET", "/v1/webhooks", key, "203.0.113.7")
	require.Equal(t, http.StatusTooManyRequests, status, "the right-most untrusted address is the client")
	status, _, _ = throttledCall(t, proxied.URL, "GET", "/v1/webhooks", key, "203.0.113.8")
	require.Equal(t, http.StatusOK, status, "another client is not held back")
	status, _, _ = throttledCall(t, proxied.URL, "GET", "/v1/webhooks", key, "2001:db8:1:2::5")
	require.Equal(t, http.StatusOK, status)
	for range 2 {
		status, _, _ = throttledCall(t, proxied.URL, "GET", "/v1/webhooks", "hk_wrong", "2001:db8:1:2::5")
		require.Equal(t, http.StatusUnauthorized, status)
	}
	status, _, _ = throttledCall(t, proxied.URL, "GET", "/v1/webhooks", key, "2001:db8:1:2:ffff::9")
	require.Equal(t, http.StatusTooManyRequests, status, "an IPv6 client is its /64")

	direct, _ := serveThrottled(t, e.srv.Handler(), 2, false)
	for _, invented := range []string{"192.0.2.1", "192.0.2.2"} {
		status, _, _ = throttledCall(t, direct.URL, "GET", "/v1/webhooks", "hk_wrong", invented)
		require.Equal(t, http.StatusUnauthorized, status)
	}
	status, _, _ = throttledCall(t, direct.URL, "GET", "/v1/webhooks", key, "192.0.2.9")
	require.Equal(t, http.StatusTooManyRequests, status, "an untrusted peer's X-Forwarded-For is ignored")
}

var signInCSRFField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// Wrong keys at the console's sign-in count as failures like the API's.
func TestConsoleSignInFailuresAreThrottled(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	_, key := e.tenantKey("acme")
	cfg := config.Default()
	cfg.API.AdminToken = testAdminToken
	srv, err := New(Deps{Config: cfg, Log: slog.New(slog.DiscardHandler), Tenants: tenant.NewStore(e.pool),
		Webhooks: webhook.NewStore(e.pool), Console: console.Config{DB: e.pool}})
	require.NoError(t, err)
	front, clock := serveThrottled(t, srv.Handler(), 2, false)

	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	browser := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := browser.Get(front.URL + "/console/sign-in")
	require.NoError(t, err)
	page, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	require.NoError(t, res.Body.Close())
	m := signInCSRFField.FindStringSubmatch(string(page))
	require.NotNil(t, m)
	signIn := func(apiKey string) (int, string) {
		res, err := browser.PostForm(front.URL+"/console/sign-in", url.Values{"api_key": {apiKey}, "csrf": {m[1]}})
		require.NoError(t, err)
		require.NoError(t, res.Body.Close())
		return res.StatusCode, res.Header.Get("Retry-After")
	}
	for range 2 {
		status, _ := signIn("hk_wrong")
		require.Equal(t, http.StatusUnauthorized, status)
	}
	status, retryAfter := signIn(key)
	require.Equal(t, http.StatusTooManyRequests, status)
	require.Equal(t, "20", retryAfter)
	clock.advance(20 * time.Second)
	status, _ = signIn(key)
	require.Equal(t, http.StatusSeeOther, status, "signed in once a failure is earned back")
}
