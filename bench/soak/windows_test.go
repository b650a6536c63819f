package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/bench/internal/seqload"
)

func TestWindowsCountEachEventWhereItBelongs(t *testing.T) {
	// 10 events/s for 25 s in windows of 10 s: three windows, the last 5 s.
	ws := newWindows(25*time.Second, 10*time.Second, 10)
	require.Equal(t, 3, ws.count())
	start := time.Unix(1000, 0)
	ws.begin(start)
	at := func(d time.Duration) time.Time { return start.Add(d) }

	// Publishes count in the window they were scheduled in, whenever answered.
	ws.answer(seqload.Answer{Seq: 99, Accepted: true, Latency: 3 * time.Second}) // due at 9.9 s
	ws.answer(seqload.Answer{Seq: 100, Accepted: false})                         // due at 10 s, refused
	ws.answer(seqload.Answer{Seq: 249, Accepted: true, Latency: time.Millisecond})

	// Arrivals count in the window they arrived in, those after the end in the last.
	ws.arrival(seqload.Arrival{Seq: 99, At: at(10050 * time.Millisecond)}) // 150 ms after it was due
	ws.arrival(seqload.Arrival{Seq: 99, At: at(10060 * time.Millisecond), Again: true})
	ws.arrival(seqload.Arrival{Seq: 1, At: at(200 * time.Millisecond)}) // due at 0.1 s
	ws.arrival(seqload.Arrival{Seq: 249, At: at(40 * time.Second)})     // due at 24.9 s
	require.EqualValues(t, 3, ws.deliveredSoFar(), "duplicates are not deliveries")

	ws.lose(150) // due at 15 s
	ws.lose(249)

	w0, w1, w2 := ws.stats(0), ws.stats(1), ws.stats(2)
	require.Equal(t, windowStats{published: 1, accepted: 1, received: 1,
		publishP50: 3 * time.Second, publishP99: 3 * time.Second,
		receiptP50: 100 * time.Millisecond, receiptP99: 100 * time.Millisecond}, w0)
	require.Equal(t, windowStats{published: 1, received: 1, duplicates: 1, lost: 1,
		receiptP50: 150 * time.Millisecond, receiptP99: 150 * time.Millisecond}, w1)
	require.Equal(t, windowStats{published: 1, accepted: 1, received: 1, lost: 1,
		publishP50: time.Millisecond, publishP99: time.Millisecond,
		receiptP50: 15100 * time.Millisecond, receiptP99: 15100 * time.Millisecond}, w2)

	from, to := ws.bounds(2, 25*time.Second)
	require.Equal(t, [2]time.Duration{20 * time.Second, 25 * time.Second}, [2]time.Duration{from, to})
}

func TestWindowPercentiles(t *testing.T) {
	ws := newWindows(time.Minute, time.Minute, 1000)
	start := time.Unix(1000, 0)
	ws.begin(start)
	// 200 arrivals, 1 ms to 200 ms after they were due, in no order.
	for i := range int64(200) {
		seq := (i * 7) % 200
		ws.arrival(seqload.Arrival{Seq: seq, At: start.Add(time.Duration(seq)*time.Millisecond + time.Duration(seq+1)*time.Millisecond)})
	}
	s := ws.stats(0)
	require.Equal(t, 100*time.Millisecond, s.receiptP50)
	require.Equal(t, 198*time.Millisecond, s.receiptP99)
}

func TestCompare(t *testing.T) {
	for _, c := range []struct {
		first, last float64
		within, ok  bool
	}{
		{10, 10, true, true},
		{10, 11, true, true},
		{10, 9, true, true},
		{10, 11.5, false, true},
		{10, 8.5, false, true},
		{0, 5, false, false},
	} {
		_, within, ok := compare(c.first, c.last)
		require.Equal(t, c.ok, ok, "compare(%v, %v)", c.first, c.last)
		require.Equal(t, c.within, within, "compare(%v, %v)", c.first, c.last)
	}
}

func TestSlowestSecondsAreEachWindowsMostOftenLate(t *testing.T) {
	ws := newWindows(20*time.Second, 10*time.Second, 10) // seq 10 is due at 1 s; two windows
	start := time.Unix(1000, 0)
	ws.begin(start)
	arrive := func(seq int64, after time.Duration) {
		ws.arrival(seqload.Arrival{Seq: seq, At: start.Add(ws.scheduled(seq) + after)})
	}
	arrive(0, 10*time.Millisecond) // second 0: on time only
	arrive(10, 300*time.Millisecond)
	arrive(11, 200*time.Millisecond) // second 1: two late, the latest 300 ms
	arrive(20, 900*time.Millisecond) // second 2: one late, 900 ms
	arrive(21, time.Millisecond)
	arrive(30, 150*time.Millisecond) // second 3: one late, 150 ms
	ws.arrival(seqload.Arrival{Seq: 30, At: start.Add(5 * time.Second), Again: true})
	arrive(120, 5*time.Second) // second 12, the second window: one late

	got := ws.slowest(2)
	require.Equal(t, [][]slowSecond{
		{
			{at: start.Add(time.Second), second: second{received: 2, late: 2, worst: 300 * time.Millisecond}},
			{at: start.Add(2 * time.Second), second: second{received: 2, late: 1, worst: 900 * time.Millisecond}},
		},
		{{at: start.Add(12 * time.Second), second: second{received: 1, late: 1, worst: 5 * time.Second}}},
	}, got, "most often late first, ties by the latest arrival; listed in time order; duplicates not counted")
	require.Len(t, ws.slowest(10)[0], 3, "seconds with no late arrival are not listed")
}
