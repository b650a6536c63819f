package fielderr_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/fielderr"
)

func TestText(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in, msg string
	}{
		{"", ""},
		{"café ✓ 😀", ""},
		{"caf\xe9", "must be valid UTF-8"},
		{"\xed\xa0\x80", "must be valid UTF-8"},
		{"a\x00b", "must not contain NUL"},
	}
	for _, tc := range cases {
		err := fielderr.Text("name", tc.in)
		if tc.msg == "" {
			require.Nil(t, err, "%q", tc.in)
			continue
		}
		require.NotNil(t, err, "%q", tc.in)
		require.Equal(t, "name", err.Field)
		require.Contains(t, err.Message, tc.msg, "%q", tc.in)
	}
}

func TestJSONText(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, in, field, msg string
	}{
		{"plain", `{"a":"b","c":[1,true,null,{"d":"e"}]}`, "", ""},
		{"escapes", `{"a":"\n\t\"\\\/\u00e9\u2028"}`, "", ""},
		{"surrogate pair", `{"a":"\ud83d\ude00"}`, "", ""},
		{"multibyte", `{"é":"😀"}`, "", ""},
		{"top-level string", "\"\xff\"", "m", "valid UTF-8"},
		{"invalid UTF-8", "{\"a\":\"caf\xe9\"}", "m.a", "valid UTF-8"},
		{"encoded surrogate", "{\"a\":\"\xed\xa0\x80\"}", "m.a", "valid UTF-8"},
		{"truncated rune", "{\"a\":\"\xe2\x82\"}", "m.a", "valid UTF-8"},
		{"NUL escape", `{"a":{"b":"x\u0000"}}`, "m.a.b", "NUL"},
		{"lone high", `{"a":["ok","\ud800"]}`, "m.a[1]", "surrogate"},
		{"lone low", `{"a":"\udfff"}`, "m.a", "surrogate"},
		{"high then non-low", `{"a":"\ud800\u0041"}`, "m.a", "surrogate"},
		{"high at end", `{"a":"x\uDBFF"}`, "m.a", "surrogate"},
		{"two highs", `{"a":"\ud800\ud800\udc00"}`, "m.a", "surrogate"},
		{"bad key", `{"ok":1,"x\u0000":2}`, "m", "key"},
		{"bad nested key", "{\"a\":{\"\xff\":1}}", "m.a", "key"},
		{"escaped key", `{"\u0041":{"b":"\u0000"}}`, "m.A.b", "NUL"},
		{"array path", `[[1],[2,"\u0000"]]`, "m[1][1]", "NUL"},
		{"after nested", `{"a":{"b":1},"c":"\u0000"}`, "m.c", "NUL"},
	}
	for _, tc := range cases {
		err := fielderr.JSONText("m", []byte(tc.in))
		if tc.msg == "" {
			require.Nil(t, err, tc.name)
			require.True(t, json.Valid([]byte(tc.in)), tc.name)
			continue
		}
		require.NotNil(t, err, tc.name)
		require.Equal(t, tc.field, err.Field, tc.name)
		require.Contains(t, err.Message, tc.msg, tc.name)
	}
	require.Equal(t, "a", fielderr.JSONText("", []byte(`{"a":"\u0000"}`)).Field, "no prefix")
}

// Deep nesting and truncated input neither recurse nor read past the end.
func TestJSONTextBounds(t *testing.T) {
	t.Parallel()
	deep := strings.Repeat("[", 100_000) + `"\u0000"` + strings.Repeat("]", 100_000)
	err := fielderr.JSONText("d", []byte(deep))
	require.NotNil(t, err)
	require.True(t, strings.HasPrefix(err.Field, "d[0][0]"))
	for _, in := range []string{`"`, `"\`, `"\u`, `"\u00`, `"\ud800\`, `"\ud800\u`, `{"`, `{"a`, "\"\xe2"} {
		require.NotPanics(t, func() { _ = fielderr.JSONText("x", []byte(in)) }, "%q", in)
	}
}
