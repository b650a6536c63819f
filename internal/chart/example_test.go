package chart_test

import (
	"fmt"
	"html/template"
	"strings"
	"time"

	"github.com/hookline/hookline/internal/chart"
	"github.com/hookline/hookline/internal/history"
)

// The three charts of a window of attempts, as history.Reader.Series
// returns it (here a made-up hour of three buckets).
func Example() {
	start := time.Date(2026, 5, 4, 14, 0, 0, 0, time.UTC)
	ptr := func(v float64) *float64 { return &v }
	s := history.Series{Start: start, End: start.Add(time.Hour), Step: 20 * time.Minute, Buckets: []history.Bucket{
		{Start: start, Attempts: 12, Successes: 11, Failures: 1, P50MS: ptr(40), P95MS: ptr(180)},
		{Start: start.Add(20 * time.Minute)},
		{Start: start.Add(40 * time.Minute), Attempts: 3, Successes: 0, Failures: 3, P50MS: ptr(1500), P95MS: ptr(2900)},
	}}

	var ok, failed, rate, p50, p95 []chart.Point
	for _, b := range s.Buckets {
		succeeded, failures := float64(b.Successes), float64(b.Failures)
		ok = append(ok, chart.Point{T: b.Start, V: &succeeded})
		failed = append(failed, chart.Point{T: b.Start, V: &failures})
		var percent *float64
		if r := b.SuccessRate(); r != nil {
			percent = ptr(*r * 100)
		}
		rate = append(rate, chart.Point{T: b.Start, V: percent})
		p50 = append(p50, chart.Point{T: b.Start, V: b.P50MS})
		p95 = append(p95, chart.Point{T: b.Start, V: b.P95MS})
	}
	window := chart.Chart{Start: s.Start, End: s.End, Step: s.Step}

	deliveries := window
	deliveries.Title = "Deliveries in the last hour"
	deliveries.Series = []chart.Series{{Name: "succeeded", Class: "ok", Points: ok}, {Name: "failed", Class: "bad", Points: failed}}
	success := window
	success.Title, success.Unit = "Success rate in the last hour", chart.Percent
	success.Series = []chart.Series{{Name: "success rate", Points: rate}}
	latency := window
	latency.Title, latency.Unit = "Latency in the last hour", chart.Millis
	latency.Series = []chart.Series{{Name: "p50", Points: p50}, {Name: "p95", Points: p95}}

	for _, svg := range []template.HTML{chart.Bars(deliveries), chart.Lines(success), chart.Lines(latency)} {
		_, desc, _ := strings.Cut(string(svg), "<desc>")
		desc, _, _ = strings.Cut(desc, "</desc>")
		fmt.Println(desc)
	}
	// Output:
	// 14:00 to 15:00 UTC. succeeded: 11 in all, at most 11 in a bucket. failed: 4 in all, at most 3 in a bucket
	// 14:00 to 15:00 UTC. success rate: from 0% to 91.7%
	// 14:00 to 15:00 UTC. p50: from 40 ms to 1.5 s. p95: from 180 ms to 2.9 s
}
