package dlqcli

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRenderProgress(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		b     BatchOperation
		width int
		want  string
	}{
		{"pending, total unknown", BatchOperation{State: StatePending}, 10,
			"[----------]   0% 0/0 pending (succeeded 0, failed 0, skipped 0)"},
		{"running", BatchOperation{State: StateRunning, Total: 200, Processed: 50, Succeeded: 45, Failed: 3, Skipped: 2}, 10,
			"[##--------]  25% 50/200 running (succeeded 45, failed 3, skipped 2)"},
		{"rounds down", BatchOperation{State: StateRunning, Total: 1000, Processed: 999, Succeeded: 999}, 10,
			"[#########-]  99% 999/1000 running (succeeded 999, failed 0, skipped 0)"},
		{"completed", BatchOperation{State: StateCompleted, Total: 3, Processed: 3, Succeeded: 3}, 10,
			"[##########] 100% 3/3 completed (succeeded 3, failed 0, skipped 0)"},
		{"completed with nothing to do", BatchOperation{State: StateCompleted}, 10,
			"[##########] 100% 0/0 completed (succeeded 0, failed 0, skipped 0)"},
		{"cancelled with nothing done", BatchOperation{State: StateCancelled}, 10,
			"[----------]   0% 0/0 cancelled (succeeded 0, failed 0, skipped 0)"},
		{"processed beyond total", BatchOperation{State: StateRunning, Total: 4, Processed: 6}, 4,
			"[####] 100% 6/4 running (succeeded 0, failed 0, skipped 0)"},
		{"negative counts", BatchOperation{State: StateRunning, Total: -1, Processed: -1}, 4,
			"[----]   0% -1/-1 running (succeeded 0, failed 0, skipped 0)"},
		{"failed with an error", BatchOperation{State: StateFailed, Total: 10, Processed: 5, Error: "webhook\ndeleted\t"}, 4,
			"[##--]  50% 5/10 failed (succeeded 0, failed 0, skipped 0): webhook deleted"},
		{"zero width", BatchOperation{State: StateRunning, Total: 2, Processed: 1}, 0,
			"[-]  50% 1/2 running (succeeded 0, failed 0, skipped 0)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, RenderProgress(tc.b, tc.width))
		})
	}
}

func TestBatchOperationFinal(t *testing.T) {
	t.Parallel()
	for state, final := range map[string]bool{
		StatePending: false, StateRunning: false, StateCompleted: true, StateCancelled: true, StateFailed: true,
	} {
		require.Equal(t, final, BatchOperation{State: state}.Final(), state)
	}
}
