package main

import (
	"cmp"
	"slices"
	"sync"
	"time"

	"github.com/hookline/hookline/bench/internal/report"
	"github.com/hookline/hookline/bench/internal/seqload"
)

// windows sums a run window by window, as it goes: each publish in the
// window it was scheduled in, each arrival in the window it arrived in
// (those after the last window, while the run drains, in the last), each
// loss in the window its event was scheduled in. It is safe for
// concurrent use: the publishing clients and the receivers report to it
// from their own goroutines.
type windows struct {
	length   time.Duration // of each window
	interval time.Duration // between scheduled publishes

	mu        sync.Mutex
	start     time.Time // the first publish's scheduled time
	w         []window
	delivered int64             // first arrivals so far, over every webhook
	seconds   map[int64]*second // by the second their event was scheduled in, from the start
}

// second is what became of the first arrivals of the events scheduled in
// one second of the run.
type second struct {
	received, late int64 // late: more than lateAfter after their scheduled send
	worst          time.Duration
}

// lateAfter is the receipt latency past which an arrival counts as late
// in the slowest seconds (slowest).
const lateAfter = 100 * time.Millisecond

// window is what happened in one window.
type window struct {
	published, accepted  int64
	publish              []time.Duration // latency of each accepted publish
	received, duplicates int64
	receipt              []time.Duration // of each first arrival, from its scheduled publish
	lost                 int64
}

// newWindows prepares the windows of a run publishing for duration at
// rate events/s, each window length long (the last may be shorter).
func newWindows(duration, length time.Duration, rate int) *windows {
	n := int((duration + length - 1) / length)
	return &windows{length: length, interval: time.Second / time.Duration(rate), w: make([]window, max(n, 1)),
		seconds: map[int64]*second{}}
}

// begin sets the run's start, the first publish's scheduled time; the
// windows count from it.
func (ws *windows) begin(start time.Time) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	ws.start = start
}

// index returns the window holding the moment d after the start.
func (ws *windows) index(d time.Duration) int {
	return min(max(int(d/ws.length), 0), len(ws.w)-1)
}

// scheduled returns how long after the start event seq was due.
func (ws *windows) scheduled(seq int64) time.Duration { return time.Duration(seq) * ws.interval }

// answer counts a publish's answer (seqload.PublishObserved).
func (ws *windows) answer(a seqload.Answer) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	w := &ws.w[ws.index(ws.scheduled(a.Seq))]
	w.published++
	if a.Accepted {
		w.accepted++
		w.publish = append(w.publish, a.Latency)
	}
}

// arrival counts an event's arrival at one of the receivers
// (seqload.NewObservedReceiver).
func (ws *windows) arrival(a seqload.Arrival) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	w := &ws.w[ws.index(a.At.Sub(ws.start))]
	if a.Again {
		w.duplicates++
		return
	}
	w.received++
	ws.delivered++
	due := ws.scheduled(a.Seq)
	latency := a.At.Sub(ws.start.Add(due))
	w.receipt = append(w.receipt, latency)
	sec := ws.seconds[int64(due/time.Second)]
	if sec == nil {
		sec = &second{}
		ws.seconds[int64(due/time.Second)] = sec
	}
	sec.received++
	if latency > lateAfter {
		sec.late++
	}
	sec.worst = max(sec.worst, latency)
}

// slowSecond is one second of the run among the slowest.
type slowSecond struct {
	at time.Time // the second's start, as scheduled
	second
}

// slowest returns, for each window, the n seconds scheduled in it whose
// events arrived late most often (the latest arrival breaking ties), in
// the order they happened: the moments to look for in the processes' and
// Postgres's logs. Seconds with no late arrival are left out.
func (ws *windows) slowest(n int) [][]slowSecond {
	ws.mu.Lock()
	byWindow := make([][]slowSecond, len(ws.w))
	for s, sec := range ws.seconds {
		if sec.late > 0 {
			i := ws.index(time.Duration(s) * time.Second)
			byWindow[i] = append(byWindow[i], slowSecond{at: ws.start.Add(time.Duration(s) * time.Second), second: *sec})
		}
	}
	ws.mu.Unlock()
	for i, all := range byWindow {
		slices.SortFunc(all, func(a, b slowSecond) int {
			if c := cmp.Compare(b.late, a.late); c != 0 {
				return c
			}
			return cmp.Compare(b.worst, a.worst)
		})
		all = all[:min(n, len(all))]
		slices.SortFunc(all, func(a, b slowSecond) int { return a.at.Compare(b.at) })
		byWindow[i] = all
	}
	return byWindow
}

// lose counts an accepted event that one of the webhooks never received.
func (ws *windows) lose(seq int64) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	ws.w[ws.index(ws.scheduled(seq))].lost++
}

// deliveredSoFar returns how many deliveries have arrived, over every
// webhook, duplicates not counted.
func (ws *windows) deliveredSoFar() int64 {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	return ws.delivered
}

// count returns the number of windows.
func (ws *windows) count() int { return len(ws.w) }

// bounds returns when window i begins and ends, from the start; the last
// ends at the end of publishing.
func (ws *windows) bounds(i int, duration time.Duration) (from, to time.Duration) {
	return time.Duration(i) * ws.length, min(time.Duration(i+1)*ws.length, duration)
}

// windowStats are one window's figures.
type windowStats struct {
	published, accepted, received, duplicates, lost int64
	publishP50, publishP99, receiptP50, receiptP99  time.Duration
}

// stats returns window i's figures so far.
func (ws *windows) stats(i int) windowStats {
	ws.mu.Lock()
	w := ws.w[i]
	publish, receipt := slices.Clone(w.publish), slices.Clone(w.receipt)
	ws.mu.Unlock()
	report.Sort(publish)
	report.Sort(receipt)
	return windowStats{
		published: w.published, accepted: w.accepted, received: w.received, duplicates: w.duplicates, lost: w.lost,
		publishP50: report.Percentile(publish, 50), publishP99: report.Percentile(publish, 99),
		receiptP50: report.Percentile(receipt, 50), receiptP99: report.Percentile(receipt, 99),
	}
}

// tolerance is how far the last window's figure may be from the first's
// for the run to count as steady.
const tolerance = 0.10

// compare returns last/first and whether it is within tolerance of 1;
// ok is false when first is not positive (nothing to compare with).
func compare(first, last float64) (ratio float64, within, ok bool) {
	if first <= 0 {
		return 0, false, false
	}
	ratio = last / first
	return ratio, ratio >= 1-tolerance && ratio <= 1+tolerance, true
}
