package console

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gin-gonic/gin"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static/console.css
var stylesheet []byte

// stylesheetVersion busts caches when the stylesheet changes.
var stylesheetVersion = func() string {
	sum := sha256.Sum256(stylesheet)
	return hex.EncodeToString(sum[:6])
}()

func serveStylesheet(c *gin.Context) {
	c.Header("Cache-Control", "public, max-age=86400")
	c.Data(http.StatusOK, "text/css; charset=utf-8", stylesheet)
}

// pages are the parsed templates, one per page, each with the layout.
type pages map[string]*template.Template

var pageNames = []string{"signin", "error", "webhooks", "webhook", "delivery", "dlq", "audit", "webhookform", "secret",
	"event", "search", "apikeys"}

func parsePages(funcs template.FuncMap) pages {
	layout := template.Must(template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html"))
	p := pages{}
	for _, name := range pageNames {
		t := template.Must(template.Must(layout.Clone()).ParseFS(templateFS, "templates/"+name+".html"))
		p[name] = t
	}
	return p
}

// base is what the layout needs; every page's data embeds it.
type base struct {
	Title string
	// Nav names the current section: webhooks, dlq, search, api-keys or
	// audit.
	Nav     string
	CSRF    string
	Session *Session
	Notice  string
	Error   string
	// Refresh, when positive, reloads the page every so many seconds
	// (a batch or a delivery in progress).
	Refresh    int
	CSSVersion string
	// Root is where the pages live: /console, or /portal in the portal.
	Root   string
	Portal bool
}

func (b *base) layout() *base { return b }

type page interface{ layout() *base }

// render writes page name with data, filling the layout's session fields.
func (c *Console) render(ctx *gin.Context, status int, name string, data page) {
	b := data.layout()
	b.CSSVersion = stylesheetVersion
	b.Root = root(ctx)
	b.Portal = b.Root == portalRoot
	if ctx.Request.Method != http.MethodGet {
		// A reload would repeat the post as a GET of its action URL.
		b.Refresh = 0
	}
	if v, ok := ctx.Get(sessionCtx); ok {
		s := v.(Session)
		b.Session = &s
		b.CSRF = c.csrfToken(s)
	}
	var buf bytes.Buffer
	if err := c.pages[name].ExecuteTemplate(&buf, "layout", data); err != nil {
		c.log.Error("console page failed to render", "page", name, "error", err)
		ctx.String(http.StatusInternalServerError, "the page could not be shown; the error has been logged")
		return
	}
	ctx.Data(status, "text/html; charset=utf-8", buf.Bytes())
}

type errorData struct {
	base
	Status int
}

// renderError answers status with a page that says msg.
func (c *Console) renderError(ctx *gin.Context, status int, msg string) {
	d := errorData{Status: status}
	d.Title, d.Error = http.StatusText(status), msg
	c.render(ctx, status, "error", &d)
	ctx.Abort()
}

func (c *Console) notFound(ctx *gin.Context) {
	c.renderError(ctx, http.StatusNotFound, "There is no such page, or it belongs to another tenant.")
}

// fail answers an unexpected error: logged, never shown.
func (c *Console) fail(ctx *gin.Context, err error) {
	c.log.Error("console request failed", "method", ctx.Request.Method, "route", ctx.FullPath(), "error", err)
	c.renderError(ctx, http.StatusInternalServerError, "Something went wrong on our side; it has been logged. Try again in a moment.")
}

func (c *Console) funcs() template.FuncMap {
	return template.FuncMap{
		"ago":      c.ago,
		"utc":      formatUTC,
		"truncate": truncate,
		"prettyJSON": func(raw []byte) string {
			var buf bytes.Buffer
			if err := json.Indent(&buf, raw, "", "  "); err != nil {
				return string(raw)
			}
			return buf.String()
		},
		"compactJSON": func(raw []byte) string {
			var buf bytes.Buffer
			if err := json.Compact(&buf, raw); err != nil {
				return string(raw)
			}
			return buf.String()
		},
		"percent": func(part, whole int) string {
			if whole == 0 {
				return "–"
			}
			return fmt.Sprintf("%.1f %%", 100*float64(part)/float64(whole))
		},
		"statusClass": statusClass,
		"rateClass": func(part, whole int) string {
			switch {
			case whole == 0:
				return "muted"
			case part*100 >= whole*99:
				return "good"
			case part*100 >= whole*90:
				return "fair"
			}
			return "poor"
		},
		"ms": func(v *float64) string {
			if v == nil {
				return "–"
			}
			return fmt.Sprintf("%.0f ms", *v)
		},
		"codeClass": func(code *int) string {
			if code != nil && *code >= 200 && *code < 300 {
				return "ok"
			}
			return "bad"
		},
		"deref": func(p any) any {
			switch v := p.(type) {
			case *int:
				if v != nil {
					return *v
				}
			case *string:
				if v != nil {
					return *v
				}
			}
			return ""
		},
		"dateInput": func(t *time.Time) string {
			if t == nil {
				return ""
			}
			return t.UTC().Format("2006-01-02T15:04")
		},
		"last": func(i, n int) bool { return i == n-1 },
		"contains": func(list []string, s string) bool {
			for _, v := range list {
				if v == s {
					return true
				}
			}
			return false
		},
	}
}

// ago says how long before now t was, briefly.
func (c *Console) ago(t any) string {
	var tt time.Time
	switch v := t.(type) {
	case time.Time:
		tt = v
	case *time.Time:
		if v == nil {
			return "never"
		}
		tt = *v
	default:
		return ""
	}
	d := c.now().Sub(tt)
	switch {
	case d < 0:
		return "in " + span(-d)
	case d < 5*time.Second:
		return "just now"
	}
	return span(d) + " ago"
}

func span(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%d s", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%d min", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%d h", int(d.Hours()))
	}
	return fmt.Sprintf("%d d", int(d.Hours()/24))
}

func formatUTC(t any) string {
	switch v := t.(type) {
	case time.Time:
		return v.UTC().Format("2006-01-02 15:04:05 UTC")
	case *time.Time:
		if v != nil {
			return v.UTC().Format("2006-01-02 15:04:05 UTC")
		}
	}
	return ""
}

// truncate shortens s to n characters, with an ellipsis.
func truncate(n int, s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// statusClass is the badge colour of a delivery, batch or circuit state.
func statusClass(state any) string {
	switch fmt.Sprint(state) {
	case "succeeded", "completed", "closed":
		return "ok"
	case "exhausted", "failed", "open":
		return "bad"
	case "retrying", "half_open", "running":
		return "warn"
	}
	return "neutral"
}
