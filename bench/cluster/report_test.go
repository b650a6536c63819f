package main

import (
	"testing"
	"time"

	"github.com/hookline/hookline/bench/internal/seqload"
)

func TestRecovery(t *testing.T) {
	start := time.Unix(1000, 0)
	s := func(d time.Duration) time.Time { return start.Add(d) }
	pub := seqload.Published{Interval: 100 * time.Millisecond, Total: 100, Accepted: map[int64]bool{}} // 10 s of publishing
	for seq := range int64(100) {
		if seq != 95 { // refused: not counted
			pub.Accepted[seq] = true
		}
	}
	at, until := s(3*time.Second), s(8*time.Second) // the kill; seq 30 is the first scheduled after it
	first := map[int64]time.Time{
		10: s(1100 * time.Millisecond),
		29: s(4 * time.Second),         // scheduled before the kill, arrived after it
		31: s(5 * time.Second),         // the first after the kill to arrive: 2 s after it
		30: s(6500 * time.Millisecond), // 3.5 s late
		40: s(4100 * time.Millisecond), // on time
		50: s(5100 * time.Millisecond),
		// 60 never arrives: late from 6 s on
		70: s(7050 * time.Millisecond),
		90: s(9 * time.Second), // after the window
	}
	for seq := int64(61); seq < 80; seq++ {
		if seq != 70 {
			first[seq] = s(time.Duration(seq)*100*time.Millisecond + 50*time.Millisecond)
		}
	}
	all := []time.Time{s(1100 * time.Millisecond), s(4 * time.Second), s(4100 * time.Millisecond), s(5 * time.Second),
		s(5100 * time.Millisecond), s(6150 * time.Millisecond), s(6500 * time.Millisecond), s(7050 * time.Millisecond), s(7950 * time.Millisecond), s(9 * time.Second)}
	r := recovery(at, until, until, pub, first, all, start)
	if r.resumed != 1100*time.Millisecond { // seq 40 at 4.1 s
		t.Errorf("first arrival %s after the kill, want 1.1s", r.resumed)
	}
	if r.gap != 1050*time.Millisecond { // from 5.1 to 6.15 s (from the kill to the first arrival: 1 s)
		t.Errorf("longest gap %s, want 1.05s", r.gap)
	}
	// The last late event is seq 60 (never arrived), scheduled at 6 s: 3 s after the kill.
	if r.lateUntil != 3*time.Second {
		t.Errorf("late until %s after the kill, want 3s", r.lateUntil)
	}

	r = recovery(at, until, until, pub, map[int64]time.Time{10: s(time.Second)}, []time.Time{s(time.Second)}, start)
	if r.resumed != -1 || r.gap != 5*time.Second || r.lateUntil != 4900*time.Millisecond {
		t.Errorf("nothing after the kill: %+v; want resumed -1, gap 5s, late until 4.9s", r)
	}
	// The events of the last second before the next kill are that kill's.
	r = recovery(at, until, until.Add(-time.Second), pub, map[int64]time.Time{10: s(time.Second)}, []time.Time{s(time.Second)}, start)
	if r.lateUntil != 3900*time.Millisecond {
		t.Errorf("late until %s with the next kill at 8 s, want 3.9s", r.lateUntil)
	}
}

func TestBusiest(t *testing.T) {
	for _, c := range []struct {
		counts map[string]int
		want   string
	}{
		{map[string]int{"a": 1, "b": 3, "c": 2}, "b"},
		{map[string]int{"c": 2, "b": 2, "a": 1}, "b"},
		{map[string]int{}, ""},
	} {
		if got := busiest(c.counts); got != c.want {
			t.Errorf("busiest(%v) = %q, want %q", c.counts, got, c.want)
		}
	}
}
