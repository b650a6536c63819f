package dlqcli

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/systemtest"
)

func TestRecoverStartsWithWindowIncludeAndRate(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t)
	api.handle("POST /v1/webhooks/{hook}/recover", http.StatusAccepted, map[string]any{"batch_operation_id": "b1"})

	res := run(t, api, "recover", "-webhook", "wh 1", "-from", "2026-03-01T00:00:00Z", "-to", "2026-03-01T12:30:00+01:00",
		"-include", "missed", "-rps", "25", "-priority", "low")

	require.Equal(t, exitOK, res.Code, res.Stderr)
	require.Equal(t, "b1\n", res.Stdout)
	reqs := api.requests()
	require.Len(t, reqs, 1)
	require.Equal(t, "/v1/webhooks/wh%201/recover", reqs[0].Path)
	require.JSONEq(t, `{"from": "2026-03-01T00:00:00Z", "to": "2026-03-01T11:30:00Z", "include": ["missed"],
		"rate_limit": {"requests_per_second": 25}, "priority": "low"}`, reqs[0].Body)
}

func TestRecoverDryRunPrintsCounts(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t)
	api.handle("POST /v1/webhooks/{hook}/recover", http.StatusOK, map[string]any{"dry_run": true, "total": 7,
		"recovery": map[string]any{"webhook_id": "wh1", "from": "2026-03-01T00:00:00Z", "to": "2026-03-02T00:00:00Z",
			"include": []string{"failed", "missed"}, "failed": 2, "missed": 5}})

	res := run(t, api, "recover", "-webhook", "wh1", "-from", "2026-03-01T00:00:00Z", "-dry-run")

	require.Equal(t, exitOK, res.Code, res.Stderr)
	require.Equal(t, "window   2026-03-01T00:00:00Z to 2026-03-02T00:00:00Z\nfailed   2\nmissed   5\ntotal    7\n", res.Stdout)
	require.JSONEq(t, `{"from": "2026-03-01T00:00:00Z", "rate_limit": {"requests_per_second": 0}, "dry_run": true}`,
		api.requests()[0].Body)
}

func TestRecoverUsageErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"recover", "-from", "2026-03-01T00:00:00Z", "-rps", "5"}, "-webhook is required"},
		{[]string{"recover", "-webhook", "wh1", "-rps", "5"}, "-from is required"},
		{[]string{"recover", "-webhook", "wh1", "-from", "2026-03-01T00:00:00Z"}, "-rps is required"},
		{[]string{"recover", "-webhook", "wh1", "-from", "2026-03-01T00:00:00Z", "-rps", "5", "-include", "lost"}, "must be failed, missed"},
	} {
		api := newFakeAPI(t)
		res := run(t, api, tc.args...)
		require.Equal(t, exitUsage, res.Code, "%v", tc.args)
		require.Contains(t, res.Stderr, tc.want, "%v", tc.args)
		require.Empty(t, api.requests())
	}
}

// Against a real api: a dry run of a fresh webhook counts nothing, and a
// recovery starts and is shown by status as what it recovers.
func TestRecoverAgainstTheAPI(t *testing.T) {
	t.Parallel()
	s := systemtest.Start(t, systemtest.Options{})
	_, key := s.Tenant("cli")
	status, raw := s.Call("POST", "/v1/webhooks", key, map[string]any{"url": "https://8.8.8.8/hook", "events": []string{"order.*"}})
	require.Equal(t, http.StatusCreated, status, string(raw))
	hook := strings.SplitN(strings.SplitN(string(raw), `"id":"`, 2)[1], `"`, 2)[0]
	env := map[string]string{envAPIURL: s.URL, envAPIKey: key}
	runReal := func(args ...string) result {
		var out, errb strings.Builder
		a := &app{stdout: &out, stderr: &errb, getenv: func(k string) string { return env[k] }, poll: time.Millisecond}
		code := a.run(context.Background(), args)
		return result{Code: code, Stdout: out.String(), Stderr: errb.String()}
	}
	from := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)

	res := runReal("recover", "-webhook", hook, "-from", from, "-dry-run")
	require.Equal(t, exitOK, res.Code, res.Stderr)
	require.Contains(t, res.Stdout, "failed   0\nmissed   0\ntotal    0\n")

	res = runReal("recover", "-webhook", hook, "-from", from, "-include", "failed", "-rps", "10")
	require.Equal(t, exitOK, res.Code, res.Stderr)
	id := strings.TrimSpace(res.Stdout)
	res = runReal("status", id)
	require.Equal(t, exitOK, res.Code, res.Stderr)
	require.Contains(t, res.Stdout, "recovers     webhook "+hook+", failed, events of "+from+" to ")

	res = runReal("recover", "-webhook", "00000000-0000-0000-0000-000000000000", "-from", from, "-dry-run")
	require.Equal(t, exitFailure, res.Code)
	require.Contains(t, res.Stderr, "(not_found, HTTP 404)")
}
