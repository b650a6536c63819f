package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"
)

// read is one route or page to time, with the client (and its cookies)
// that asks for it and the token it sends.
type read struct {
	name   string
	client *client
	path   string
	token  string
	// redirect: the answer is a 303 (a search that finds one object sends
	// the browser to its page).
	redirect bool
}

// readsOf is every read of the API, the console and the portal, for the
// large tenant and for a small one, with ids and cursors taken from the
// history.
func readsOf(ctx context.Context, api *client, big tenant, small []tenant) ([]read, error) {
	hook := big.Webhooks[0]
	var page struct {
		Data []struct {
			ID      string `json:"id"`
			EventID string `json:"event_id"`
		} `json:"data"`
		NextCursor string `json:"next_cursor"`
	}
	if err := api.call(ctx, "GET", "/v1/dlq?limit=1", big.Key, nil, &page); err != nil || len(page.Data) == 0 {
		return nil, fmt.Errorf("a dead letter to read: %v (%d)", err, len(page.Data))
	}
	deadLetter := page.Data[0]
	if err := api.call(ctx, "GET", "/v1/webhooks/"+hook+"/deliveries?limit=50", big.Key, nil, &page); err != nil {
		return nil, err
	}
	cursor := page.NextCursor
	var ev struct {
		IdempotencyKey string `json:"idempotency_key"`
	}
	if err := api.call(ctx, "GET", "/v1/events/"+deadLetter.EventID, big.Key, nil, &ev); err != nil {
		return nil, err
	}
	day := time.Now().UTC().Add(-24 * time.Hour).Format(time.RFC3339)
	week := time.Now().UTC().Add(-7 * 24 * time.Hour).Format(time.RFC3339)
	q := func(kv ...string) string {
		v := url.Values{}
		for i := 0; i+1 < len(kv); i += 2 {
			v.Set(kv[i], kv[i+1])
		}
		return v.Encode()
	}
	k := big.Key
	reads := []read{
		{"stats (tenant)", api, "/v1/stats", k, false},
		{"stats (admin, every tenant)", api, "/v1/stats", api.admin, false},
		{"stats of a tenant (admin)", api, "/v1/tenants/" + big.ID + "/stats", api.admin, false},
		{"webhooks", api, "/v1/webhooks?limit=50", k, false},
		{"webhook", api, "/v1/webhooks/" + hook, k, false},
		{"webhook health", api, "/v1/webhooks/" + hook + "/health", k, false},
		{"deliveries", api, "/v1/webhooks/" + hook + "/deliveries?limit=50", k, false},
		{"deliveries, next page", api, "/v1/webhooks/" + hook + "/deliveries?limit=50&cursor=" + cursor, k, false},
		{"deliveries by event type", api, "/v1/webhooks/" + hook + "/deliveries?" + q("limit", "50", "event_type", "order.paid"), k, false},
		{"deliveries of a rare event type", api, "/v1/webhooks/" + hook + "/deliveries?" + q("limit", "50", "event_type", rareType), k, false},
		{"deliveries exhausted", api, "/v1/webhooks/" + hook + "/deliveries?" + q("limit", "50", "status", "exhausted"), k, false},
		{"deliveries pending", api, "/v1/webhooks/" + hook + "/deliveries?" + q("limit", "50", "status", "pending"), k, false},
		{"deliveries retrying", api, "/v1/webhooks/" + hook + "/deliveries?" + q("limit", "50", "status", "retrying"), k, false},
		{"deliveries of the last day", api, "/v1/webhooks/" + hook + "/deliveries?" + q("limit", "50", "from", day), k, false},
		{"delivery with attempts", api, "/v1/deliveries/" + deadLetter.ID, k, false},
		{"events", api, "/v1/events?limit=50", k, false},
		{"events by type", api, "/v1/events?" + q("limit", "50", "event_type", "order.paid"), k, false},
		{"events of a rare type", api, "/v1/events?" + q("limit", "50", "event_type", rareType), k, false},
		{"events of a week, a day ago", api, "/v1/events?" + q("limit", "50", "from", week, "to", day), k, false},
		{"event", api, "/v1/events/" + deadLetter.EventID, k, false},
		{"event by idempotency key", api, "/v1/events?" + q("idempotency_key", ev.IdempotencyKey), k, false},
		{"dlq", api, "/v1/dlq?limit=50", k, false},
		{"dlq by webhook", api, "/v1/dlq?" + q("limit", "50", "webhook_id", hook), k, false},
		{"dlq by event type", api, "/v1/dlq?" + q("limit", "50", "event_type", "order.paid"), k, false},
		{"dlq by category", api, "/v1/dlq?" + q("limit", "50", "failure_category", "timeout"), k, false},
		{"dlq since a day", api, "/v1/dlq?" + q("limit", "50", "from", day), k, false},
		{"dlq counts", api, "/v1/dlq/counts", k, false},
		{"dlq counts by webhook", api, "/v1/dlq/counts?" + q("webhook_id", hook), k, false},
		{"dlq counts by type and category", api, "/v1/dlq/counts?" + q("event_type", "order.paid", "failure_category", "timeout"), k, false},
		{"dlq counts of a week, a day ago", api, "/v1/dlq/counts?" + q("from", week, "to", day), k, false},
		{"batch operations", api, "/v1/dlq/batch-operations", k, false},
		{"audit log", api, "/v1/audit", k, false},
		{"api keys", api, "/v1/api-keys", k, false},
		{"small tenant: stats", api, "/v1/stats", small[0].Key, false},
		{"small tenant: deliveries", api, "/v1/webhooks/" + small[0].Webhooks[0] + "/deliveries", small[0].Key, false},
		{"small tenant: events", api, "/v1/events", small[0].Key, false},
		{"tenants (admin)", api, "/v1/tenants?limit=50", api.admin, false},
	}
	console, err := signIn(ctx, api, k)
	if err != nil {
		return nil, fmt.Errorf("console sign-in: %w", err)
	}
	portal, err := openPortal(ctx, api, big.ID)
	if err != nil {
		return nil, fmt.Errorf("portal: %w", err)
	}
	for _, ui := range []struct {
		name   string
		c      *client
		prefix string
	}{{"console", console, "/console"}, {"portal", portal, "/portal"}} {
		reads = append(reads,
			read{ui.name + ": webhooks", ui.c, ui.prefix + "/webhooks", "", false},
			read{ui.name + ": webhook (health, charts, deliveries)", ui.c, ui.prefix + "/webhooks/" + hook, "", false},
			read{ui.name + ": webhook, pending deliveries", ui.c, ui.prefix + "/webhooks/" + hook + "?" + q("state", "pending"), "", false},
			read{ui.name + ": webhook, deliveries of a rare event type", ui.c, ui.prefix + "/webhooks/" + hook + "?" + q("event_type", rareType), "", false},
			read{ui.name + ": delivery", ui.c, ui.prefix + "/deliveries/" + deadLetter.ID, "", false},
			read{ui.name + ": event", ui.c, ui.prefix + "/events/" + deadLetter.EventID, "", false},
			read{ui.name + ": dlq", ui.c, ui.prefix + "/dlq", "", false},
			read{ui.name + ": dlq of a webhook", ui.c, ui.prefix + "/dlq?" + q("webhook_id", hook), "", false},
			read{ui.name + ": search", ui.c, ui.prefix + "/search?" + q("q", deadLetter.ID), "", true},
		)
	}
	reads = append(reads, read{"console: audit", console, "/console/audit", "", false})
	return reads, nil
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// signIn signs in to the console with the tenant's key, as a browser.
func signIn(ctx context.Context, api *client, key string) (*client, error) {
	c := api.withJar()
	body, err := c.get(ctx, "/console/sign-in")
	if err != nil {
		return nil, err
	}
	m := csrfField.FindStringSubmatch(body)
	if m == nil {
		return nil, fmt.Errorf("no csrf field on the sign-in page")
	}
	form := url.Values{"csrf": {m[1]}, "api_key": {key}, "next": {"/console/webhooks"}}
	req, err := http.NewRequestWithContext(ctx, "POST", c.base+"/console/sign-in", strings.NewReader(form.Encode()))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		return nil, fmt.Errorf("sign-in answered %d", resp.StatusCode)
	}
	return c, nil
}

// openPortal opens a portal session for the tenant, as its customer's
// browser.
func openPortal(ctx context.Context, api *client, tenantID string) (*client, error) {
	var link struct {
		URL string `json:"url"`
	}
	if err := api.call(ctx, "POST", "/v1/tenants/"+tenantID+"/portal-sessions", api.admin, map[string]any{}, &link); err != nil {
		return nil, err
	}
	u, err := url.Parse(link.URL)
	if err != nil {
		return nil, err
	}
	c := api.withJar()
	if _, err := c.get(ctx, u.RequestURI()); err != nil {
		return nil, err
	}
	return c, nil
}

// get fetches path and returns the body of a 2xx or 3xx answer.
func (c *client) get(ctx context.Context, path string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", c.base+path, nil)
	if err != nil {
		return "", err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if resp.StatusCode >= 400 {
		return "", fmt.Errorf("GET %s: %d %.200s", path, resp.StatusCode, raw)
	}
	return string(raw), err
}

// result is a read's timings.
type result struct {
	read
	p50, p99, max time.Duration
	err           error
}

// timeReads sends each read twice to warm up, then samples times, one at
// a time, and keeps the percentiles of the samples.
func timeReads(ctx context.Context, reads []read, samples int) []result {
	out := make([]result, 0, len(reads))
	for _, r := range reads {
		res := result{read: r}
		var took []time.Duration
		for i := 0; i < samples+2 && res.err == nil; i++ {
			req, err := http.NewRequestWithContext(ctx, "GET", r.client.base+r.path, nil)
			if err != nil {
				res.err = err
				break
			}
			if r.token != "" {
				req.Header.Set("Authorization", "Bearer "+r.token)
			}
			start := time.Now()
			resp, err := r.client.http.Do(req)
			if err != nil {
				res.err = err
				break
			}
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			d := time.Since(start)
			want := http.StatusOK
			if r.redirect {
				want = http.StatusSeeOther
			}
			if err == nil && resp.StatusCode != want {
				err = fmt.Errorf("answered %d", resp.StatusCode)
			}
			res.err = err
			if i >= 2 {
				took = append(took, d)
			}
		}
		if len(took) > 0 {
			slices.Sort(took)
			res.p50, res.p99, res.max = took[len(took)/2], took[min(len(took)-1, len(took)*99/100)], took[len(took)-1]
		}
		out = append(out, res)
	}
	return out
}
