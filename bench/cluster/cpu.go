package main

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hookline/hookline/bench/internal/report"
)

// cpuGroups are the processes whose CPU the run reports, by group; the
// machine's Postgres is counted from report.SampleCPU (on a shared
// machine, with whatever else uses it).
type cpuGroups map[string][]int

// cpuSample is the CPU time each group had used at a moment.
type cpuSample struct {
	at    time.Time
	ticks map[string]int64
}

func (g cpuGroups) sample() cpuSample {
	s := cpuSample{at: time.Now(), ticks: map[string]int64{}}
	for name, pids := range g {
		for _, pid := range pids {
			s.ticks[name] += report.ProcTicks(pid)
		}
	}
	s.ticks["postgres"] = report.SampleCPU().Ticks["postgres"]
	return s
}

// cpuGroupOrder is the order of the CPU note.
var cpuGroupOrder = []string{"api", "worker", "dlq", "rabbitmq", "redis", "postgres"}

// cpuNote says what each group used between a and b: cores, and
// microseconds per delivery for the deliveries that arrived meanwhile.
func cpuNote(a, b cpuSample, deliveries int) string {
	secs := b.at.Sub(a.at).Seconds()
	var parts []string
	for _, g := range cpuGroupOrder {
		used := report.TicksDuration(b.ticks[g] - a.ticks[g])
		per := "-"
		if deliveries > 0 {
			per = fmt.Sprintf("%.0f us", float64(used.Microseconds())/float64(deliveries))
		}
		parts = append(parts, fmt.Sprintf("%s %.2f cores (%s per delivery)", g, used.Seconds()/secs, per))
	}
	return fmt.Sprintf("CPU from the first publish to the first kill or the end of publishing (%.0f s, %d deliveries): %s.", secs, deliveries, strings.Join(parts, ", "))
}

// arrivedBetween counts the arrivals in [a, b).
func arrivedBetween(all []time.Time, a, b time.Time) int {
	return len(slices.DeleteFunc(slices.Clone(all), func(t time.Time) bool { return t.Before(a) || !t.Before(b) }))
}
