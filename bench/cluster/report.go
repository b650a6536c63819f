package main

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/hookline/hookline/bench/internal/report"
	"github.com/hookline/hookline/bench/internal/seqload"
)

// resumeGoal is how soon after a kill delivery must go on.
const resumeGoal = 10 * time.Second

// emit prints the run's two tables: the events, and the kills.
func emit(o options, pub seqload.Published, rc *seqload.Receiver, kills []kill, start time.Time, cpu string) error {
	first, all := rc.Arrivals()
	lost := 0
	for seq := range pub.Accepted {
		if _, ok := first[seq]; !ok {
			lost++
		}
	}
	command := "go run ./bench/cluster " + strings.Join(os.Args[1:], " ")
	setup := fmt.Sprintf("Two apis, two workers and a dlq built from the working tree, on a three-node RabbitMQ cluster (amqp.url the list of the three, %d work queue shards per priority) and a Redis Cluster of three masters with one replica each (redis.mode cluster), beside the machine's Postgres; one tenant publishing %d events/s for %s through the two apis in turn to one webhook on a local receiver answering 200.", o.shards, o.rate, o.duration)

	// Latency from the scheduled publish, by phase: before the first
	// kill, between kills, after the last.
	bounds := []time.Time{start}
	names := []string{"before any kill"}
	for _, k := range kills {
		bounds = append(bounds, k.at)
		names = append(names, "after the "+k.what+" kill")
	}
	bounds = append(bounds, start.Add(o.duration))
	var rows [][]string
	for i := range names {
		var lat []time.Duration
		accepted, arrived := 0, 0
		for seq := range pub.Accepted {
			at := pub.Scheduled(start, seq)
			if at.Before(bounds[i]) || !at.Before(bounds[i+1]) {
				continue
			}
			accepted++
			if got, ok := first[seq]; ok {
				arrived++
				lat = append(lat, got.Sub(at))
			}
		}
		slices.Sort(lat)
		rows = append(rows, []string{names[i], bounds[i].Sub(start).Round(time.Second).String() + "-" + bounds[i+1].Sub(start).Round(time.Second).String(),
			fmt.Sprint(accepted), fmt.Sprint(arrived), report.Ms(report.Percentile(lat, 50)), report.Ms(report.Percentile(lat, 99)), report.Ms(report.Percentile(lat, 100))})
	}
	verdict := "met"
	if lost > 0 {
		verdict = "NOT met"
	}
	if err := report.Emit(report.Table{
		Title:   "Cluster: node loss under load",
		Command: command,
		Notes: []string{
			setup,
			fmt.Sprintf("Published %d, accepted (202) %d, refused %d, no answer %d; **lost %d** (accepted, never received; goal 0: %s); **duplicates %d** (arrivals of an event already received).", pub.Total, len(pub.Accepted), pub.Refused, pub.Unknown, lost, verdict, rc.Duplicates()),
			cpu,
			"Receipt latency from each event's scheduled publish time, by when it was scheduled.",
		},
		Header: []string{"events scheduled", "seconds", "accepted", "received", "p50", "p99", "max"},
		Rows:   rows,
	}, o.record); err != nil {
		return err
	}

	var killRows [][]string
	for i, k := range kills {
		// The window ends at the next kill, or the end of publishing; its
		// late events are those scheduled a second (lateAfter) before
		// the next kill, since the events still in flight at that kill
		// are its own.
		until, lateUntil := start.Add(o.duration), start.Add(o.duration)
		if i+1 < len(kills) {
			until, lateUntil = kills[i+1].at, kills[i+1].at.Add(-lateAfter)
		}
		r := recovery(k.at, until, lateUntil, pub, first, all, start)
		met := "met"
		if r.resumed < 0 || r.gap > resumeGoal || r.lateUntil > resumeGoal {
			met = "NOT met"
		}
		killRows = append(killRows, []string{k.what, k.node, k.held, k.at.Sub(start).Round(100 * time.Millisecond).String(),
			formatResume(r.resumed), r.gap.Round(10 * time.Millisecond).String(), r.lateUntil.Round(10 * time.Millisecond).String(),
			formatLate(r.late), met})
	}
	return report.Emit(report.Table{
		Title:   "Cluster: delivery after each kill",
		Command: command,
		Notes: []string{
			"Killed with SIGKILL and left down: the RabbitMQ node leading the most queues, the Redis master holding the most keys. Each kill's window runs until the next kill or the end of publishing.",
			fmt.Sprintf("First arrival: from the kill to the first arrival of an event scheduled after it. Longest gap: the longest time in the window without any arrival. Late until: from the kill to the scheduled time of the last event of the window that arrived more than %s after it was scheduled (or never): from then on, every event arrived on time; events scheduled in the last second before the next kill count for that kill. Goal: delivery resumes within %s (longest gap and late until).", lateAfter, resumeGoal),
		},
		Header: []string{"killed", "node", "before the kill", "at", "first arrival", "longest gap", "late until", "late events by second after the kill", "goal"},
		Rows:   killRows,
	}, o.record)
}

// lateAfter is how long after its scheduled publish an event counts as
// late when telling whether delivery has recovered.
const lateAfter = time.Second

// recovered is how delivery went on after a kill.
type recovered struct {
	resumed   time.Duration // to the first arrival of an event scheduled after the kill; -1: none
	gap       time.Duration // the longest time without any arrival
	lateUntil time.Duration // to the scheduled time of the last late event; 0: none
	late      map[int]int   // late events by whole seconds from the kill to their scheduled time
}

// recovery measures delivery in the window [at, until) after a kill,
// counting as late only the events scheduled before lateBefore.
func recovery(at, until, lateBefore time.Time, pub seqload.Published, first map[int64]time.Time, all []time.Time, start time.Time) recovered {
	r := recovered{resumed: -1, late: map[int]int{}}
	for seq := range pub.Total {
		sched := pub.Scheduled(start, seq)
		if sched.Before(at) || !sched.Before(until) || !pub.Accepted[seq] {
			continue
		}
		got, ok := first[seq]
		if ok && (r.resumed < 0 || got.Sub(at) < r.resumed) {
			r.resumed = got.Sub(at)
		}
		if (!ok || got.Sub(sched) > lateAfter) && sched.Before(lateBefore) {
			r.lateUntil = sched.Sub(at)
			r.late[int(sched.Sub(at)/time.Second)]++
		}
	}
	prev := at
	for _, t := range all {
		if t.Before(at) {
			continue
		}
		if !t.Before(until) {
			break
		}
		r.gap = max(r.gap, t.Sub(prev))
		prev = t
	}
	r.gap = max(r.gap, until.Sub(prev))
	return r
}

// formatLate lists late events by second, "s+0: 120, s+5: 3", at most
// twelve seconds.
func formatLate(late map[int]int) string {
	secs := slices.Sorted(maps.Keys(late))
	if len(secs) == 0 {
		return "none"
	}
	var parts []string
	for i, sec := range secs {
		if i == 12 {
			parts = append(parts, fmt.Sprintf("... (%d seconds)", len(secs)))
			break
		}
		parts = append(parts, fmt.Sprintf("s+%d: %d", sec, late[sec]))
	}
	return strings.Join(parts, ", ")
}

func formatResume(d time.Duration) string {
	if d < 0 {
		return "never"
	}
	return d.Round(10 * time.Millisecond).String()
}
