package console_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// An operator pastes an idempotency key from a support ticket into the
// search box, reads the event and its deliveries, finds another by its id,
// follows one and comes
// back; then creates an API key, copies it from the page that shows it
// once, and reads who did what in the audit log: a real Chromium, so that
// the pages work under the console's content security policy.
func TestSearchAndKeysInBrowser(t *testing.T) {
	t.Parallel()
	b := newBrowser(t)
	e := newEnv(t)
	_, key := e.Tenant("acme")
	e.webhook(key, "http://127.0.0.1:1/hooks/orders", nil)
	e.webhook(key, "http://127.0.0.1:1/hooks/analytics", nil)
	ev, deliveries := e.publish(key, "order-1001")

	b.do(chromedp.Navigate(e.URL + "/console/sign-in"))
	b.do(chromedp.SendKeys(chromedp.CSS("#api_key"), key), chromedp.Click(chromedp.CSS(`button[type="submit"].primary`)),
		chromedp.WaitVisible(chromedp.CSS("table")))

	b.do(chromedp.Click(chromedp.CSS(`nav a[href="/console/search"]`)), chromedp.WaitVisible(chromedp.CSS("#q")))
	b.do(chromedp.SendKeys(chromedp.CSS("#q"), "no-such-key"), chromedp.Click(chromedp.CSS(`form[role="search"] button`)))
	b.waitLocation("q=no-such-key", 10*time.Second)
	require.Contains(t, b.text(".alert"), "Nothing found for no-such-key")
	b.screenshot("21-search-missed")
	b.do(chromedp.SetValue(chromedp.CSS("#q"), "order-1001"), chromedp.Click(chromedp.CSS(`form[role="search"] button`)))
	b.waitLocation("/console/events/"+ev.String(), 10*time.Second)
	b.do(chromedp.WaitVisible(chromedp.CSS("#deliveries-h")))
	require.Equal(t, "order-1001", b.text(".facts dd:nth-of-type(5)"))
	require.Contains(t, b.text("pre.json"), `"amount": 42`)
	b.screenshot("22-event")

	// A delivery id from the endpoint's logs finds the delivery.
	b.do(chromedp.Click(chromedp.CSS(`nav a[href="/console/search"]`)), chromedp.WaitVisible(chromedp.CSS("#q")))
	b.do(chromedp.SetValue(chromedp.CSS("#q"), deliveries[1].String()), chromedp.Click(chromedp.CSS(`form[role="search"] button`)))
	b.waitLocation("/console/deliveries/"+deliveries[1].String(), 10*time.Second)
	b.do(chromedp.WaitVisible(chromedp.CSS("#attempts-h")))
	b.do(chromedp.Navigate(e.URL+"/console/events/"+ev.String()), chromedp.WaitVisible(chromedp.CSS("#deliveries-h")))

	b.do(chromedp.Click(chromedp.CSS(`a[href="/console/deliveries/`+deliveries[0].String()+`"]`)), chromedp.WaitVisible(chromedp.CSS("#attempts-h")))
	b.do(chromedp.Click(chromedp.CSS(`.facts a[href="/console/events/`+ev.String()+`"]`)), chromedp.WaitVisible(chromedp.CSS("#deliveries-h")))
	require.Contains(t, b.location(), "/console/events/"+ev.String())

	b.do(chromedp.Click(chromedp.CSS(`nav a[href="/console/api-keys"]`)), chromedp.WaitVisible(chromedp.CSS("#k-name")))
	b.do(chromedp.SetValue(chromedp.CSS("#k-name"), "ci deploy"), chromedp.Click(chromedp.CSS(`form[action="/console/api-keys"] button`)),
		chromedp.WaitVisible(chromedp.CSS("#new-key")))
	secret := b.text("#new-key")
	require.True(t, strings.HasPrefix(secret, "hk_"), secret)
	status, _ := e.Call("GET", "/v1/webhooks", secret, nil)
	require.Equal(t, http.StatusOK, status, "the key copied from the page works")
	b.screenshot("23-api-key-created")

	b.do(chromedp.Navigate(e.URL+"/console/audit"), chromedp.WaitVisible(chromedp.CSS("dl.kv")))
	require.Contains(t, b.text("table tbody"), "API key default (hk_")
	b.screenshot("24-audit")

	b.do(chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2), chromedp.EmulateMobile),
		chromedp.Navigate(e.URL+"/console/events/"+ev.String()), chromedp.WaitVisible(chromedp.CSS("#deliveries-h")))
	b.screenshot("25-event-phone")
	b.do(chromedp.Navigate(e.URL+"/console/audit"), chromedp.WaitVisible(chromedp.CSS("dl.kv")))
	b.viewportShot("26-audit-phone")
}
