package main

import (
	"fmt"
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
	for _, k := range kills {
		resumed, gap := resumption(k.at, pub, first, all, start)
		met := "met"
		if resumed < 0 || resumed > resumeGoal {
			met = "NOT met"
		}
		killRows = append(killRows, []string{k.what, k.node, k.held, k.at.Sub(start).Round(100 * time.Millisecond).String(),
			formatResume(resumed), gap.Round(10 * time.Millisecond).String(), met})
	}
	return report.Emit(report.Table{
		Title:   "Cluster: delivery after each kill",
		Command: command,
		Notes: []string{
			"Killed with SIGKILL and left down: the RabbitMQ node leading the most queues, the Redis master holding the most keys.",
			fmt.Sprintf("Resumed: from the kill to the first arrival of an event scheduled after it (goal: within %s). Longest gap: the longest time without any arrival, from the kill until the end of publishing.", resumeGoal),
		},
		Header: []string{"killed", "node", "before the kill", "at", "resumed after", "longest gap", "goal"},
		Rows:   killRows,
	}, o.record)
}

// resumption returns how long after at the first event scheduled after at
// arrived (-1 if none did), and the longest time without any arrival from
// at until the end of publishing.
func resumption(at time.Time, pub seqload.Published, first map[int64]time.Time, all []time.Time, start time.Time) (time.Duration, time.Duration) {
	resumed := time.Duration(-1)
	for seq, got := range first {
		if pub.Scheduled(start, seq).Before(at) {
			continue
		}
		if d := got.Sub(at); resumed < 0 || d < resumed {
			resumed = d
		}
	}
	end := pub.Scheduled(start, pub.Total)
	prev, gap := at, time.Duration(0)
	for _, t := range all {
		if t.Before(at) {
			continue
		}
		if t.After(end) {
			t = end
		}
		gap = max(gap, t.Sub(prev))
		prev = t
		if !t.Before(end) {
			break
		}
	}
	return resumed, max(gap, end.Sub(prev))
}

func formatResume(d time.Duration) string {
	if d < 0 {
		return "never"
	}
	return d.Round(10 * time.Millisecond).String()
}
