package dlqcli

import (
	"bytes"
	"context"
	"flag"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestAPIErrorsAreReported(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		args       []string
		pattern    string
		status     int
		body       any
		wantStderr string
	}{
		{"not found", []string{"status", "b9"}, "GET /v1/dlq/batch-operations/b9", http.StatusNotFound,
			apiErr("not_found", "not found"), "dlq: not found (not_found, HTTP 404)\n"},
		{"conflict", []string{"retry", "-webhook", "wh", "d1"}, "POST /v1/webhooks/wh/deliveries/d1/retry", http.StatusConflict,
			apiErr("retry_in_flight", "delivery d1 already has a retry in flight"),
			"dlq: delivery d1 already has a retry in flight (retry_in_flight, HTTP 409)\n"},
		{"bad request", []string{"batch", "-category", "nope", "-rps", "1"}, "POST /v1/dlq/retry-batch", http.StatusBadRequest,
			apiErr("invalid_request", "filter.failure_categories[0]: must be one of timeout, server_error"),
			"dlq: filter.failure_categories[0]: must be one of timeout, server_error (invalid_request, HTTP 400)\n"},
		{"not json", []string{"cancel", "b1"}, "POST /v1/dlq/batch-operations/b1/cancel", http.StatusBadGateway,
			"<html>bad gateway</html>", "dlq: Bad Gateway (HTTP 502)\n"},
		{"list", []string{"list"}, "GET /v1/dlq", http.StatusServiceUnavailable,
			apiErr("unavailable", "database unavailable"), "dlq: database unavailable (unavailable, HTTP 503)\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			api := newFakeAPI(t)
			api.handle(tc.pattern, tc.status, tc.body)

			res := run(t, api, tc.args...)

			require.Equal(t, exitFailure, res.Code)
			require.Equal(t, tc.wantStderr, res.Stderr)
			require.Empty(t, res.Stdout)
		})
	}
}

func TestWrongKeyIsAnAPIError(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t)
	var out, errb bytes.Buffer
	env := map[string]string{envAPIURL: api.URL, envAPIKey: "hk_wrong_key"}

	code := Run(context.Background(), []string{"status", "b1"}, &out, &errb, func(k string) string { return env[k] })

	require.Equal(t, exitFailure, code)
	require.Equal(t, "dlq: missing or invalid API key (unauthorized, HTTP 401)\n", errb.String())
	require.NotContains(t, errb.String(), "hk_wrong_key")
	require.Empty(t, api.requests(), "the fake api records only authorised requests")
}

func TestKeyAndURLFlags(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t)
	api.handle("GET /v1/dlq/batch-operations/b1", http.StatusOK, batchOp(StateRunning, 1, 0, 0, 0, 0))
	var out, errb bytes.Buffer
	noEnv := func(string) string { return "" }

	code := Run(context.Background(), []string{"status", "-api", api.URL + "/", "-key", testKey, "b1"}, &out, &errb, noEnv)

	require.Equal(t, exitOK, code, errb.String())
	require.Contains(t, out.String(), "state        running\n")
	require.Equal(t, "/v1/dlq/batch-operations/b1", api.requests()[0].Path)
}

func TestUnreachableAPI(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close()) // nothing listens there any more

	for _, args := range [][]string{{"list"}, {"status", "-follow", "b1"}, {"cancel", "b1"}} {
		res := runWith(context.Background(), t, "http://"+addr, false, args...)

		require.Equal(t, exitFailure, res.Code, args)
		require.True(t, strings.HasPrefix(res.Stderr, "dlq: cannot reach the api at http://"+addr+": "), res.Stderr)
		require.Contains(t, res.Stderr, "connection refused")
	}
}

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t) // answers 404 to everything: no test may reach it
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{}, "usage: dlq [command]"},
		{[]string{"purge"}, `dlq: unknown command "purge"`},
		{[]string{"help", "purge"}, `dlq: unknown command "purge"`},
		{[]string{"list", "-nope"}, "flag provided but not defined: -nope"},
		{[]string{"list", "extra"}, "dlq list: want 0 argument(s)"},
		{[]string{"list", "-limit", "501"}, "dlq list: -limit must be between 1 and 500"},
		{[]string{"list", "-from", "yesterday"}, `invalid value "yesterday" for flag -from: must be an RFC 3339 time`},
		{[]string{"list", "-webhook", ""}, `invalid value "" for flag -webhook: must not be empty`},
		{[]string{"retry", "d1"}, "dlq retry: -webhook is required"},
		{[]string{"retry", "-webhook", "wh"}, "dlq retry: want 1 argument(s)"},
		{[]string{"retry", "-webhook", "wh", "-priority", "urgent", "d1"}, `invalid value "urgent" for flag -priority: must be high, normal or low`},
		{[]string{"batch", "-rps", "10"}, "dlq batch: refusing to retry the whole DLQ"},
		{[]string{"batch", "-webhook", "wh"}, "dlq batch: -rps is required and must be positive"},
		{[]string{"batch", "-webhook", "wh", "-rps", "-1"}, "dlq batch: -rps is required and must be positive"},
		{[]string{"status"}, "dlq status: want 1 argument(s) ([-follow] BATCH_ID), got 0"},
		{[]string{"status", "b1", "b2"}, "dlq status: want 1 argument(s)"},
		{[]string{"cancel"}, "dlq cancel: want 1 argument(s)"},
		{[]string{"status", "-api", "ftp://example.com", "b1"}, `dlq status: api url "ftp://example.com": must be an http or https URL`},
	} {
		res := run(t, api, tc.args...)

		require.Equal(t, exitUsage, res.Code, "%q: %s", tc.args, res.Stderr)
		require.Contains(t, res.Stderr, tc.want, tc.args)
		require.Contains(t, res.Stderr, "usage: dlq", tc.args)
		require.Empty(t, res.Stdout, tc.args)
	}
	require.Empty(t, api.requests())
}

func TestMissingKeyIsAUsageError(t *testing.T) {
	t.Parallel()
	var out, errb bytes.Buffer

	code := Run(context.Background(), []string{"list"}, &out, &errb, func(string) string { return "" })

	require.Equal(t, exitUsage, code)
	require.True(t, strings.HasPrefix(errb.String(), "dlq list: no API key: set HOOKLINE_API_KEY\n"), errb.String())
}

func TestHelp(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"help"}, []string{"list", "retry", "batch", "status", "cancel", "serve", "HOOKLINE_API_URL", "HOOKLINE_API_KEY"}},
		{[]string{"-h"}, []string{"usage: dlq [command]"}},
		{[]string{"--help"}, []string{"usage: dlq [command]"}},
		{[]string{"help", "batch"}, []string{"usage: dlq batch", "-rps N", "-follow", "-category"}},
	} {
		var out, errb bytes.Buffer
		code := Run(context.Background(), tc.args, &out, &errb, func(string) string { return "" })

		require.Equal(t, exitOK, code, tc.args)
		require.Empty(t, errb.String(), tc.args)
		for _, w := range tc.want {
			require.Contains(t, out.String(), w, tc.args)
		}
	}
}

func TestCommandHelpFlag(t *testing.T) {
	t.Parallel()
	var out, errb bytes.Buffer
	env := map[string]string{envAPIKey: testKey}

	code := Run(context.Background(), []string{"list", "-h"}, &out, &errb, func(k string) string { return env[k] })

	require.Equal(t, exitOK, code)
	require.Contains(t, errb.String(), "usage: dlq list")
	require.NotContains(t, errb.String(), testKey)
}

func TestIsCommand(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"list", "retry", "batch", "status", "cancel", "help", "-h", "--help"} {
		require.True(t, IsCommand(name), name)
	}
	for _, name := range []string{"", "serve", "-config", "lsit"} {
		require.False(t, IsCommand(name), name)
	}
}

func TestParseArgs(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args    []string
		wantPos []string
		wantW   string
	}{
		{[]string{"a", "-w", "x", "b"}, []string{"a", "b"}, "x"},
		{[]string{"-w", "x", "a"}, []string{"a"}, "x"},
		{[]string{"a", "--", "-w", "b"}, []string{"a", "-w", "b"}, ""},
		{nil, nil, ""},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		w := fs.String("w", "", "")
		pos, err := parseArgs(fs, tc.args)
		require.NoError(t, err, tc.args)
		require.Equal(t, tc.wantPos, pos, tc.args)
		require.Equal(t, tc.wantW, *w, tc.args)
	}
}
