package chart

import (
	"html"
	"html/template"
	"math"
	"strings"
	"unicode/utf8"
)

// writer writes SVG markup. Element and attribute names are the package's
// own constants; every attribute value and every text goes through esc,
// which is what makes the output safe to hand over as template.HTML.
type writer struct {
	b strings.Builder
}

// open writes a start tag; attrs are name, value pairs.
func (w *writer) open(name string, attrs ...string) {
	w.tag(name, attrs)
	w.b.WriteString(">")
}

// void writes an element without content.
func (w *writer) void(name string, attrs ...string) {
	w.tag(name, attrs)
	w.b.WriteString("/>")
}

func (w *writer) tag(name string, attrs []string) {
	w.b.WriteString("<" + name)
	for i := 0; i+1 < len(attrs); i += 2 {
		w.b.WriteString(" " + attrs[i] + `="` + esc(attrs[i+1]) + `"`)
	}
}

func (w *writer) close(name string) { w.b.WriteString("</" + name + ">") }

// element writes an element holding text.
func (w *writer) element(name, text string, attrs ...string) {
	w.open(name, attrs...)
	w.b.WriteString(esc(text))
	w.close(name)
}

func (w *writer) html() template.HTML {
	return template.HTML(w.b.String()) //nolint:gosec // G203: the writer escapes every value and text (esc)
}

// esc makes s safe as XML text or a quoted attribute value: valid UTF-8,
// without the characters XML forbids (control characters but tab and line
// breaks), and with &, <, >, ' and " escaped.
func esc(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.Map(func(r rune) rune {
		if r == '\t' || r == '\n' || r == '\r' || (r >= 0x20 && r != 0xFFFE && r != 0xFFFF) {
			return r
		}
		return -1
	}, s)
	return html.EscapeString(s)
}

// classes keeps the tokens of s that are safe and plain as CSS class
// names: letters, digits, '-' and '_'.
func classes(s string) string {
	var out []string
	for _, tok := range strings.Fields(s) {
		if !strings.ContainsFunc(tok, func(r rune) bool { return !plain(r) }) {
			out = append(out, tok)
		}
	}
	return strings.Join(out, " ")
}

func plain(r rune) bool {
	return r == '-' || r == '_' || '0' <= r && r <= '9' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z'
}

// num writes a coordinate: one decimal, none when it is zero.
func num(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		v = 0
	}
	return trimmed(v, 1)
}

// shorten cuts s to at most n runes, marking the cut.
func shorten(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}
