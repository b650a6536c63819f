package webhook

import (
	"fmt"
	"path"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestMatch(t *testing.T) {
	t.Parallel()

	tests := []struct {
		pattern, event string
		want           bool
	}{
		// exact
		{"order.created", "order.created", true},
		{"order.created", "order.updated", false},
		{"order.created", "order.created.v2", false},
		{"order.created", "order", false},
		{"order.created", "Order.Created", false}, // case matters
		{"order", "order.created", false},
		// everything
		{"*", "order.created", true},
		{"*", "a", true},
		{"*", "order.item.added", true},
		{"**", "order.created", true},
		// prefix
		{"order.*", "order.created", true},
		{"order.*", "order.item.added", true}, // * crosses dots
		{"order.*", "order", false},
		{"order.*", "orders.created", false},
		{"order.*", "xorder.created", false},
		{"order*", "order", true},
		{"order*", "orders.created", true},
		// suffix
		{"*.created", "order.created", true},
		{"*.created", "a.b.created", true},
		{"*.created", "created", false},
		{"*.created", "order.created.v2", false},
		{"*.created", "order.recreated", false},
		// infix and several stars
		{"order.*.added", "order.item.added", true},
		{"order.*.added", "order.a.b.added", true},
		{"order.*.added", "order.added", false},
		{"a*b*c", "abc", true},
		{"a*b*c", "aXbYc", true},
		{"a*b*c", "abbbc", true},
		{"a*b*c", "acbc", true},
		{"a*b*c", "a.b.c", true},
		{"a*b*c", "acb", false},
		{"a*b*c", "abcd", false},
		{"a*b*c", "bc", false},
		{"*a*", "banana", true},
		{"*x*", "banana", false},
		{"*na", "banana", true},
		{"*an", "banana", false},
		{"b*a*a*a", "banana", true},
		{"b*a*a*a*a", "banana", false},
		// backtracking past a partial match
		{"*aab", "aaab", true},
		{"*abab", "abaabab", true},
		{"a*ab", "aab", true},
		{"a*ab", "ab", false},
		// empty segments: a star matches an empty run, so these hold; such
		// event types are refused by ValidateEventType anyway.
		{"order.*", "order.", true},
		{"*.created", ".created", true},
		{"a.*.c", "a..c", true},
		{"a..c", "a.c", false},
		// empty pattern or event
		{"", "", true},
		{"*", "", true},
		{"", "order.created", false},
		{"order.*", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.pattern+"~"+tt.event, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, Match(tt.pattern, tt.event))
		})
	}
}

// TestMatchAgreesWithPathMatch compares Match with path.Match, whose * means
// the same thing for names without '/', '?', '[' and '\\' (event types cannot
// contain them), over every short pattern and name of a small alphabet.
func TestMatchAgreesWithPathMatch(t *testing.T) {
	t.Parallel()

	patterns := words("ab.*", 5)
	names := words("ab.", 5)
	checked := 0
	for _, p := range patterns {
		for _, n := range names {
			want, err := path.Match(p, n)
			require.NoError(t, err)
			if got := Match(p, n); got != want {
				require.Failf(t, "Match disagrees with path.Match", "Match(%q, %q) = %v, want %v", p, n, got, want)
			}
			checked++
		}
	}
	require.Greater(t, checked, 400_000)
}

// words returns every string over alphabet of length 0 to maxLen.
func words(alphabet string, maxLen int) []string {
	out := []string{""}
	level := []string{""}
	for l := 1; l <= maxLen; l++ {
		next := make([]string, 0, len(level)*len(alphabet))
		for _, w := range level {
			for _, c := range alphabet {
				next = append(next, w+string(c))
			}
		}
		out = append(out, next...)
		level = next
	}
	return out
}

func TestMatchAny(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name    string
		filters []string
		event   string
		want    bool
	}{
		{"none", nil, "order.created", false},
		{"first", []string{"order.*", "user.created"}, "order.paid", true},
		{"second", []string{"order.*", "user.created"}, "user.created", true},
		{"neither", []string{"order.*", "user.created"}, "user.deleted", false},
		{"catch all", []string{"x", "*"}, "anything", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, MatchAny(tt.filters, tt.event))
		})
	}
}

func TestValidateFilters(t *testing.T) {
	t.Parallel()

	many := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("event.n%d", i)
		}
		return out
	}
	tests := []struct {
		name    string
		in      []string
		want    []string
		wantErr string
	}{
		{name: "one exact", in: []string{"order.created"}, want: []string{"order.created"}},
		{name: "wildcards", in: []string{"*", "order.*", "*.created", "a*b*c"}, want: []string{"*", "order.*", "*.created", "a*b*c"}},
		{name: "every allowed character", in: []string{"Az09._-:*"}, want: []string{"Az09._-:*"}},
		{name: "duplicates removed, order kept", in: []string{"b", "a", "b", "c", "a"}, want: []string{"b", "a", "c"}},
		{name: "case is not folded", in: []string{"A", "a"}, want: []string{"A", "a"}},
		{name: "200 characters", in: []string{strings.Repeat("e", 200)}, want: []string{strings.Repeat("e", 200)}},
		{name: "100 filters", in: many(100), want: many(100)},
		{name: "100 filters with duplicates", in: append(many(99), "event.n7"), want: many(99)},

		{name: "nil", in: nil, wantErr: "at least one"},
		{name: "empty list", in: []string{}, wantErr: "at least one"},
		{name: "101 filters", in: many(101), wantErr: "at most 100 filters, got 101"},
		{name: "101 duplicates", in: make([]string, 101), wantErr: "at most 100"},
		{name: "empty filter", in: []string{"a", ""}, wantErr: "[1]: must not be empty"},
		{name: "too long", in: []string{strings.Repeat("e", 201)}, wantErr: "[0]: must be at most 200"},
		{name: "empty segment", in: []string{"a..b"}, wantErr: "empty segment"},
		{name: "leading dot", in: []string{".order"}, wantErr: "empty segment"},
		{name: "trailing dot", in: []string{"order."}, wantErr: "empty segment"},
		{name: "only a dot", in: []string{"."}, wantErr: "empty segment"},
		{name: "space", in: []string{"order created"}, wantErr: `contains ' '`},
		{name: "slash", in: []string{"order/created"}, wantErr: `contains '/'`},
		{name: "question mark", in: []string{"order.?"}, wantErr: `contains '?'`},
		{name: "bracket", in: []string{"order.[ab]"}, wantErr: `contains '['`},
		{name: "non-ascii", in: []string{"commande.créée"}, wantErr: `contains 'é'`},
		{name: "newline", in: []string{"a\nb"}, wantErr: `contains '\n'`},
		{name: "bad one after good ones", in: []string{"ok", "ok.*", "no!"}, wantErr: "[2]:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := validateFilters(tt.in)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				require.Nil(t, got)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

func TestValidateEventType(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name    string
		wantErr string
	}{
		{"order.created", ""},
		{"v1:user_profile-updated", ""},
		{"*", "contains '*'"},
		{"order.*", "contains '*'"},
		{"", "must not be empty"},
		{"a..b", "empty segment"},
		{strings.Repeat("x", 201), "at most 200"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := ValidateEventType(tt.name)
			if tt.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tt.wantErr)
		})
	}
}
