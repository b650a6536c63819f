package console_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/testwait"
)

const chromiumPath = "/usr/bin/chromium"

// browser is a headless Chromium tab driven through the DevTools protocol,
// which saves a screenshot of each page it is asked to.
type browser struct {
	t    *testing.T
	ctx  context.Context
	shot string
}

// newBrowser starts Debian's Chromium, or skips the test when it is not
// installed (fails instead with HOOKLINE_REQUIRE_BROWSER=1, as CI sets).
func newBrowser(t *testing.T) *browser {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		if os.Getenv("HOOKLINE_REQUIRE_BROWSER") == "1" {
			t.Fatalf("HOOKLINE_REQUIRE_BROWSER=1 but %s is missing (apt-get install -y chromium)", chromiumPath)
		}
		t.Skipf("%s is not installed (apt-get install -y chromium)", chromiumPath)
	}
	dir := os.Getenv("HOOKLINE_SCREENSHOTS")
	if dir == "" {
		dir = t.TempDir()
	}
	require.NoError(t, os.MkdirAll(dir, 0o755))
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chromiumPath),
		chromedp.Flag("headless", true),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	)
	ctx, cancel := chromedp.NewContext(alloc, chromedp.WithLogf(t.Logf))
	t.Cleanup(func() { cancel(); cancelAlloc() })
	// The first action starts the browser; it must not run under a timeout.
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate("about:blank")))
	t.Logf("screenshots in %s", dir)
	return &browser{t: t, ctx: ctx, shot: dir}
}

// do runs steps within a deadline.
func (b *browser) do(steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	require.NoError(b.t, chromedp.Do(ctx, steps...))
}

// text is the text of the first element sel matches.
func (b *browser) text(sel string) string {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
	require.NoError(b.t, err, sel)
	return strings.TrimSpace(s)
}

// waitText polls, within timeout, until the first element sel matches reads
// want; the page may reload itself meanwhile.
func (b *browser) waitText(sel, want string, timeout time.Duration) {
	b.t.Helper()
	var last string
	testwait.Eventually(b.t, timeout, func() bool {
		ctx, cancel := context.WithTimeout(b.ctx, time.Second)
		defer cancel()
		s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
		last = strings.TrimSpace(s)
		return err == nil && last == want
	}, "%s to read %q (last %q)", sel, want, &last)
}

// screenshot saves the whole page as name.png. A page that reloads itself
// can do so while the capture runs, which then never answers: the capture
// is tried again, within a minute in all.
func (b *browser) screenshot(name string) {
	b.t.Helper()
	var png []byte
	var last error
	testwait.Eventually(b.t, time.Minute, func() bool {
		ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
		defer cancel()
		png, last = chromedp.Run(ctx, chromedp.FullScreenshot(100))
		return last == nil
	}, "a screenshot of the page (last error %v)", &last)
	require.NoError(b.t, os.WriteFile(filepath.Join(b.shot, name+".png"), png, 0o644))
}

// waitLocation polls, within timeout, until the page's address contains
// part (a form's answer has loaded).
func (b *browser) waitLocation(part string, timeout time.Duration) {
	b.t.Helper()
	var last string
	testwait.Eventually(b.t, timeout, func() bool {
		ctx, cancel := context.WithTimeout(b.ctx, time.Second)
		defer cancel()
		loc, err := chromedp.Run(ctx, chromedp.Location())
		last = loc
		return err == nil && strings.Contains(loc, part)
	}, "the address to contain %q (last %q)", part, &last)
}

// viewportShot saves what the viewport shows as name.png.
func (b *browser) viewportShot(name string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	require.NoError(b.t, err)
	require.NoError(b.t, os.WriteFile(filepath.Join(b.shot, name+".png"), png, 0o644))
}

func (b *browser) location() string {
	b.t.Helper()
	loc, err := chromedp.Run(b.ctx, chromedp.Location())
	require.NoError(b.t, err)
	return loc
}

// An operator signs in, finds the exhausted delivery from the banner,
// retries it and sees it succeed, then retries a set of dead letters in a
// batch and watches it complete: a real Chromium against an api, workers
// and a dlq running in-process.
func TestConsoleInBrowser(t *testing.T) {
	t.Parallel()
	b := newBrowser(t)
	e := newEnv(t, withWorkers)
	tenantID, key := e.Tenant("acme")

	var failing atomic.Bool
	failing.Store(true)
	var received atomic.Int64
	endpoint := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		received.Add(1)
		if failing.Load() {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("X-Request-Id", "req-"+uuid.NewString()[:8])
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, `{"error": "orders database is in maintenance, try again later"}`)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(endpoint.Close)
	invoices := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(invoices.Close)

	orders := e.webhook(key, endpoint.URL+"/hooks/orders", map[string]any{"events": []string{"order.*"},
		"retry_config": map[string]any{"max_attempts": 3, "base_delay_ms": 100, "max_delay_ms": 200}})
	e.webhook(key, invoices.URL+"/hooks/invoices", map[string]any{"events": []string{"invoice.*"}})
	for i := 0; i < 3; i++ {
		status, body := e.call("POST", "/v1/events", key, map[string]any{"event_type": "invoice.paid",
			"data": map[string]any{"invoice": 1000 + i, "amount_cents": 4200}})
		require.Equal(t, http.StatusAccepted, status, body)
	}
	status, body := e.call("POST", "/v1/events", key, map[string]any{"event_type": "order.created", "source": "checkout",
		"data": map[string]any{"order_id": 42, "customer": "c_1729", "items": []map[string]any{{"sku": "TEA-01", "qty": 2}}, "total": "19.80"}})
	require.Equal(t, http.StatusAccepted, status, body)
	testwait.Eventually(t, 30*time.Second, func() bool {
		return e.Count(`SELECT count(*) FROM deliveries WHERE webhook_id = $1 AND status = 'exhausted' AND dead_lettered_at IS NOT NULL`, orders) == 1 &&
			e.Count(`SELECT count(*) FROM deliveries WHERE status = 'succeeded'`) == 3
	}, "the order delivery to be exhausted and the invoices delivered")
	failing.Store(false)

	// Sign in: the console sends the browser to sign-in first.
	b.do(chromedp.Navigate(e.URL + "/console/webhooks"))
	require.Contains(t, b.location(), "/console/sign-in?next=")
	b.screenshot("01-sign-in")
	b.do(chromedp.SendKeys(chromedp.CSS("#api_key"), key), chromedp.Click(chromedp.CSS(`button[type="submit"].primary`)),
		chromedp.WaitVisible(chromedp.CSS(".banner")))
	require.Equal(t, "1 delivery exhausted in the last 24 hours", b.text(".banner h2"))
	b.screenshot("02-webhooks")

	// From the banner to the webhook's exhausted deliveries, to the one.
	b.do(chromedp.Click(chromedp.CSS(".banner a")), chromedp.WaitVisible(chromedp.CSS("table.deliveries")))
	require.Contains(t, b.location(), "/console/webhooks/"+orders.String()+"?state=exhausted")
	require.Equal(t, "exhausted", b.text("table.deliveries tbody td:nth-child(5) .badge"))
	b.screenshot("03-webhook")
	b.do(chromedp.Click(chromedp.CSS("table.deliveries tbody tr td a")), chromedp.WaitVisible(chromedp.CSS("#attempts-h")))
	require.Equal(t, "exhausted", b.text(".meta .badge"))
	require.Contains(t, b.text("pre.json"), `"order_id": 42`)
	b.screenshot("04-delivery-exhausted")

	// Retry: the new delivery's page reloads itself until it succeeds.
	b.do(chromedp.Click(chromedp.CSS(`form[action$="/retry"] button`)), chromedp.WaitVisible(chromedp.CSS(".notice")))
	require.Contains(t, b.location(), "notice=retried")
	b.waitText(".meta .badge", "succeeded", 30*time.Second)
	require.Equal(t, 1, e.Count(`SELECT count(*) FROM deliveries WHERE webhook_id = $1 AND status = 'succeeded' AND retry_of IS NOT NULL`, orders))
	b.screenshot("05-delivery-retried")

	// A batch: eight more dead letters of the same webhook, retried at 4
	// per second from the DLQ page, which reloads itself until it ends.
	e.seed(tenantID, orders, 8, "order.updated", "exhausted")
	b.do(chromedp.Navigate(e.URL+"/console/dlq"), chromedp.WaitVisible(chromedp.CSS("#counts-h")))
	require.Equal(t, "8 waiting", b.text("#counts-h"))
	b.do(chromedp.Click(chromedp.CSS(`input[name="failure_category"][value="server_error"]`)),
		chromedp.Click(chromedp.CSS(`form.filters button[type="submit"]`)))
	b.waitLocation("failure_category=server_error", 10*time.Second)
	b.do(chromedp.WaitVisible(chromedp.CSS("#counts-h")))
	b.screenshot("06-dlq")
	b.do(chromedp.SetValue(chromedp.CSS("#b-rps"), "4"), chromedp.Click(chromedp.CSS(`form[action="/console/dlq/batches"] button`)),
		chromedp.WaitVisible(chromedp.CSS(".notice")))
	state := b.text(`tr[id^="batch-"] td:nth-child(3) .badge`)
	require.Contains(t, []string{"pending", "running", "completed"}, state)
	b.screenshot("07-dlq-batch-started")
	b.waitText(`tr[id^="batch-"] td:nth-child(3) .badge`, "completed", 60*time.Second)
	require.Equal(t, "8 succeeded · 0 failed", b.text(`tr[id^="batch-"] td:nth-child(5)`))
	require.Equal(t, "0 waiting", b.text("#counts-h"))
	b.screenshot("08-dlq-batch-completed")

	// Every action is in the audit log.
	b.do(chromedp.Navigate(e.URL+"/console/audit"), chromedp.WaitVisible(chromedp.CSS("table")))
	audit := b.text("table tbody")
	for _, action := range []string{"console.signed_in", "delivery.retried", "dlq.batch_retry_created"} {
		require.Contains(t, audit, action)
	}
	b.screenshot("09-audit")

	// The same pages on a phone.
	b.do(chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2), chromedp.EmulateMobile),
		chromedp.Navigate(e.URL+"/console/webhooks"), chromedp.WaitVisible(chromedp.CSS("table")))
	b.screenshot("10-webhooks-phone")
	b.do(chromedp.Navigate(e.URL+"/console/webhooks/"+orders.String()), chromedp.WaitVisible(chromedp.CSS("table.deliveries")))
	b.viewportShot("11-webhook-phone")
	b.do(chromedp.ScrollIntoView(chromedp.CSS("table.deliveries tbody tr:nth-child(8)")))
	b.viewportShot("12-webhook-history-phone")

	// Signing out ends the session in the browser.
	b.do(chromedp.Click(chromedp.CSS(`form[action="/console/sign-out"] button`)), chromedp.WaitVisible(chromedp.CSS("#api_key")))
	b.do(chromedp.Navigate(e.URL + "/console/dlq"))
	require.Contains(t, b.location(), "/console/sign-in")
	require.False(t, errors.Is(b.ctx.Err(), context.Canceled))
}
