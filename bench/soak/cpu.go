package main

import (
	"fmt"
	"slices"
	"time"

	"github.com/hookline/hookline/bench/internal/report"
)

// cpuGroups are the processes whose CPU time the run reads: hookline's
// three, the local services (every process of each, whoever it works
// for) and this program (publishing clients and receivers).
var cpuGroups = []string{"api", "worker", "dlq", "postgres", "rabbitmq", "redis", "soak"}

// cpuColumns are the CPU table's columns: the groups, the rest of the
// machine's busy time (the kernel's work for no process in particular,
// such as loopback networking, and every other process) and the whole
// machine's.
var cpuColumns = append(slices.Clone(cpuGroups), "rest", "machine")

// cpuSample is the CPU time each group had used at a moment, in clock
// ticks of /proc.
type cpuSample struct {
	at    time.Time
	ticks map[string]int64
}

// sampleCPU reads the CPU time of hookline's processes, given by pid, of
// the local services and this process (report.SampleCPU), and the busy
// time of the machine (report.MachineTicks).
func sampleCPU(pids map[string]int) cpuSample {
	s := cpuSample{at: time.Now(), ticks: map[string]int64{}}
	for name, pid := range pids {
		s.ticks[name] = report.ProcTicks(pid)
	}
	shared := report.SampleCPU()
	for _, g := range []string{"postgres", "rabbitmq", "redis"} {
		s.ticks[g] = shared.Ticks[g]
	}
	s.ticks["soak"] = shared.Ticks["hookline"] // this process
	s.ticks["machine"] = report.MachineTicks()
	return s
}

// cpuUse is what each column used between two samples.
type cpuUse struct {
	span       time.Duration
	used       map[string]time.Duration
	deliveries int64 // that arrived meanwhile
}

func cpuBetween(a, b cpuSample, deliveries int64) cpuUse {
	u := cpuUse{span: b.at.Sub(a.at), used: map[string]time.Duration{}, deliveries: deliveries}
	u.used["machine"] = report.TicksDuration(b.ticks["machine"] - a.ticks["machine"])
	u.used["rest"] = u.used["machine"]
	for _, g := range cpuGroups {
		u.used[g] = report.TicksDuration(b.ticks[g] - a.ticks[g])
		u.used["rest"] -= u.used[g]
	}
	return u
}

// perDelivery returns group g's CPU time per delivery, in microseconds
// (0 without deliveries).
func (u cpuUse) perDelivery(g string) float64 {
	if u.deliveries <= 0 {
		return 0
	}
	return float64(u.used[g].Microseconds()) / float64(u.deliveries)
}

// systemGroups are hookline's processes and the services it runs on.
var systemGroups = []string{"api", "worker", "dlq", "postgres", "rabbitmq", "redis"}

// systemPerDelivery returns the CPU time per delivery of systemGroups
// together, in microseconds.
func (u cpuUse) systemPerDelivery() float64 {
	var sum float64
	for _, g := range systemGroups {
		sum += u.perDelivery(g)
	}
	return sum
}

// cores returns how many cores group g kept busy on average.
func (u cpuUse) cores(g string) float64 {
	if u.span <= 0 {
		return 0
	}
	return u.used[g].Seconds() / u.span.Seconds()
}

// row is the CPU table's row: per delivery for each group, then the
// machine's cores.
func (u cpuUse) row() []string {
	row := []string{fmt.Sprint(u.deliveries)}
	for _, g := range cpuColumns {
		row = append(row, fmt.Sprintf("%.0f us", u.perDelivery(g)))
	}
	return append(row, fmt.Sprintf("%.2f", u.cores("machine")))
}
