package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
)

// client calls the api over keep-alive connections.
type client struct {
	base, admin string
	http        *http.Client
}

func newClient(base, admin string) *client {
	tr := &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: time.Minute}
	return &client{base: base, admin: admin, http: &http.Client{Transport: tr, Timeout: 2 * time.Minute}}
}

// withJar is a client of its own cookies (a browser) on the same
// connections.
func (c *client) withJar() *client {
	jar, _ := cookiejar.New(nil) // cannot fail without options
	h := *c.http
	h.Jar = jar
	h.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &client{base: c.base, admin: c.admin, http: &h}
}

// call sends method path with body (JSON, when not nil) and token, and
// decodes a 2xx answer into out (when not nil).
func (c *client) call(ctx context.Context, method, path, token string, body, out any) error {
	var r io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			return err
		}
		r = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, r)
	if err != nil {
		return err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, raw)
	}
	if out != nil {
		return json.Unmarshal(raw, out)
	}
	return nil
}

// tenant is a tenant made for the run, with its key and webhooks.
type tenant struct {
	ID, Key  string
	Webhooks []string
}

// receiverURL is where the webhooks point: nothing is delivered during the
// run (every delivery written is finished, or parked past its end).
const receiverURL = "http://127.0.0.1:9/hooks"

// setUp makes the large tenant with its webhooks and the small tenants,
// each with one webhook, through the API.
func setUp(ctx context.Context, api *client, o options) (tenant, []tenant, error) {
	big, err := makeTenant(ctx, api, "large", o.webhooks)
	if err != nil {
		return tenant{}, nil, err
	}
	small := make([]tenant, o.tenants)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	var mu sync.Mutex
	for i := range small {
		g.Go(func() error {
			t, err := makeTenant(gctx, api, fmt.Sprintf("small %d", i), 1)
			mu.Lock()
			small[i] = t
			mu.Unlock()
			return err
		})
	}
	return big, small, g.Wait()
}

func makeTenant(ctx context.Context, api *client, name string, webhooks int) (tenant, error) {
	var made struct {
		ID     string `json:"id"`
		APIKey string `json:"api_key"`
	}
	if err := api.call(ctx, "POST", "/v1/tenants", api.admin, map[string]any{"name": name}, &made); err != nil {
		return tenant{}, err
	}
	t := tenant{ID: made.ID, Key: made.APIKey}
	for range webhooks {
		var hook struct {
			ID string `json:"id"`
		}
		if err := api.call(ctx, "POST", "/v1/webhooks", t.Key, map[string]any{"url": receiverURL, "events": []string{"*"}}, &hook); err != nil {
			return tenant{}, err
		}
		t.Webhooks = append(t.Webhooks, hook.ID)
	}
	return t, nil
}
