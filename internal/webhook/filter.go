package webhook

import (
	"fmt"
	"strings"
)

// Event filter syntax: a filter is an event type name made of letters,
// digits and the characters . _ - : plus the wildcard *, which matches any
// run of characters (dots included). "*" alone matches every event;
// "order.*" matches "order.created" and "order.item.added" but not "order".

const (
	maxFilters      = 100
	maxEventTypeLen = 200
)

// FilterSQL is the SQL form of MatchAny: a condition true when any filter
// in the text[] column eventsCol matches the event type expression
// eventType. Filters only hold letters, digits, . - : _ and *, so escaping _
// and turning * into % gives the same glob as Match.
func FilterSQL(eventsCol, eventType string) string {
	return fmt.Sprintf(`EXISTS (SELECT 1 FROM unnest(%s) AS f WHERE %s LIKE replace(replace(f, '_', '\_'), '*', '%%'))`,
		eventsCol, eventType)
}

// Match reports whether eventType matches the filter pattern.
func Match(pattern, eventType string) bool {
	// Iterative glob with backtracking to the last star: linear in practice
	// for the short names involved.
	p, s := 0, 0
	star, mark := -1, 0
	for s < len(eventType) {
		switch {
		case p < len(pattern) && pattern[p] == '*':
			star, mark = p, s
			p++
		case p < len(pattern) && pattern[p] == eventType[s]:
			p++
			s++
		case star >= 0:
			p = star + 1
			mark++
			s = mark
		default:
			return false
		}
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}

// MatchAny reports whether eventType matches any of the filters.
func MatchAny(filters []string, eventType string) bool {
	for _, f := range filters {
		if Match(f, eventType) {
			return true
		}
	}
	return false
}

// ValidateEventType checks a concrete event type name (no wildcard).
func ValidateEventType(name string) error {
	return checkName(name, false)
}

// validateFilters checks a list of filters and returns it without duplicates.
func validateFilters(filters []string) ([]string, error) {
	if len(filters) == 0 {
		return nil, fmt.Errorf("must list at least one event type or pattern")
	}
	if len(filters) > maxFilters {
		return nil, fmt.Errorf("at most %d filters, got %d", maxFilters, len(filters))
	}
	seen := make(map[string]bool, len(filters))
	out := make([]string, 0, len(filters))
	for i, f := range filters {
		if err := checkName(f, true); err != nil {
			return nil, fmt.Errorf("[%d]: %w", i, err)
		}
		if !seen[f] {
			seen[f] = true
			out = append(out, f)
		}
	}
	return out, nil
}

func checkName(name string, wildcard bool) error {
	if name == "" {
		return fmt.Errorf("must not be empty")
	}
	if len(name) > maxEventTypeLen {
		return fmt.Errorf("must be at most %d characters", maxEventTypeLen)
	}
	if strings.HasPrefix(name, ".") || strings.HasSuffix(name, ".") || strings.Contains(name, "..") {
		return fmt.Errorf("%q has an empty segment", name)
	}
	for _, r := range name {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		case r == '.', r == '_', r == '-', r == ':':
		case r == '*' && wildcard:
		default:
			return fmt.Errorf("%q contains %q; allowed are letters, digits and . _ - :%s", name, r, map[bool]string{true: " *", false: ""}[wildcard])
		}
	}
	return nil
}
