package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// Limits that never bind, for every tenant (delivery and publish buckets)
// and for every webhook but the flood's: the scenarios are about what the
// worker does with work it is allowed to do. The webhook values are the
// largest the api accepts.
const (
	tenantLimits = `"rate_limit": {"requests_per_minute": 10000000, "burst": 1000000},
		"publish_rate_limit": {"requests_per_second": 1000000, "burst": 1000000}`
	openWebhookLimit = `"rate_limit": {"requests_per_minute": 1000000, "burst": 100000}`
)

// api creates tenants and webhooks on a running system.
type api struct {
	url, adminToken string
	client          *http.Client
}

// createTenant returns the new tenant's id and API key.
func (a api) createTenant(ctx context.Context, name string) (id, key string, err error) {
	var t struct {
		ID     string `json:"id"`
		APIKey string `json:"api_key"`
	}
	err = a.post(ctx, "/v1/tenants", a.adminToken, fmt.Sprintf(`{"name": %q, %s}`, name, tenantLimits), &t)
	return t.ID, t.APIKey, err
}

// createWebhook registers url for the tenant's "fair.*" events; extra holds
// more JSON fields of the webhook, or is empty.
func (a api) createWebhook(ctx context.Context, key, url, extra string) error {
	if extra != "" {
		extra = ", " + extra
	}
	return a.post(ctx, "/v1/webhooks", key, fmt.Sprintf(`{"url": %q, "events": ["fair.*"]%s}`, url, extra), nil)
}

func (a api) post(ctx context.Context, path, token, body string, out any) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.url+path, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	res, err := a.client.Do(req)
	if err != nil {
		return fmt.Errorf("POST %s: %w", path, err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	if res.StatusCode/100 != 2 {
		return fmt.Errorf("POST %s: %d %s", path, res.StatusCode, raw)
	}
	if out != nil {
		return json.Unmarshal(raw, out)
	}
	return nil
}

// close drops the connections kept alive.
func (a api) close() { a.client.CloseIdleConnections() }
