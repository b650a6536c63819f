package schedule

import (
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/wire"
)

func parkedRow(hook uuid.UUID, reason Reason, probes int, sleepMS int64) parked {
	return parked{task: wire.Task{DeliveryID: uuid.New(), WebhookID: hook}, reason: reason, probes: probes,
		sleepMS: sleepMS, webhookID: hook}
}

// Behind a circuit only its probes are woken; the rest wait another sleep
// window. Other reasons are all woken.
func TestProbesOnly(t *testing.T) {
	t.Parallel()
	a, b := uuid.New(), uuid.New()
	due := []parked{
		parkedRow(a, CircuitOpen, 2, 30000),
		parkedRow(a, RateLimited, 5, 30000),
		parkedRow(a, CircuitOpen, 2, 30000),
		parkedRow(b, CircuitOpen, 1, 60000),
		parkedRow(a, CircuitOpen, 2, 30000),
		parkedRow(b, CircuitOpen, 1, 60000),
		parkedRow(b, TenantShare, 1, 60000),
		parkedRow(a, CircuitOpen, 0, 30000), // a broken config still lets one go
	}
	wake, hold := probesOnly(due)
	var woken []uuid.UUID
	for _, p := range wake {
		woken = append(woken, p.task.DeliveryID)
	}
	require.Equal(t, []uuid.UUID{due[0].task.DeliveryID, due[1].task.DeliveryID, due[2].task.DeliveryID,
		due[3].task.DeliveryID, due[6].task.DeliveryID}, woken)
	require.Equal(t, map[int64][]uuid.UUID{
		30000: {due[4].task.DeliveryID, due[7].task.DeliveryID},
		60000: {due[5].task.DeliveryID},
	}, hold)
}
