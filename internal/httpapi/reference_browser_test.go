package httpapi

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/testwait"
)

const chromiumPath = "/usr/bin/chromium"

// newChromium starts Debian's Chromium headless and returns its tab, or
// skips the test when it is not installed (fails instead with
// HOOKLINE_REQUIRE_BROWSER=1, as CI sets), as the console's browser tests
// do.
func newChromium(t *testing.T) context.Context {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		if os.Getenv("HOOKLINE_REQUIRE_BROWSER") == "1" {
			t.Fatalf("HOOKLINE_REQUIRE_BROWSER=1 but %s is missing (apt-get install -y chromium)", chromiumPath)
		}
		t.Skipf("%s is not installed (apt-get install -y chromium)", chromiumPath)
	}
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
	return ctx
}

// pageRecord is what a page asked for, which of those requests the
// browser blocked before sending them, and what went wrong on the page.
type pageRecord struct {
	mu       sync.Mutex
	requests map[network.RequestID]string // id: URL
	blocked  map[network.RequestID]bool   // stopped by the Content-Security-Policy
	problems []string
}

func (p *pageRecord) lock(f func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f()
}

// recordPage notes every request the tab makes, whether the
// Content-Security-Policy blocked it, every uncaught exception, and every
// error or security message the browser logs (a CSP violation is one).
func recordPage(t *testing.T, ctx context.Context) *pageRecord {
	t.Helper()
	rec := &pageRecord{requests: map[network.RequestID]string{}, blocked: map[network.RequestID]bool{}}
	require.NoError(t, chromedp.Listen(ctx, func(ev any) {
		switch ev := ev.(type) {
		case *network.EventRequestWillBeSent:
			rec.lock(func() { rec.requests[ev.RequestID] = ev.Request.URL })
		case *network.EventLoadingFailed:
			if ev.BlockedReason == network.BlockedReasonCsp {
				rec.lock(func() { rec.blocked[ev.RequestID] = true })
			}
		case *runtime.EventExceptionThrown:
			what := ev.ExceptionDetails.Text
			if ex := ev.ExceptionDetails.Exception; ex != nil {
				what += " " + ex.Description
			}
			rec.lock(func() { rec.problems = append(rec.problems, "exception: "+what) })
		case *log.EventEntryAdded:
			if ev.Entry.Level == log.EntryLevelError || ev.Entry.Source == log.EntrySourceSecurity {
				rec.lock(func() { rec.problems = append(rec.problems, string(ev.Entry.Source)+": "+ev.Entry.Text) })
			}
		}
	}))
	return rec
}

// renderedOperation is an operation as the reference page shows it.
type renderedOperation struct {
	ID    string `json:"id"`
	Title string `json:"title"`
}

// renderedOperations lists the operations Redoc drew: each is a section
// whose id ends in /operation/<operationId>, titled by its summary.
const renderedOperations = `JSON.stringify(Array.from(document.querySelectorAll('[data-section-id*="/operation/"]')).map(e => ({
  id: e.getAttribute('data-section-id'),
  title: (e.querySelector('h2') || {textContent: ''}).textContent.trim()
})))`

// redocBadgeBlocked is what Chromium logs when the page's
// Content-Security-Policy stops the one load of another origin that Redoc
// 2.5.4 makes on its own, with no option to turn it off: the logo of the
// "API docs by Redocly" link under the side menu. Without the image the
// link shows its text alone.
const redocBadgeBlocked = "Loading the image 'https://cdn.redoc.ly/redoc/logo-mini.svg' violates the following Content Security Policy directive"

// A real Chromium opens /docs and finds every operation of the document
// drawn on the page under its summary. No request left for another origin,
// the page threw nothing and logged no error, and the only load its
// Content-Security-Policy had to stop was Redoc's badge logo.
func TestReferenceInBrowser(t *testing.T) {
	t.Parallel()
	ctx := newChromium(t)
	e := newAPI(t)
	rec := recordPage(t, ctx)

	var doc struct {
		Paths map[string]map[string]struct {
			OperationID string `json:"operationId"`
			Summary     string `json:"summary"`
		} `json:"paths"`
	}
	require.NoError(t, json.Unmarshal(openAPIDoc, &doc))
	want := map[string]string{} // operationId: summary
	for _, methods := range doc.Paths {
		for _, op := range methods {
			want[op.OperationID] = op.Summary
		}
	}

	navigate, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	require.NoError(t, chromedp.Do(navigate, chromedp.Navigate(e.http.URL+"/docs")))

	var shown map[string]string
	var missing []string
	testwait.Eventually(t, 60*time.Second, func() bool {
		step, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		raw, err := chromedp.Run(step, chromedp.Evaluate[string](renderedOperations))
		if err != nil {
			return false
		}
		var ops []renderedOperation
		if json.Unmarshal([]byte(raw), &ops) != nil {
			return false
		}
		shown = map[string]string{}
		for _, op := range ops {
			shown[op.ID[strings.LastIndex(op.ID, "/operation/")+len("/operation/"):]] = op.Title
		}
		missing = missing[:0]
		for id, summary := range want {
			if !strings.Contains(shown[id], summary) {
				missing = append(missing, id)
			}
		}
		return len(missing) == 0
	}, "every operation on the page (missing %v)", &missing)
	require.Len(t, shown, len(want), "the page shows operations the document does not have: %v", shown)

	shot, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	require.NoError(t, err)
	dir := os.Getenv("HOOKLINE_SCREENSHOTS")
	if dir == "" {
		dir = t.TempDir()
	}
	require.NoError(t, os.MkdirAll(dir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "reference.png"), shot, 0o644))

	// Requests to another origin: each must have been blocked by the CSP
	// before it was sent (the browser reports the block just after the
	// request), and the CSP must have had nothing to stop but the badge logo.
	origin := e.http.URL + "/"
	sameOrigin := func(u string) bool {
		return strings.HasPrefix(u, origin) || strings.HasPrefix(u, "data:") || strings.HasPrefix(u, "blob:")
	}
	var requested, sent []string
	testwait.Eventually(t, 10*time.Second, func() bool {
		requested, sent = nil, nil
		rec.lock(func() {
			for id, u := range rec.requests {
				requested = append(requested, u)
				if !sameOrigin(u) && !rec.blocked[id] {
					sent = append(sent, u)
				}
			}
		})
		return len(sent) == 0
	}, "no request to another origin but blocked ones (sent: %v)", &sent)
	rec.lock(func() {
		for _, p := range rec.problems {
			if !strings.HasPrefix(p, "security: "+redocBadgeBlocked) {
				t.Errorf("the page reported: %s", p)
			}
		}
	})
	for _, path := range []string{"/docs", "/docs/redoc.standalone.js", "/docs/reference.js", "/openapi.json"} {
		require.Contains(t, requested, e.http.URL+path)
	}
}
