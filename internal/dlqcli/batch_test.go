package dlqcli

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

func batchOp(state string, total, processed, succeeded, failed, skipped int) map[string]any {
	b := map[string]any{
		"id": "b1", "state": state, "total": total, "processed": processed, "skipped": skipped,
		"succeeded": succeeded, "failed": failed, "error": nil, "created_at": "2026-03-01T10:00:00Z",
		"started_at": nil, "finished_at": nil, "requests_per_second": 10, "priority": "normal",
	}
	if state != StatePending {
		b["started_at"] = "2026-03-01T10:00:01Z"
	}
	return b
}

func TestRetry(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		args     []string
		wantBody string
	}{
		{"with priority", []string{"retry", "-webhook", "wh 1", "-priority", "high", "del/1"}, `{"priority":"high"}`},
		{"flags after the id", []string{"retry", "del/1", "-webhook", "wh 1"}, `{}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			api := newFakeAPI(t)
			api.handle("POST /v1/webhooks/{hook}/deliveries/{delivery}/retry", http.StatusAccepted,
				map[string]any{"delivery_id": "new-1", "retry_of": "del/1"})

			res := run(t, api, tc.args...)

			require.Equal(t, exitOK, res.Code, res.Stderr)
			require.Equal(t, "new-1\n", res.Stdout)
			reqs := api.requests()
			require.Len(t, reqs, 1)
			require.Equal(t, http.MethodPost, reqs[0].Method)
			require.Equal(t, "/v1/webhooks/wh%201/deliveries/del%2F1/retry", reqs[0].Path, "ids are path-escaped")
			require.Equal(t, "application/json", reqs[0].Type)
			require.JSONEq(t, tc.wantBody, reqs[0].Body)
		})
	}
}

func TestBatchStartsWithFilterRateAndPriority(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t)
	api.handle("POST /v1/dlq/retry-batch", http.StatusAccepted, map[string]any{"batch_operation_id": "b1"})

	res := run(t, api, "batch", "-webhook", "wh1", "-event-type", "order.created", "-event-type", "order.paid",
		"-category", "timeout", "-from", "2026-03-01T00:00:00Z", "-to", "2026-03-01T12:30:00+01:00",
		"-rps", "25", "-priority", "low")

	require.Equal(t, exitOK, res.Code, res.Stderr)
	require.Equal(t, "b1\n", res.Stdout)
	reqs := api.requests()
	require.Len(t, reqs, 1)
	require.Equal(t, http.MethodPost, reqs[0].Method)
	require.Equal(t, "/v1/dlq/retry-batch", reqs[0].Path)
	require.JSONEq(t, `{
		"filter": {"webhook_ids": ["wh1"], "event_types": ["order.created", "order.paid"],
		           "failure_categories": ["timeout"], "from": "2026-03-01T00:00:00Z", "to": "2026-03-01T11:30:00Z"},
		"rate_limit": {"requests_per_second": 25},
		"priority": "low"}`, reqs[0].Body)
}

func TestBatchFollowsToCompletion(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t)
	api.handle("POST /v1/dlq/retry-batch", http.StatusAccepted, map[string]any{"batch_operation_id": "b1"})
	api.handleSequence("GET /v1/dlq/batch-operations/b1",
		batchOp(StatePending, 0, 0, 0, 0, 0),
		batchOp(StateRunning, 4, 2, 2, 0, 0),
		batchOp(StateRunning, 4, 2, 2, 0, 0),
		batchOp(StateCompleted, 4, 4, 3, 1, 0))

	res := run(t, api, "batch", "-category", "server_error", "-rps", "5", "-follow")

	require.Equal(t, exitOK, res.Code, res.Stderr)
	require.Empty(t, res.Stderr)
	lines := strings.Split(strings.TrimSuffix(res.Stdout, "\n"), "\n")
	require.Equal(t, []string{
		"b1",
		"[------------------------------]   0% 0/0 pending (succeeded 0, failed 0, skipped 0)",
		"[###############---------------]  50% 2/4 running (succeeded 2, failed 0, skipped 0)",
		"[##############################] 100% 4/4 completed (succeeded 3, failed 1, skipped 0)",
	}, lines, "one line per change when stdout is not a terminal")
	require.Len(t, api.requests(), 5, "the start, then a poll per state until the final one")
}

func TestStatusFollowExitCodes(t *testing.T) {
	t.Parallel()
	failed := batchOp(StateFailed, 10, 3, 3, 0, 0)
	failed["error"] = "webhook wh1\ndeleted"
	for _, tc := range []struct {
		name       string
		final      map[string]any
		wantCode   int
		wantStderr string
	}{
		{"completed", batchOp(StateCompleted, 10, 10, 10, 0, 0), exitOK, ""},
		{"failed", failed, exitFailure, "dlq: batch operation b1 failed: webhook wh1 deleted\n"},
		{"cancelled", batchOp(StateCancelled, 10, 4, 4, 0, 0), exitFailure, "dlq: batch operation b1 was cancelled\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			api := newFakeAPI(t)
			api.handleSequence("GET /v1/dlq/batch-operations/b1", batchOp(StateRunning, 10, 1, 1, 0, 0), tc.final)

			res := run(t, api, "status", "-follow", "b1")

			require.Equal(t, tc.wantCode, res.Code, res.Stderr)
			require.Equal(t, tc.wantStderr, res.Stderr)
			require.Len(t, strings.Split(strings.TrimSuffix(res.Stdout, "\n"), "\n"), 2, res.Stdout)
			require.Contains(t, res.Stdout, " "+tc.name+" ")
		})
	}
}

func TestStatusFollowRedrawsOnATerminal(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t)
	failedOne := batchOp(StateRunning, 200, 150, 140, 10, 0)
	api.handleSequence("GET /v1/dlq/batch-operations/b1",
		batchOp(StateRunning, 200, 100, 100, 0, 0),
		failedOne,
		batchOp(StateCompleted, 200, 200, 190, 10, 0))

	res := runWith(context.Background(), t, api.URL, true, "status", "-follow", "b1")

	require.Equal(t, exitOK, res.Code, res.Stderr)
	require.Equal(t, 1, strings.Count(res.Stdout, "\n"), "one line, ended once: %q", res.Stdout)
	require.True(t, strings.HasSuffix(res.Stdout, "\n"))
	draws := strings.Split(strings.TrimSuffix(res.Stdout, "\n"), "\r")
	require.Equal(t, []string{
		"",
		"[###############---------------]  50% 100/200 running (succeeded 100, failed 0, skipped 0)",
		"[######################--------]  75% 150/200 running (succeeded 140, failed 10, skipped 0)",
		"[##############################] 100% 200/200 completed (succeeded 190, failed 10, skipped 0)",
	}, draws)
}

func TestProgressLinePadsShorterRedraws(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	p := &progressLine{w: &b, tty: true}
	p.draw("long line")
	p.draw("short")
	p.draw("short")
	p.end()
	p.end()
	require.Equal(t, "\rlong line\rshort    \n", b.String())
}

func TestFollowInterrupted(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var polls atomic.Int32
	api.mux.HandleFunc("GET /v1/dlq/batch-operations/b1", func(w http.ResponseWriter, _ *http.Request) {
		n := int(polls.Add(1))
		if n == 2 {
			cancel() // as Ctrl-C would
		}
		writeJSON(w, http.StatusOK, batchOp(StateRunning, 10, n, n, 0, 0))
	})

	res := runWith(ctx, t, api.URL, true, "status", "-follow", "b1")

	require.Equal(t, exitInterrupted, res.Code)
	require.Equal(t, "dlq: stopped following; batch operation b1 goes on (dlq status -follow b1)\n", res.Stderr)
	require.True(t, strings.HasSuffix(res.Stdout, "\n"), "the redrawn line is ended: %q", res.Stdout)
}

func TestStatusPrintsBatch(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t)
	b := batchOp(StateFailed, 8, 6, 4, 1, 1)
	b["finished_at"] = "2026-03-01T10:05:00Z"
	b["error"] = "webhook deleted"
	api.handle("GET /v1/dlq/batch-operations/b1", http.StatusOK, b)

	res := run(t, api, "status", "b1")

	require.Equal(t, exitOK, res.Code, res.Stderr)
	require.Equal(t, `id           b1
state        failed
progress     [######################--------]  75% 6/8 failed (succeeded 4, failed 1, skipped 1): webhook deleted
created at   2026-03-01T10:00:00Z
started at   2026-03-01T10:00:01Z
finished at  2026-03-01T10:05:00Z
error        webhook deleted
`, res.Stdout)
	require.Len(t, api.requests(), 1)
}

func TestCancel(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t)
	api.handle("POST /v1/dlq/batch-operations/b1/cancel", http.StatusOK, batchOp(StateCancelled, 8, 2, 2, 0, 0))

	res := run(t, api, "cancel", "b1")

	require.Equal(t, exitOK, res.Code, res.Stderr)
	require.Contains(t, res.Stdout, "state        cancelled\n")
	reqs := api.requests()
	require.Len(t, reqs, 1)
	require.Equal(t, http.MethodPost, reqs[0].Method)
	require.Equal(t, "/v1/dlq/batch-operations/b1/cancel", reqs[0].Path)
}
