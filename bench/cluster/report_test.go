package main

import (
	"testing"
	"time"

	"github.com/hookline/hookline/bench/internal/seqload"
)

func TestResumption(t *testing.T) {
	start := time.Unix(1000, 0)
	pub := seqload.Published{Interval: 100 * time.Millisecond, Total: 100} // 10 s of publishing
	at := start.Add(3 * time.Second)                                       // the kill; seq 30 is the first scheduled after it
	s := func(d time.Duration) time.Time { return start.Add(d) }
	first := map[int64]time.Time{
		10: s(1100 * time.Millisecond),
		29: s(4 * time.Second), // scheduled before the kill, arrived after it
		31: s(5 * time.Second), // the first after the kill to arrive
		30: s(6500 * time.Millisecond),
	}
	all := []time.Time{s(1100 * time.Millisecond), s(4 * time.Second), s(5 * time.Second), s(6500 * time.Millisecond), s(6600 * time.Millisecond)}
	resumed, gap := resumption(at, pub, first, all, start)
	if resumed != 2*time.Second {
		t.Errorf("resumed after %s, want 2s", resumed)
	}
	// Arrivals after the kill at 4, 5, 6.5 and 6.6 s; publishing ends at
	// 10 s: the longest gap is the last one, 3.4 s.
	if gap != 3400*time.Millisecond {
		t.Errorf("longest gap %s, want 3.4s", gap)
	}

	resumed, gap = resumption(at, pub, map[int64]time.Time{10: s(time.Second)}, []time.Time{s(time.Second)}, start)
	if resumed != -1 || gap != 7*time.Second {
		t.Errorf("nothing after the kill: resumed %s, gap %s; want -1ns and 7s", resumed, gap)
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
