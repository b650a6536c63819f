package console_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/systemtest"
)

// env is a systemtest system serving the console; with workers, also the
// delivery workers, the dlq recorder and the batch runner.
type env struct {
	*systemtest.System
	t *testing.T
}

// withWorkers runs the worker and dlq parts too, with 8 delivery handlers.
func withWorkers(o *systemtest.Options) { o.Workers = 8 }

func newEnv(t *testing.T, opts ...func(*systemtest.Options)) *env {
	t.Helper()
	var o systemtest.Options
	for _, f := range opts {
		f(&o)
	}
	return &env{System: systemtest.Start(t, o), t: t}
}

// call is a REST API request; it returns the status and decoded body.
func (e *env) call(method, path, token string, body any) (int, map[string]any) {
	e.t.Helper()
	status, raw := e.Call(method, path, token, body)
	var out map[string]any
	if len(raw) > 0 {
		require.NoError(e.t, json.Unmarshal(raw, &out), string(raw))
	}
	return status, out
}

// webhook registers an endpoint for every event and returns its id.
func (e *env) webhook(key, url string, extra map[string]any) uuid.UUID {
	e.t.Helper()
	body := map[string]any{"url": url, "events": []string{"*"}}
	for k, v := range extra {
		body[k] = v
	}
	status, out := e.call("POST", "/v1/webhooks", key, body)
	require.Equal(e.t, http.StatusCreated, status, out)
	return uuid.MustParse(out["id"].(string))
}

// seed stores n deliveries of new events to hook, in the given state, as
// if they had run: exhausted ones with a 502 and a recorded attempt. It
// returns their ids, oldest first.
func (e *env) seed(tenantID, hook uuid.UUID, n int, eventType, status string) []uuid.UUID {
	e.t.Helper()
	return e.seedAt(tenantID, hook, n, eventType, status, 0)
}

// shiftedID is the schema's uuidv7() for the time now + $6.
const shiftedID = `encode(set_bit(set_bit(overlay(uuid_send(gen_random_uuid())
    PLACING substring(int8send((extract(epoch FROM clock_timestamp() + $6::interval) * 1000)::bigint) FROM 3)
    FROM 1 FOR 6), 52, 1), 53, 1), 'hex')::uuid`

// seedAt is seed for deliveries created shift from now (ids included).
func (e *env) seedAt(tenantID, hook uuid.UUID, n int, eventType, status string, shift time.Duration) []uuid.UUID {
	e.t.Helper()
	ctx := context.Background()
	rows, err := e.Pool.Query(ctx, `WITH ev AS (
    INSERT INTO events (id, tenant_id, event_type, source, idempotency_key, request_hash, priority, data, created_at)
    SELECT `+shiftedID+`, $1, $3, 'seed', 'seed-' || gen_random_uuid(), '\x00', 'normal',
        json_build_object('n', g, 'note', 'seeded'), now() + $6::interval
    FROM generate_series(1, $4) g
    RETURNING id, tenant_id, created_at)
INSERT INTO deliveries (id, tenant_id, event_id, webhook_id, status, priority, attempt_count, failure_category,
    last_status_code, last_error, completed_at, dead_lettered_at, created_at)
SELECT `+shiftedID+`, tenant_id, id, $2, $5, 'normal',
    CASE WHEN $5 IN ('exhausted', 'succeeded') THEN 1 ELSE 0 END,
    CASE WHEN $5 = 'exhausted' THEN 'server_error' END,
    CASE WHEN $5 = 'exhausted' THEN 502 WHEN $5 = 'succeeded' THEN 200 END,
    CASE WHEN $5 = 'exhausted' THEN '502 Bad Gateway: upstream closed the connection' END,
    CASE WHEN $5 IN ('exhausted', 'succeeded') THEN now() END,
    CASE WHEN $5 = 'exhausted' THEN now() END,
    created_at
FROM ev
RETURNING id`, tenantID, hook, eventType, n, status, shift)
	require.NoError(e.t, err)
	var ids []uuid.UUID
	for rows.Next() {
		var id uuid.UUID
		require.NoError(e.t, rows.Scan(&id))
		ids = append(ids, id)
	}
	require.NoError(e.t, rows.Err())
	if status == "exhausted" || status == "succeeded" {
		_, err = e.Pool.Exec(ctx, `INSERT INTO delivery_attempts (delivery_id, delivery_created_at, attempt_number, tenant_id,
    webhook_id, status_code, failure_category, error, duration_ms, response_headers, response_body_sample, scheduled_at, executed_at)
SELECT id, created_at, 1, tenant_id, webhook_id, last_status_code, failure_category, last_error, 42,
    '{"Content-Type": "text/plain"}', CASE WHEN status = 'exhausted' THEN 'bad gateway' ELSE 'ok' END, created_at, now()
FROM deliveries WHERE id = ANY($1)`, ids)
		require.NoError(e.t, err)
	}
	return ids
}

// client is a browser without JavaScript: a cookie jar, redirects not
// followed, and the CSRF token of the last page it read.
type client struct {
	t    *testing.T
	base string
	http *http.Client
	csrf string
}

func (e *env) client() *client {
	jar, err := cookiejar.New(nil)
	require.NoError(e.t, err)
	return &client{t: e.t, base: e.URL, http: &http.Client{Jar: jar,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// page is an answer of the console.
type page struct {
	Status   int
	Body     string
	Location string
	Header   http.Header
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

func (c *client) do(req *http.Request) page {
	c.t.Helper()
	res, err := c.http.Do(req)
	require.NoError(c.t, err)
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	require.NoError(c.t, err)
	p := page{Status: res.StatusCode, Body: string(raw), Location: res.Header.Get("Location"), Header: res.Header}
	if m := csrfField.FindStringSubmatch(p.Body); m != nil {
		c.csrf = m[1]
	}
	return p
}

func (c *client) get(path string) page {
	c.t.Helper()
	req, err := http.NewRequest("GET", c.base+path, nil)
	require.NoError(c.t, err)
	return c.do(req)
}

// post sends form with the client's current CSRF token (unless form sets
// its own).
func (c *client) post(path string, form url.Values) page {
	c.t.Helper()
	if form == nil {
		form = url.Values{}
	}
	if _, ok := form["csrf"]; !ok {
		form.Set("csrf", c.csrf)
	}
	req, err := http.NewRequest("POST", c.base+path, strings.NewReader(form.Encode()))
	require.NoError(c.t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return c.do(req)
}

// signIn signs in with key and reads a page so that the client holds the
// session's CSRF token.
func (c *client) signIn(key string) {
	c.t.Helper()
	c.get("/console/sign-in")
	p := c.post("/console/sign-in", url.Values{"api_key": {key}})
	require.Equal(c.t, http.StatusSeeOther, p.Status, p.Body)
	require.Equal(c.t, "/console/webhooks", p.Location)
	require.Equal(c.t, http.StatusOK, c.get("/console/webhooks").Status)
}
