package dlqcli

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func entry(id, hook, eventType, category string, attempts int, status any, lastErr string) map[string]any {
	return map[string]any{
		"id": id, "event_id": "ev-" + id, "webhook_id": hook, "event_type": eventType, "status": "exhausted",
		"priority": "normal", "attempt_count": attempts, "last_status_code": status, "last_error": lastErr,
		"failure_category": category, "created_at": "2026-03-01T09:00:00Z", "completed_at": "2026-03-01T10:15:30Z",
	}
}

func TestListPrintsFirstPageAndCounts(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t)
	long := "connection reset by peer\nwhile reading the response body of a very long answer from the endpoint"
	api.handle("GET /v1/dlq", http.StatusOK, map[string]any{
		"data": []any{
			entry("d1", "wh1", "order.created", "server_error", 8, 503, "503 Service Unavailable"),
			entry("d2", "wh2", "order.paid", "network", 5, nil, long),
		},
		"next_cursor": "c2",
	})
	api.handle("GET /v1/dlq/counts", http.StatusOK, map[string]any{
		"total": 12, "by_category": map[string]int{"network": 3, "server_error": 9},
	})

	res := run(t, api, "list", "-webhook", "wh1", "-webhook", "wh2", "-event-type", "order.created",
		"-category", "server_error", "-category", "network",
		"-from", "2026-03-01T00:00:00+02:00", "-to", "2026-03-02T00:00:00Z", "-limit", "2")

	require.Equal(t, exitOK, res.Code, res.Stderr)
	require.Empty(t, res.Stderr)
	reqs := api.requests()
	require.Len(t, reqs, 2, "one page without -all, then the counts")
	want := url.Values{
		"webhook_id":       {"wh1", "wh2"},
		"event_type":       {"order.created"},
		"failure_category": {"server_error", "network"},
		"from":             {"2026-02-28T22:00:00Z"},
		"to":               {"2026-03-02T00:00:00Z"},
	}
	require.Equal(t, "/v1/dlq/counts", reqs[1].Path)
	require.Equal(t, want, reqs[1].Query)
	want.Set("limit", "2")
	require.Equal(t, http.MethodGet, reqs[0].Method)
	require.Equal(t, "/v1/dlq", reqs[0].Path)
	require.Equal(t, want, reqs[0].Query)

	lines := strings.Split(strings.TrimSuffix(res.Stdout, "\n"), "\n")
	require.Len(t, lines, 5, res.Stdout)
	require.Regexp(t, `^DELIVERY\s+EXHAUSTED AT\s+WEBHOOK\s+EVENT TYPE\s+CATEGORY\s+ATTEMPTS\s+LAST STATUS\s+LAST ERROR$`, lines[0])
	require.Regexp(t, `^d1\s+2026-03-01T10:15:30Z\s+wh1\s+order.created\s+server_error\s+8\s+503\s+503 Service Unavailable$`, lines[1])
	require.Regexp(t, `^d2\s+2026-03-01T10:15:30Z\s+wh2\s+order.paid\s+network\s+5\s+-\s+connection reset by peer while reading`, lines[2])
	require.True(t, strings.HasSuffix(lines[2], "..."), "a long last error is truncated: %q", lines[2])
	require.NotContains(t, lines[2], "endpoint")
	require.Equal(t, "More entries follow: -all lists every page.", lines[3])
	require.Equal(t, "Total: 12 (server_error 9, network 3)", lines[4])
}

func TestListAllFollowsCursors(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t)
	pages := map[string]map[string]any{
		"":   {"data": []any{entry("d1", "wh", "a.b", "timeout", 3, nil, "timeout")}, "next_cursor": "p2"},
		"p2": {"data": []any{entry("d2", "wh", "a.b", "timeout", 3, nil, "timeout")}, "next_cursor": "p3"},
		"p3": {"data": []any{entry("d3", "wh", "a.b", "timeout", 3, nil, "timeout")}},
	}
	api.mux.HandleFunc("GET /v1/dlq", func(w http.ResponseWriter, r *http.Request) {
		p, ok := pages[r.URL.Query().Get("cursor")]
		if !ok {
			writeJSON(w, http.StatusBadRequest, apiErr("invalid_request", "cursor: not a cursor returned by this API"))
			return
		}
		writeJSON(w, http.StatusOK, p)
	})
	api.handle("GET /v1/dlq/counts", http.StatusOK, map[string]any{"total": 3, "by_category": map[string]int{"timeout": 3}})

	res := run(t, api, "list", "-all", "-category", "timeout")

	require.Equal(t, exitOK, res.Code, res.Stderr)
	var cursors []string
	for _, r := range api.requests() {
		if r.Path == "/v1/dlq" {
			require.Equal(t, []string{"timeout"}, r.Query["failure_category"])
			cursors = append(cursors, r.Query.Get("cursor"))
		}
	}
	require.Equal(t, []string{"", "p2", "p3"}, cursors)
	for _, id := range []string{"d1", "d2", "d3"} {
		require.Regexp(t, "(?m)^"+id+` `, res.Stdout)
	}
	require.NotContains(t, res.Stdout, "More entries")
	require.Contains(t, res.Stdout, "Total: 3 (timeout 3)\n")
}

func TestListAllStopsOnARepeatedCursor(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t)
	api.handle("GET /v1/dlq", http.StatusOK, map[string]any{"data": []any{}, "next_cursor": "same"})

	res := run(t, api, "list", "-all")

	require.Equal(t, exitFailure, res.Code)
	require.Equal(t, "dlq: list: the api returned cursor \"same\" twice\n", res.Stderr)
	require.Len(t, api.requests(), 2)
}

func TestListEmpty(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t)
	api.handle("GET /v1/dlq", http.StatusOK, map[string]any{"data": []any{}, "next_cursor": ""})
	api.handle("GET /v1/dlq/counts", http.StatusOK, map[string]any{"total": 0, "by_category": map[string]int{}})

	res := run(t, api, "list")

	require.Equal(t, exitOK, res.Code, res.Stderr)
	require.Equal(t, "No dead-lettered deliveries match.\nTotal: 0\n", res.Stdout)
	require.Empty(t, api.requests()[0].Query, "no filter, no limit: no query parameters")
}

func TestFormatCounts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   Counts
		want string
	}{
		{Counts{}, "Total: 0"},
		{Counts{Total: 5, ByCategory: map[string]int64{"timeout": 5}}, "Total: 5 (timeout 5)"},
		{Counts{Total: 7, ByCategory: map[string]int64{"ssl": 2, "dns": 2, "timeout": 3}}, "Total: 7 (timeout 3, dns 2, ssl 2)"},
	} {
		require.Equal(t, tc.want, formatCounts(tc.in), fmt.Sprint(tc.in))
	}
}

func TestTruncate(t *testing.T) {
	t.Parallel()
	require.Equal(t, "short", truncate("short", 10))
	require.Equal(t, "exactly 10", truncate("exactly 10", 10))
	require.Equal(t, "élève ...", truncate("élève attentif", 9))
}
