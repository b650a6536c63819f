package breaker

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/redistest"
)

// t0 is the fake clock's origin; tests pass t0.Add(offset) as now.
var t0 = time.UnixMilli(1_700_000_000_000)

// testConfig is the docs/DESIGN.md §7 default configuration.
func testConfig() Config {
	return Config{
		ErrorThresholdPercentage: 60,
		MinimumThroughput:        20,
		Window:                   60 * time.Second,
		SleepWindow:              30 * time.Second,
		HalfOpenMaxCalls:         5,
		HalfOpenSuccessThreshold: 60,
	}
}

type fixture struct {
	t      *testing.T
	ctx    context.Context
	rdb    redis.UniversalClient
	prefix string
	b      *Breaker
	cfg    Config
}

func newFixture(t *testing.T, mode redistest.Mode) *fixture {
	t.Helper()
	t.Parallel()
	rdb := redistest.Client(t, mode)
	prefix := redistest.PrefixOn(t, rdb)
	return &fixture{t: t, ctx: context.Background(), rdb: rdb, prefix: prefix, b: New(rdb, prefix), cfg: testConfig()}
}

func (f *fixture) allow(id string, now time.Time) (Verdict, Transition) {
	f.t.Helper()
	v, tr, err := f.b.Allow(f.ctx, id, f.cfg, now)
	require.NoError(f.t, err)
	return v, tr
}

func (f *fixture) record(id string, now time.Time, success, probe bool) Transition {
	f.t.Helper()
	state, tr, err := f.b.Record(f.ctx, id, f.cfg, now, success, probe)
	require.NoError(f.t, err)
	snap, err := f.b.Snapshot(f.ctx, id, f.cfg, now)
	require.NoError(f.t, err)
	require.Equal(f.t, snap.State, state, "Record answers the state it left")
	return tr
}

// recordN records n identical outcomes and returns the transitions seen.
func (f *fixture) recordN(id string, now time.Time, n int, success, probe bool) []Transition {
	f.t.Helper()
	var seen []Transition
	for range n {
		if tr := f.record(id, now, success, probe); tr != NoTransition {
			seen = append(seen, tr)
		}
	}
	return seen
}

func (f *fixture) snapshot(id string, now time.Time) Snapshot {
	f.t.Helper()
	s, err := f.b.Snapshot(f.ctx, id, f.cfg, now)
	require.NoError(f.t, err)
	return s
}

// open opens a closed circuit at now with MinimumThroughput failures.
func (f *fixture) open(id string, now time.Time) {
	f.t.Helper()
	require.Equal(f.t, []Transition{Opened}, f.recordN(id, now, f.cfg.MinimumThroughput, false, false))
}

// halfOpen moves an open circuit to half-open at now and takes every probe.
func (f *fixture) halfOpen(id string, now time.Time) {
	f.t.Helper()
	v, tr := f.allow(id, now)
	require.Equal(f.t, HalfOpened, tr)
	require.True(f.t, v.Allowed && v.Probe)
	for range f.cfg.HalfOpenMaxCalls - 1 {
		v, tr = f.allow(id, now)
		require.Equal(f.t, NoTransition, tr)
		require.True(f.t, v.Allowed && v.Probe)
	}
}

func TestBelowMinimumThroughputDoesNotOpen(t *testing.T) {
	redistest.EachMode(t, func(t *testing.T, mode redistest.Mode) {
		f := newFixture(t, mode)
		require.Empty(t, f.recordN("wh", t0, 19, false, false))
		v, _ := f.allow("wh", t0)
		require.Equal(t, Verdict{Allowed: true, State: Closed}, v)
		require.Equal(t, Opened, f.record("wh", t0, false, false), "the 20th failure reaches the minimum throughput")
	})
}

func TestErrorThreshold(t *testing.T) {
	redistest.EachMode(t, func(t *testing.T, mode redistest.Mode) {
		t.Parallel()
		tests := []struct {
			failures int
			want     []Transition
		}{
			{failures: 12, want: []Transition{Opened}},
			{failures: 11, want: nil},
		}
		for _, tt := range tests {
			t.Run(fmt.Sprintf("%d of 20", tt.failures), func(t *testing.T) {
				f := newFixture(t, mode)
				seen := f.recordN("wh", t0, 20-tt.failures, true, false)
				seen = append(seen, f.recordN("wh", t0.Add(time.Second), tt.failures, false, false)...)
				require.Equal(t, tt.want, seen)
				s := f.snapshot("wh", t0.Add(time.Second))
				require.Equal(t, 20-tt.failures, s.Successes)
				require.Equal(t, tt.failures, s.Failures)
			})
		}
	})
}

func TestOutcomesOutsideTheWindowDoNotCount(t *testing.T) {
	redistest.EachMode(t, func(t *testing.T, mode redistest.Mode) {
		t.Parallel()
		tests := []struct {
			name  string
			later time.Duration
			want  []Transition
		}{
			{name: "past the window", later: 61 * time.Second, want: nil},
			{name: "inside the window", later: 30 * time.Second, want: []Transition{Opened}},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				f := newFixture(t, mode)
				require.Empty(t, f.recordN("wh", t0, 15, false, false))
				require.Equal(t, tt.want, f.recordN("wh", t0.Add(tt.later), 5, false, false))
			})
		}
		t.Run("old buckets are pruned", func(t *testing.T) {
			f := newFixture(t, mode)
			f.recordN("wh", t0, 3, false, false)
			f.recordN("wh", t0.Add(time.Second), 3, true, false)
			later := t0.Add(f.cfg.Window + time.Second)
			f.recordN("wh", later, 2, true, false)
			s := f.snapshot("wh", later)
			require.Equal(t, 2, s.Successes)
			require.Zero(t, s.Failures)
			fields, err := f.rdb.HKeys(f.ctx, f.b.keys("wh")[1]).Result()
			require.NoError(t, err)
			require.Equal(t, []string{fmt.Sprintf("%d:s", later.Unix())}, fields)
		})
	})
}

func TestOpenRefusesForTheRestOfTheSleepWindow(t *testing.T) {
	redistest.EachMode(t, func(t *testing.T, mode redistest.Mode) {
		f := newFixture(t, mode)
		f.open("wh", t0)
		v, tr := f.allow("wh", t0.Add(10*time.Second))
		require.Equal(t, NoTransition, tr)
		require.Equal(t, Verdict{State: Open, RetryIn: 20 * time.Second}, v)
		v, _ = f.allow("wh", t0.Add(30*time.Second-time.Millisecond))
		require.Equal(t, Verdict{State: Open, RetryIn: time.Millisecond}, v)
		require.Equal(t, Open, f.snapshot("wh", t0).State, "a refused Allow changes nothing")
	})
}

func TestHalfOpenAfterTheSleepWindow(t *testing.T) {
	redistest.EachMode(t, func(t *testing.T, mode redistest.Mode) {
		f := newFixture(t, mode)
		f.open("wh", t0)
		now := t0.Add(30 * time.Second)
		f.halfOpen("wh", now)
		v, tr := f.allow("wh", now.Add(time.Second))
		require.Equal(t, NoTransition, tr)
		require.Equal(t, Verdict{State: HalfOpen, RetryIn: 5 * time.Second}, v, "beyond HalfOpenMaxCalls")
		s := f.snapshot("wh", now)
		require.Equal(t, HalfOpen, s.State)
		require.Equal(t, 5, s.ProbesIssued)
	})
}

func TestClosesOnEnoughProbeSuccesses(t *testing.T) {
	redistest.EachMode(t, func(t *testing.T, mode redistest.Mode) {
		f := newFixture(t, mode)
		f.open("wh", t0)
		now := t0.Add(30 * time.Second)
		f.halfOpen("wh", now)
		require.Equal(t, NoTransition, f.record("wh", now, false, true))
		require.Equal(t, NoTransition, f.record("wh", now, true, true))
		require.Equal(t, NoTransition, f.record("wh", now, false, true))
		require.Equal(t, NoTransition, f.record("wh", now, true, true))
		require.Equal(t, ClosedAgain, f.record("wh", now, true, true), "3 of 5")
		v, tr := f.allow("wh", now)
		require.Equal(t, NoTransition, tr)
		require.Equal(t, Verdict{Allowed: true, State: Closed}, v)
		require.Equal(t, Snapshot{State: Closed, SleepWindow: 30 * time.Second}, f.snapshot("wh", now),
			"window cleared, sleep window at base")
	})
}

func TestReopensWithADoubledCappedSleepWindow(t *testing.T) {
	redistest.EachMode(t, func(t *testing.T, mode redistest.Mode) {
		f := newFixture(t, mode)
		f.cfg.MaxSleepWindow = 100 * time.Second
		f.open("wh", t0)
		now := t0
		for _, want := range []time.Duration{60 * time.Second, 100 * time.Second, 100 * time.Second} {
			now = now.Add(f.snapshot("wh", now).SleepWindow)
			f.halfOpen("wh", now)
			require.Empty(t, f.recordN("wh", now, 2, true, true))
			require.Empty(t, f.recordN("wh", now, 2, false, true))
			require.Equal(t, Reopened, f.record("wh", now, false, true), "2 of 5 succeeded")
			s := f.snapshot("wh", now)
			require.Equal(t, Open, s.State)
			require.Equal(t, want, s.SleepWindow)
			require.True(t, now.Equal(s.OpenedAt))
			v, _ := f.allow("wh", now.Add(want-time.Millisecond))
			require.Equal(t, Verdict{State: Open, RetryIn: time.Millisecond}, v)
		}

		// A recovery resets it.
		now = now.Add(100 * time.Second)
		f.halfOpen("wh", now)
		require.Equal(t, []Transition{ClosedAgain}, f.recordN("wh", now, 3, true, true))
		f.open("wh", now)
		require.Equal(t, 30*time.Second, f.snapshot("wh", now).SleepWindow)
	})
}

func TestStragglersOnlyFeedTheWindow(t *testing.T) {
	redistest.EachMode(t, func(t *testing.T, mode redistest.Mode) {
		f := newFixture(t, mode)
		f.open("wh", t0)
		require.Empty(t, f.recordN("wh", t0, 30, true, false), "non-probe outcomes while open")
		require.Empty(t, f.recordN("wh", t0, 3, true, true), "probe outcomes while open belong to no period")
		now := t0.Add(30 * time.Second)
		f.halfOpen("wh", now)
		require.Empty(t, f.recordN("wh", now, 10, true, false), "non-probe successes while half-open")
		require.Empty(t, f.recordN("wh", now, 10, false, false), "non-probe failures while half-open")
		s := f.snapshot("wh", now)
		require.Equal(t, HalfOpen, s.State)
		require.Equal(t, 43, s.Successes)
		require.Equal(t, 30, s.Failures)
		require.Zero(t, s.ProbeSuccesses+s.ProbeFailures)
	})
}

func TestLostProbesRestartTheHalfOpenPeriod(t *testing.T) {
	redistest.EachMode(t, func(t *testing.T, mode redistest.Mode) {
		f := newFixture(t, mode)
		f.open("wh", t0)
		now := t0.Add(30 * time.Second)
		f.halfOpen("wh", now)
		f.record("wh", now, true, true)
		f.record("wh", now, false, true)
		v, tr := f.allow("wh", now.Add(probeLease-time.Millisecond))
		require.Equal(t, NoTransition, tr)
		require.False(t, v.Allowed)
		f.halfOpen("wh", now.Add(probeLease))
		s := f.snapshot("wh", now.Add(probeLease))
		require.Equal(t, 5, s.ProbesIssued)
		require.Zero(t, s.ProbeSuccesses+s.ProbeFailures)
	})
}

func TestConcurrentProbesNeverExceedHalfOpenMaxCalls(t *testing.T) {
	redistest.EachMode(t, func(t *testing.T, mode redistest.Mode) {
		f := newFixture(t, mode)
		const workers, calls, rounds = 8, 25, 12
		for round := range rounds {
			require.NoError(t, f.b.Reset(f.ctx, "wh"))
			opened := t0.Add(time.Duration(round) * time.Hour)
			f.open("wh", opened)
			now := opened.Add(f.cfg.SleepWindow)
			var probes, halfOpened atomic.Int64
			errs := make(chan error, workers)
			var wg sync.WaitGroup
			for w := range workers {
				wg.Go(func() {
					errs <- hammer(f, now, calls, round%2 == 0 || w%2 == 0, &probes, &halfOpened)
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				require.NoError(t, err)
			}
			require.Equal(t, int64(1), halfOpened.Load(), "round %d: one half-open period", round)
			require.LessOrEqual(t, probes.Load(), int64(f.cfg.HalfOpenMaxCalls), "round %d", round)
			require.GreaterOrEqual(t, probes.Load(), int64(3), "round %d: a decision takes 3 probes", round)
		}
	})
}

// hammer calls Allow and Record at now as fast as it can, recording every
// probe it is given with the outcome success.
func hammer(f *fixture, now time.Time, calls int, success bool, probes, halfOpened *atomic.Int64) error {
	for range calls {
		v, tr, err := f.b.Allow(f.ctx, "wh", f.cfg, now)
		if err != nil {
			return err
		}
		if tr == HalfOpened {
			halfOpened.Add(1)
		}
		if !v.Allowed {
			continue
		}
		if v.Probe {
			probes.Add(1)
		}
		if _, _, err := f.b.Record(f.ctx, "wh", f.cfg, now, success || !v.Probe, v.Probe); err != nil {
			return err
		}
	}
	return nil
}

func TestReset(t *testing.T) {
	redistest.EachMode(t, func(t *testing.T, mode redistest.Mode) {
		f := newFixture(t, mode)
		f.open("wh", t0)
		now := t0.Add(30 * time.Second)
		f.halfOpen("wh", now)
		require.Equal(t, []Transition{Reopened}, f.recordN("wh", now, 3, false, true))
		require.NoError(t, f.b.Reset(f.ctx, "wh"))
		v, _ := f.allow("wh", now)
		require.Equal(t, Verdict{Allowed: true, State: Closed}, v)
		require.Equal(t, Snapshot{State: Closed, SleepWindow: 30 * time.Second}, f.snapshot("wh", now))
		n, err := f.rdb.Exists(f.ctx, f.b.keys("wh")...).Result()
		require.NoError(t, err)
		require.Zero(t, n)
		f.open("wh", now)
		require.Equal(t, 30*time.Second, f.snapshot("wh", now).SleepWindow, "back to the base sleep window")
	})
}

func TestSnapshot(t *testing.T) {
	redistest.EachMode(t, func(t *testing.T, mode redistest.Mode) {
		f := newFixture(t, mode)
		f.recordN("wh", t0, 3, true, false)
		f.recordN("wh", t0.Add(2*time.Second), 4, false, false)
		require.Equal(t, Snapshot{State: Closed, SleepWindow: 30 * time.Second, Successes: 3, Failures: 4},
			f.snapshot("wh", t0.Add(2*time.Second)))
		require.Equal(t, Snapshot{State: Closed, SleepWindow: 30 * time.Second, Failures: 4},
			f.snapshot("wh", t0.Add(61*time.Second)), "the first second left the window")

		opened := t0.Add(3 * time.Second)
		f.recordN("wh", opened, 13, false, false)
		require.Equal(t, Snapshot{State: Open, OpenedAt: opened, SleepWindow: 30 * time.Second, Successes: 3, Failures: 17},
			f.snapshot("wh", opened))

		now := opened.Add(30 * time.Second)
		f.allow("wh", now)
		f.allow("wh", now)
		f.record("wh", now, true, true)
		require.Equal(t, Snapshot{
			State: HalfOpen, OpenedAt: opened, SleepWindow: 30 * time.Second,
			Successes: 4, Failures: 17, ProbesIssued: 2, ProbeSuccesses: 1,
		}, f.snapshot("wh", now))
	})
}

func TestWebhooksAreIndependent(t *testing.T) {
	redistest.EachMode(t, func(t *testing.T, mode redistest.Mode) {
		f := newFixture(t, mode)
		f.open("a", t0)
		v, _ := f.allow("b", t0)
		require.True(t, v.Allowed)
		require.Equal(t, Closed, f.snapshot("b", t0).State)
		other := New(f.rdb, redistest.Prefix(t))
		v, _, err := other.Allow(f.ctx, "a", f.cfg, t0)
		require.NoError(t, err)
		require.True(t, v.Allowed, "another prefix is another set of circuits")
	})
}

func TestEveryKeyWrittenExpires(t *testing.T) {
	redistest.EachMode(t, func(t *testing.T, mode redistest.Mode) {
		f := newFixture(t, mode)
		requireTTLs := func(step string, wantKeys int) {
			t.Helper()
			keys, err := redistest.Keys(f.ctx, f.rdb, f.prefix)
			require.NoError(t, err)
			require.Len(t, keys, wantKeys, step)
			for _, k := range keys {
				ttl, err := f.rdb.PTTL(f.ctx, k).Result()
				require.NoError(t, err)
				require.Greater(t, ttl, time.Duration(0), "%s: %s", step, k)
				require.LessOrEqual(t, ttl, f.cfg.ttl(), "%s: %s", step, k)
			}
		}
		f.recordN("wh", t0, 5, true, false)
		requireTTLs("closed", 1)
		f.open("wh", t0)
		requireTTLs("opened", 2)
		now := t0.Add(30 * time.Second)
		f.halfOpen("wh", now)
		requireTTLs("half-open", 2)
		f.record("wh", now, true, true)
		requireTTLs("probe recorded", 2)
		f.recordN("wh", now, 3, false, true)
		requireTTLs("reopened", 2)
		now = now.Add(60 * time.Second)
		f.halfOpen("wh", now)
		f.recordN("wh", now, 3, true, true)
		requireTTLs("closed again", 0)
	})
}

func TestInvalidConfig(t *testing.T) {
	redistest.EachMode(t, func(t *testing.T, mode redistest.Mode) {
		f := newFixture(t, mode)
		tests := map[string]func(*Config){
			"threshold 0":        func(c *Config) { c.ErrorThresholdPercentage = 0 },
			"threshold 101":      func(c *Config) { c.ErrorThresholdPercentage = 101 },
			"no throughput":      func(c *Config) { c.MinimumThroughput = 0 },
			"sub-second window":  func(c *Config) { c.Window = 999 * time.Millisecond },
			"no sleep window":    func(c *Config) { c.SleepWindow = 0 },
			"no probes":          func(c *Config) { c.HalfOpenMaxCalls = 0 },
			"success 0":          func(c *Config) { c.HalfOpenSuccessThreshold = 0 },
			"negative max sleep": func(c *Config) { c.MaxSleepWindow = -time.Second },
		}
		for name, mutate := range tests {
			cfg := testConfig()
			mutate(&cfg)
			require.ErrorIs(t, cfg.Validate(), ErrInvalidConfig, name)
			_, _, err := f.b.Allow(f.ctx, "wh", cfg, t0)
			require.ErrorIs(t, err, ErrInvalidConfig, name)
			_, _, err = f.b.Record(f.ctx, "wh", cfg, t0, false, false)
			require.ErrorIs(t, err, ErrInvalidConfig, name)
		}
		require.NoError(t, testConfig().Validate())
	})
}

func TestProbeSuccessesNeeded(t *testing.T) {
	t.Parallel()
	tests := []struct{ threshold, calls, want int }{
		{60, 5, 3}, {50, 5, 3}, {40, 5, 2}, {100, 5, 5}, {1, 5, 1}, {100, 1, 1}, {50, 4, 2},
	}
	for _, tt := range tests {
		c := Config{HalfOpenSuccessThreshold: tt.threshold, HalfOpenMaxCalls: tt.calls}
		require.Equal(t, tt.want, c.probeSuccessesNeeded(), "%d%% of %d", tt.threshold, tt.calls)
	}
}

// Queued calls send the scripts' digests only; when Redis has lost a script
// (a restart, SCRIPT FLUSH), Result runs it with its text, once. A
// parallel test may load the scripts again between the flush and the
// pipeline, so the test tries a few times until a pipeline has met
// NOSCRIPT, for each of the two scripts.
func TestQueuedCallsAfterScriptFlush(t *testing.T) {
	redistest.EachMode(t, func(t *testing.T, mode redistest.Mode) {
		f := newFixture(t, mode)
		metAllow, metRecord := false, false
		for i := 0; i < 100 && (!metAllow || !metRecord); i++ {
			id := fmt.Sprintf("flushed-%d", i)
			require.NoError(t, f.rdb.ScriptFlush(f.ctx).Err())
			pipe := f.b.Pipeline()
			allow, err := f.b.QueueAllow(f.ctx, pipe, id, f.cfg, t0)
			require.NoError(t, err)
			rec, err := f.b.QueueRecord(f.ctx, pipe, id, f.cfg, t0, false, false)
			require.NoError(t, err)
			_, _ = pipe.Exec(f.ctx)
			metAllow = metAllow || allow.call.MetNoScript()
			metRecord = metRecord || rec.call.MetNoScript()
			v, tr, err := allow.Result()
			require.NoError(t, err)
			require.True(t, v.Allowed)
			require.Equal(t, NoTransition, tr)
			state, _, err := rec.Result()
			require.NoError(t, err)
			require.Equal(t, Closed, state)
			snap, err := f.b.Snapshot(f.ctx, id, f.cfg, t0)
			require.NoError(t, err)
			require.Equal(t, 1, snap.Failures, "the outcome is counted exactly once")
		}
		require.True(t, metAllow, "no pipeline's allow met an empty script cache")
		require.True(t, metRecord, "no pipeline's record met an empty script cache")
	})
}

func (f *fixture) successes(id string, second int64, n int) {
	f.t.Helper()
	pipe := f.b.Pipeline()
	call, err := f.b.QueueSuccesses(f.ctx, pipe, id, f.cfg, second, n)
	require.NoError(f.t, err)
	_, _ = pipe.Exec(f.ctx)
	require.NoError(f.t, call.Err())
}

// Successes counted together weigh in the window as if recorded one by one.
func TestQueuedSuccessesCountInTheWindow(t *testing.T) {
	redistest.EachMode(t, func(t *testing.T, mode redistest.Mode) {
		f := newFixture(t, mode)
		f.successes("wh", t0.Unix(), 9)
		require.Equal(t, 9, f.snapshot("wh", t0).Successes)
		// 13 failures of 22 outcomes: under the threshold of 60 %.
		require.Empty(t, f.recordN("wh", t0.Add(time.Second), 13, false, false))
		require.Equal(t, Opened, f.record("wh", t0.Add(time.Second), false, false), "14 of 23")
		ttl, err := f.rdb.PTTL(f.ctx, f.b.keys("wh")[1]).Result()
		require.NoError(t, err)
		require.Positive(t, ttl)
	})
}

// A webhook whose outcomes are all successes counted together still has
// its old seconds pruned, once the window holds twice its seconds.
func TestQueuedSuccessesPruneOldSeconds(t *testing.T) {
	redistest.EachMode(t, func(t *testing.T, mode redistest.Mode) {
		f := newFixture(t, mode)
		f.cfg.Window = 5 * time.Second
		start := t0.Unix()
		for s := start; s < start+12; s++ {
			f.successes("wh", s, 1)
		}
		fields, err := f.rdb.HLen(f.ctx, f.b.keys("wh")[1]).Result()
		require.NoError(t, err)
		require.Equal(t, int64(12), fields, "12 seconds: not above twice the window plus 2")
		f.successes("wh", start+12, 1)
		keys, err := f.rdb.HKeys(f.ctx, f.b.keys("wh")[1]).Result()
		require.NoError(t, err)
		var want []string
		for s := start + 7; s <= start+12; s++ {
			want = append(want, fmt.Sprintf("%d:s", s))
		}
		require.ElementsMatch(t, want, keys, "seconds up to 12 - 5 - 1 deleted")
		require.Equal(t, 5, f.snapshot("wh", time.Unix(start+12, 0)).Successes, "the window's 5 seconds")
	})
}
