package fielderr

import (
	"encoding/json"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Postgres refuses some text that Go and JSON accept, and a refusal at the
// insert is a 500 (and, on the publish path, a failed group commit that
// every event of the batch pays for). Text and JSONText find that text
// while it can still be answered as a refusal of the field:
//
//   - invalid UTF-8: refused by every text type (json and jsonb included);
//   - NUL: refused by text; the escape \u0000 is refused by jsonb;
//   - an unpaired UTF-16 surrogate escape (\ud800 alone): refused by
//     jsonb, and decoded by Go as U+FFFD, so not stored as it was sent.

const (
	msgUTF8      = "must be valid UTF-8"
	msgNUL       = "must not contain NUL (\\u0000)"
	msgSurrogate = "must not contain an unpaired UTF-16 surrogate escape (\\ud800-\\udfff)"
	msgKey       = "has a key that is not valid UTF-8 or holds NUL or an unpaired surrogate escape"
)

// Text returns an *Error when s cannot be stored in a text column: it is
// not valid UTF-8 or holds NUL.
func Text(field, s string) *Error {
	switch {
	case !utf8.ValidString(s):
		return New(field, msgUTF8)
	case strings.IndexByte(s, 0) >= 0:
		return New(field, msgNUL)
	}
	return nil
}

// JSONText returns an *Error naming the first string of the JSON text raw
// (a member name or a value) that cannot be stored as text or in a jsonb
// column, or nil. The error's field is field followed by the string's path
// ("metadata.tags[2]"); a bad member name is reported as its object's
// path. raw must be valid JSON: the caller has decoded it already.
func JSONText(field string, raw []byte) *Error {
	w := walker{raw: raw}
	for w.i < len(raw) {
		if err := w.step(); err != nil {
			return New(joinPath(field, w.path(err.key)), "%s", err.msg)
		}
	}
	return nil
}

// walker scans valid JSON text, keeping the path of the value it is in.
type walker struct {
	raw   []byte
	i     int
	stack []frame
}

// frame is an open object (with the member name last read, as raw JSON
// text) or array (with the index of the current element).
type frame struct {
	object  bool
	wantKey bool
	key     []byte
	index   int
}

type textErr struct {
	msg string
	key bool // the member name is bad, not the value
}

func (w *walker) step() *textErr {
	c := w.raw[w.i]
	w.i++
	switch c {
	case '{':
		w.stack = append(w.stack, frame{object: true, wantKey: true})
	case '[':
		w.stack = append(w.stack, frame{})
	case '}', ']':
		if len(w.stack) > 0 {
			w.stack = w.stack[:len(w.stack)-1]
		}
	case ',':
		if top := w.top(); top != nil {
			top.index++
			top.wantKey = top.object
		}
	case '"':
		start := w.i - 1
		msg := w.str()
		if top := w.top(); top != nil && top.wantKey {
			top.key, top.wantKey = w.raw[start:min(w.i, len(w.raw))], false
			if msg != "" {
				return &textErr{msg: msgKey, key: true}
			}
			return nil
		}
		if msg != "" {
			return &textErr{msg: msg}
		}
	}
	return nil
}

func (w *walker) top() *frame {
	if len(w.stack) == 0 {
		return nil
	}
	return &w.stack[len(w.stack)-1]
}

// str reads a string whose opening quote has been read and says what is
// wrong with it, if anything.
func (w *walker) str() string {
	problem := ""
	note := func(msg string) {
		if problem == "" {
			problem = msg
		}
	}
	for w.i < len(w.raw) {
		c := w.raw[w.i]
		switch {
		case c == '"':
			w.i++
			return problem
		case c == '\\':
			note(w.escape())
		case c < utf8.RuneSelf:
			w.i++
		default:
			r, size := utf8.DecodeRune(w.raw[w.i:])
			if r == utf8.RuneError && size <= 1 {
				note(msgUTF8)
			}
			w.i += size
		}
	}
	return problem
}

// escape reads one escape sequence at w.i (the backslash) and says what
// is wrong with it: \u0000, or a surrogate without its other half.
func (w *walker) escape() string {
	if w.i+1 >= len(w.raw) || w.raw[w.i+1] != 'u' {
		w.i += 2
		return ""
	}
	r, ok := w.hex4(w.i + 2)
	w.i += 6
	switch {
	case !ok:
		return ""
	case r == 0:
		return msgNUL
	case r >= 0xdc00 && r <= 0xdfff:
		return msgSurrogate
	case r >= 0xd800 && r <= 0xdbff:
		if w.i+1 < len(w.raw) && w.raw[w.i] == '\\' && w.raw[w.i+1] == 'u' {
			if lo, ok := w.hex4(w.i + 2); ok && lo >= 0xdc00 && lo <= 0xdfff {
				w.i += 6
				return ""
			}
		}
		return msgSurrogate
	}
	return ""
}

func (w *walker) hex4(at int) (rune, bool) {
	if at+4 > len(w.raw) {
		return 0, false
	}
	n, err := strconv.ParseUint(string(w.raw[at:at+4]), 16, 32)
	return rune(n), err == nil //nolint:gosec // four hex digits: at most 0xFFFF
}

// path is the path of the current value; with key, of its object.
func (w *walker) path(key bool) string {
	var b strings.Builder
	frames := w.stack
	if key && len(frames) > 0 {
		frames = frames[:len(frames)-1]
	}
	for _, f := range frames {
		if f.object {
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			var name string
			if json.Unmarshal(f.key, &name) != nil {
				name = string(f.key)
			}
			b.WriteString(name)
		} else {
			b.WriteString("[" + strconv.Itoa(f.index) + "]")
		}
	}
	return b.String()
}

func joinPath(field, path string) string {
	switch {
	case field == "":
		return path
	case path == "" || path[0] == '[':
		return field + path
	}
	return field + "." + path
}
