package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestCPUBetween(t *testing.T) {
	at := time.Unix(1000, 0)
	a := cpuSample{at: at, ticks: map[string]int64{"api": 100, "worker": 50, "postgres": 1000, "machine": 5000}}
	b := cpuSample{at: at.Add(10 * time.Second), ticks: map[string]int64{"api": 300, "worker": 150, "postgres": 1300, "soak": 100, "machine": 6500}}
	u := cpuBetween(a, b, 1000)
	require.InDelta(t, 2000.0, u.perDelivery("api"), 0.001) // 200 ticks of 10 ms over 1000 deliveries
	require.InDelta(t, 15000.0, u.perDelivery("machine"), 0.001)
	require.InDelta(t, 8000.0, u.perDelivery("rest"), 0.001, "the machine's 1500 ticks less the groups' 700")
	require.InDelta(t, 1.5, u.cores("machine"), 0.001)
	require.InDelta(t, 6000.0, u.systemPerDelivery(), 0.001, "api, worker and postgres; not this program")
	require.Equal(t, []string{"1000", "2000 us", "1000 us", "0 us", "3000 us", "0 us", "0 us", "1000 us", "8000 us", "15000 us", "1.50"}, u.row())
	require.Zero(t, cpuBetween(a, b, 0).perDelivery("api"))
}
