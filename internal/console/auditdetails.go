package console

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// An audit row's details are a JSON object written by the action that
// recorded it. The audit page spells them out as key/value pairs, so that
// an operator reads "webhook_id" and "via" rather than braces and quotes;
// the REST API (GET /v1/audit) keeps the JSON.

// detail is one key/value pair of an audit row's details.
type detail struct {
	Key, Value string
	// Full is the whole value when Value is shortened.
	Full string
}

const (
	// maxDetails is how many pairs a row shows; a last one counts the
	// rest.
	maxDetails = 12
	// maxDetailLen is how many characters of a value a row shows, and
	// maxDetailFull how many its tooltip holds.
	maxDetailLen  = 80
	maxDetailFull = 1000
)

// flattenDetails spells out details (a JSON object) as key/value pairs,
// keys sorted: nested objects as a.b, lists of plain values joined, lists
// of objects by index (a.0.b), null and empty values as "none".
func flattenDetails(raw json.RawMessage) []detail {
	if len(raw) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return []detail{shorten("details", string(raw))}
	}
	var out []detail
	flatten("", v, &out)
	if len(out) > maxDetails {
		more := len(out) - maxDetails + 1
		out = append(out[:maxDetails-1], detail{Key: "…", Value: strconv.Itoa(more) + " more"})
	}
	return out
}

func flatten(key string, v any, out *[]detail) {
	switch t := v.(type) {
	case map[string]any:
		if len(t) == 0 {
			if key != "" {
				*out = append(*out, shorten(key, "none"))
			}
			return
		}
		names := make([]string, 0, len(t))
		for k := range t {
			names = append(names, k)
		}
		slices.Sort(names)
		for _, k := range names {
			flatten(joinKey(key, k), t[k], out)
		}
	case []any:
		if !slices.ContainsFunc(t, isNested) {
			parts := make([]string, len(t))
			for i, e := range t {
				parts[i] = plain(e)
			}
			*out = append(*out, shorten(orValue(key), orNone(strings.Join(parts, ", "))))
			return
		}
		for i, e := range t {
			flatten(joinKey(key, strconv.Itoa(i)), e, out)
		}
	default:
		*out = append(*out, shorten(orValue(key), plain(v)))
	}
}

func isNested(v any) bool {
	switch v.(type) {
	case map[string]any, []any:
		return true
	}
	return false
}

func joinKey(prefix, k string) string {
	if prefix == "" {
		return k
	}
	return prefix + "." + k
}

func orValue(key string) string {
	if key == "" {
		return "value"
	}
	return key
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// plain is a JSON scalar as text: strings unquoted, null as "none".
func plain(v any) string {
	switch t := v.(type) {
	case nil:
		return "none"
	case string:
		return orNone(t)
	case json.Number:
		return t.String()
	case bool:
		return strconv.FormatBool(t)
	}
	return fmt.Sprint(v)
}

// shorten makes a pair whose value fits a table cell, keeping the whole
// value (bounded) for its tooltip.
func shorten(key, value string) detail {
	d := detail{Key: truncate(60, key), Value: truncate(maxDetailLen, value)}
	if utf8.RuneCountInString(value) > maxDetailLen {
		d.Full = truncate(maxDetailFull, value)
	}
	return d
}
