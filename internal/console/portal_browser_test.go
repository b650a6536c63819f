package console_test

import (
	"context"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/systemtest"
	"github.com/hookline/hookline/internal/testwait"
)

// frame returns a browser driving the portal inside the page's iframe:
// the portal is on another site than the page, so Chromium runs the frame
// as a target of its own, found by its address.
func (b *browser) frame(urlPrefix string) *browser {
	b.t.Helper()
	var found *browser
	testwait.Eventually(b.t, 10*time.Second, func() bool {
		infos, err := chromedp.Targets(b.ctx)
		if err != nil {
			return false
		}
		for _, info := range infos {
			if info.Type == "iframe" && strings.HasPrefix(info.URL, urlPrefix) {
				ctx, cancel := chromedp.NewContext(b.ctx, chromedp.WithTargetID(info.TargetID))
				b.t.Cleanup(cancel)
				// The first action attaches to the frame for as long as the
				// context it runs under: it must not run under a timeout.
				_, err := chromedp.Run(ctx, chromedp.Evaluate[string]("document.readyState"))
				require.NoError(b.t, err)
				found = &browser{t: b.t, ctx: ctx, shot: b.shot}
				return true
			}
		}
		return false
	}, "an iframe at %s", urlPrefix)
	return found
}

// A platform embeds the portal of one of its customers (a tenant) in its
// own product, on another site: the customer adds an endpoint inside the
// frame, sends it a test event, sees it delivered and counted in the
// chart.
func TestPortalInAnIframeInBrowser(t *testing.T) {
	t.Parallel()
	b := newBrowser(t)
	e := newEnv(t, withWorkers)
	tenantID, _ := e.Tenant("acme")

	var received atomic.Int64
	endpoint := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if r.Header.Get("Webhook-Signature") != "" {
			received.Add(1)
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(endpoint.Close)

	// The platform's page is on 127.0.0.1; the portal on localhost, another
	// site, with the same api behind it.
	var portalURL atomic.Value
	platform := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, `<!doctype html><title>Acme dashboard</title><h1>Acme dashboard: webhooks</h1>
<iframe id="portal" src="%s" width="1200" height="1400" title="Webhooks"></iframe>`, html.EscapeString(portalURL.Load().(string)))
	}))
	t.Cleanup(platform.Close)
	status, out := e.call("PATCH", "/v1/tenants/"+tenantID.String(), systemtest.AdminToken, map[string]any{"portal": map[string]any{
		"name": "Acme", "accent_color": "#0b7a53", "frame_origins": []string{platform.URL}}})
	require.Equal(t, http.StatusOK, status, out)
	status, out = e.call("POST", "/v1/service-keys", systemtest.AdminToken, map[string]any{"name": "acme backend", "scopes": []string{"manage", "read"}})
	require.Equal(t, http.StatusCreated, status, out)
	status, out = e.call("POST", "/v1/tenants/"+tenantID.String()+"/portal-sessions", out["service_key"].(string), nil)
	require.Equal(t, http.StatusCreated, status, out)
	link, err := url.Parse(out["url"].(string))
	require.NoError(t, err)
	api, err := url.Parse(e.URL)
	require.NoError(t, err)
	link.Host = "localhost:" + api.Port()
	portalURL.Store(link.String())

	b.do(chromedp.Navigate(platform.URL), chromedp.WaitVisible(chromedp.CSS("#portal")))
	f := b.frame("http://localhost:" + api.Port() + "/portal/")
	f.do(chromedp.WaitVisible(chromedp.CSS("a.button.primary")))
	require.Equal(t, "Webhooks", f.text("main h1"), "the link signed the frame in")
	require.Equal(t, "Acme webhooks", f.text(".brand"))
	b.screenshot("30-portal-in-iframe")

	// Add an endpoint: its secret is shown once.
	f.do(chromedp.Click(chromedp.CSS("a.button.primary")), chromedp.WaitVisible(chromedp.CSS("#w-url")))
	f.do(chromedp.SendKeys(chromedp.CSS("#w-url"), endpoint.URL+"/hooks"),
		chromedp.SetValue(chromedp.CSS("#w-events"), "order.*"),
		chromedp.Click(chromedp.CSS(`form button[type="submit"].primary`)), chromedp.WaitVisible(chromedp.CSS("#secret")))
	require.True(t, strings.HasPrefix(f.text("#secret"), "whsec_"))
	b.screenshot("31-portal-endpoint-added")
	require.Equal(t, 1, e.Count(`SELECT count(*) FROM webhooks WHERE tenant_id = $1 AND url = $2`, tenantID, endpoint.URL+"/hooks"))

	// Send a test event and see it delivered, in the list and the chart.
	f.do(chromedp.Click(chromedp.CSS("#secret-h ~ p a")), chromedp.WaitVisible(chromedp.CSS("#manage-h")))
	f.do(chromedp.Click(chromedp.CSS(`form[action$="/test"] button`)), chromedp.WaitVisible(chromedp.CSS(".notice")))
	testwait.Eventually(t, 30*time.Second, func() bool { return received.Load() == 1 }, "the signed test event at the endpoint")
	testwait.Eventually(t, 30*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(f.ctx, 5*time.Second)
		defer cancel()
		// The history form's Clear link is the page itself: following it
		// reloads the page.
		if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`form[method="get"].filters a`)),
			chromedp.WaitVisible(chromedp.CSS("table.deliveries"))); err != nil {
			return false
		}
		s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("table.deliveries tbody td:nth-child(5) .badge")))
		return err == nil && strings.TrimSpace(s) == "succeeded"
	}, "the test event's delivery to show succeeded")
	require.Equal(t, "hookline.test", f.text("table.deliveries tbody td:nth-child(2) code"))
	// Charts are drawn again at most every few seconds (chartTTL).
	var desc string
	testwait.Eventually(t, 30*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(f.ctx, 5*time.Second)
		defer cancel()
		if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`form[method="get"].filters a`)),
			chromedp.WaitVisible(chromedp.CSS("section.charts"))); err != nil {
			return false
		}
		s, err := chromedp.Run(ctx, chromedp.TextContent(chromedp.CSS(`section.charts svg desc`)))
		desc = s
		return err == nil && strings.Contains(s, "succeeded: 1 in all")
	}, "the chart to count the delivery (last %q)", &desc)
	b.screenshot("32-portal-test-delivered")

	// The portal offers nothing of the operator's.
	links := f.text("nav")
	require.NotContains(t, links, "Audit")
	require.NotContains(t, links, "API keys")
}
