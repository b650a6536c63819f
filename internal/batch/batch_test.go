package batch

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestBatchesConcurrentRequests(t *testing.T) {
	t.Parallel()
	gate := make(chan struct{})
	var calls, biggest, firstSize atomic.Int64
	b := New(func(_ context.Context, in []int) ([]int, error) {
		if calls.Add(1) == 1 {
			firstSize.Store(int64(len(in)))
			<-gate // hold the first batch so that the others pile up
		}
		if n := int64(len(in)); n > biggest.Load() {
			biggest.Store(n)
		}
		out := make([]int, len(in))
		for i, v := range in {
			out[i] = v * 2
		}
		return out, nil
	}, 64, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = b.Run(ctx); close(done) }()

	var wg sync.WaitGroup
	results := make([]int, 100)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := b.Do(context.Background(), i)
			require.NoError(t, err)
			results[i] = out
		}()
	}
	require.Eventually(t, func() bool { return firstSize.Load()+int64(len(b.in)) == 100 },
		5*time.Second, time.Millisecond, "every request is in the first batch or waiting behind it")
	close(gate)
	wg.Wait()
	for i, r := range results {
		require.Equal(t, 2*i, r)
	}
	require.Less(t, calls.Load(), int64(100), "fewer calls than requests")
	require.Greater(t, biggest.Load(), int64(1))
	cancel()
	<-done
}

func TestFailedBatchRetriesEachAlone(t *testing.T) {
	t.Parallel()
	bad := errors.New("bad input")
	b := New(func(_ context.Context, in []int) ([]int, error) {
		for _, v := range in {
			if v < 0 {
				return nil, bad
			}
		}
		return in, nil
	}, 16, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = b.Run(ctx) }()
	var wg sync.WaitGroup
	errs := make([]error, 10)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v := i
			if i == 3 {
				v = -1
			}
			_, errs[i] = b.Do(context.Background(), v)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if i == 3 {
			require.ErrorIs(t, err, bad)
		} else {
			require.NoError(t, err, "request %d is not failed by its neighbour", i)
		}
	}
}

func TestRunDrainsBeforeReturning(t *testing.T) {
	t.Parallel()
	b := New(func(_ context.Context, in []int) ([]int, error) { return in, nil }, 4, 1)
	calls := make([]*call[int, int], 10)
	for i := range calls {
		calls[i] = &call[int, int]{in: i, done: make(chan struct{})}
		b.in <- calls[i]
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.NoError(t, b.Run(ctx))
	for i, c := range calls {
		<-c.done
		require.Equal(t, i, c.out)
	}
}

// sizedBatcher is a batcher of ints answering each with itself; sizes
// returns the sizes of the batches it ran, in order.
func sizedBatcher(maxBatch, workers int) (b *Batcher[int, int], sizes func() []int) {
	return sizedBatcherThen(maxBatch, workers, nil)
}

// sizedBatcherThen is sizedBatcher whose k-th batch (from 1) calls then(k)
// after its size is recorded, before it answers; then may be nil.
func sizedBatcherThen(maxBatch, workers int, then func(k int)) (b *Batcher[int, int], sizes func() []int) {
	var mu sync.Mutex
	var got []int
	b = New(func(_ context.Context, in []int) ([]int, error) {
		mu.Lock()
		got = append(got, len(in))
		k := len(got)
		mu.Unlock()
		if then != nil {
			then(k)
		}
		return in, nil
	}, maxBatch, workers)
	return b, func() []int {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(got)
	}
}

// start runs b until the returned stop is called; stop returns once Run
// has returned.
func start[In, Out any](b *Batcher[In, Out]) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = b.Run(ctx); close(done) }()
	return func() {
		cancel()
		<-done
	}
}

func TestWindowCollectsRequestsArrivingOneAfterAnother(t *testing.T) {
	t.Parallel()
	// A window far longer than the test and a batch of three: the batch
	// runs only once it is full, however far apart its requests come, and
	// the idle runners take none of them meanwhile.
	b, sizes := sizedBatcher(3, 4)
	b.Window(time.Hour)
	stop := start(b)

	var wg sync.WaitGroup
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := b.Do(context.Background(), i)
			require.NoError(t, err)
			require.Equal(t, i, out)
		}()
		// The next request is sent only once this one was taken.
		require.Eventually(t, func() bool { return len(b.in) == 0 }, 5*time.Second, time.Millisecond)
	}
	wg.Wait()
	require.Equal(t, []int{3}, sizes())
	stop()
}

func TestWindowEndsAPartialBatch(t *testing.T) {
	t.Parallel()
	b := New(func(_ context.Context, in []int) ([]int, error) { return in, nil }, 100, 2).Window(5 * time.Millisecond)
	stop := start(b)
	out, err := b.Do(context.Background(), 7)
	require.NoError(t, err)
	require.Equal(t, 7, out)
	stop()
}

func TestWindowStopsWhenContextEnds(t *testing.T) {
	t.Parallel()
	b := New(func(_ context.Context, in []int) ([]int, error) { return in, nil }, 100, 3).Window(time.Hour)
	start(b)()
}

// Once Run has returned, Do answers ErrStopped at once, even with a context
// that never ends, and the request does not run; requests racing the stop
// either run or get ErrStopped, never hang.
func TestDoAfterStopReturnsErrStopped(t *testing.T) {
	t.Parallel()
	var ran atomic.Int64
	b := New(func(_ context.Context, in []int) ([]int, error) { ran.Add(int64(len(in))); return in, nil }, 4, 2)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stopped := make(chan error, 1)
	go func() { stopped <- b.Run(ctx) }()

	var wg sync.WaitGroup
	var done, refused atomic.Int64
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := b.Do(context.Background(), i)
			switch {
			case err == nil:
				require.Equal(t, i, out)
				done.Add(1)
			case errors.Is(err, ErrStopped):
				refused.Add(1)
			default:
				t.Errorf("Do: %v", err)
			}
		}()
		if i == 100 {
			cancel()
		}
	}
	wg.Wait()
	require.NoError(t, <-stopped)
	require.Equal(t, int64(200), done.Load()+refused.Load())
	require.Equal(t, done.Load(), ran.Load(), "a refused request never ran")

	_, err := b.Do(context.Background(), 1)
	require.ErrorIs(t, err, ErrStopped)
}

func TestCollect(t *testing.T) {
	t.Parallel()
	in := make(chan int, 10)
	for i := range 5 {
		in <- i
	}
	ctx := context.Background()
	got := Collect(ctx, in, []int{-1}, 3, 0)
	require.Equal(t, []int{-1, 0, 1, 2}, got, "max counts the items taken, not those already in batch")
	require.Equal(t, []int{3, 4}, Collect(ctx, in, nil, 3, 0), "without a window it takes only what is waiting")

	ended, cancel := context.WithCancel(ctx)
	cancel()
	require.Empty(t, Collect(ended, in, nil, 3, time.Hour), "an ended context with nothing waiting returns at once")
	in <- 7
	in <- 8
	require.Equal(t, []int{7, 8}, Collect(ended, in, nil, 3, time.Hour), "an ended context still drains, without waiting for the window")

	go func() {
		in <- 9
		in <- 10
	}()
	require.Equal(t, []int{9, 10}, Collect(ctx, in, nil, 2, time.Hour), "a window ends early when the batch is full")
}

// An urgent request ends the window of its batch: with a window of an hour,
// the batch runs as soon as the urgent one joins it, with those before.
func TestUrgentRequestEndsTheWindow(t *testing.T) {
	t.Parallel()
	b, sizes := sizedBatcher(100, 1)
	b.Window(time.Hour).Urgent(func(i int) bool { return i < 0 })
	// Two requests queued before the batcher runs, then taken into its
	// first batch.
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Go(func() {
			_, err := b.Do(context.Background(), i)
			require.NoError(t, err)
		})
	}
	require.Eventually(t, func() bool { return len(b.in) == 2 }, 5*time.Second, time.Millisecond)
	stop := start(b)
	require.Eventually(t, func() bool { return len(b.in) == 0 }, 5*time.Second, time.Millisecond)

	out, err := b.Do(context.Background(), -1)
	require.NoError(t, err)
	require.Equal(t, -1, out)
	wg.Wait()
	// Urgent as the first of its batch: it runs alone, at once.
	_, err = b.Do(context.Background(), -2)
	require.NoError(t, err)
	require.Equal(t, []int{3, 1}, sizes())
	stop()
}

func TestCollectUntil(t *testing.T) {
	t.Parallel()
	in := make(chan int, 10)
	go func() {
		in <- 1
		in <- -1
		in <- 2
	}()
	stop := func(i int) bool { return i < 0 }
	require.Equal(t, []int{1, -1}, CollectUntil(context.Background(), in, nil, 10, time.Hour, stop))
	require.Equal(t, []int{2}, CollectUntil(context.Background(), in, nil, 10, 0, stop))
}

// pacedBatcher is a batcher of at most 3 requests with a window of an hour
// that skips it while requests come a millisecond apart or more, on a
// clock that moves step at each request; sizes are its batches'.
func pacedBatcher(step *time.Duration) (*Batcher[int, int], func() []int) {
	b, sizes := sizedBatcher(3, 2)
	b.Window(time.Hour).sparse(time.Millisecond, steppingClock(step))
	return b, sizes
}

// steppingClock returns a clock that moves step at each reading.
func steppingClock(step *time.Duration) func() time.Time {
	clock := time.Unix(0, 0)
	return func() time.Time {
		clock = clock.Add(*step)
		return clock
	}
}

// Requests 5 ms apart (counted as 4) are sparse from the start: each runs
// at once, alone, although the window is an hour.
func TestSparseRequestsSkipTheWindow(t *testing.T) {
	t.Parallel()
	step := 5 * time.Millisecond
	b, sizes := pacedBatcher(&step)
	stop := start(b)
	for i := range 20 {
		out, err := b.Do(context.Background(), i)
		require.NoError(t, err)
		require.Equal(t, i, out)
	}
	require.Equal(t, slices.Repeat([]int{1}, 20), sizes())
	stop()
}

// A new batcher takes requests as sparse; requests coming together bring
// the mean interval below the gap at the 12th (4 ms x (7/8)^11), and then
// a batch waits its window: three sent one after another run as one.
func TestRequestsComingTogetherWaitTheWindow(t *testing.T) {
	t.Parallel()
	step := time.Duration(0)
	b, sizes := pacedBatcher(&step)
	stop := start(b)
	for i := range 11 {
		_, err := b.Do(context.Background(), i)
		require.NoError(t, err)
	}
	require.Equal(t, slices.Repeat([]int{1}, 11), sizes(), "sparse so far")

	var wg sync.WaitGroup
	for i := range 3 {
		wg.Go(func() {
			_, err := b.Do(context.Background(), i)
			require.NoError(t, err)
		})
		// The next request is sent only once this one was taken.
		require.Eventually(t, func() bool { return len(b.in) == 0 }, 5*time.Second, time.Millisecond)
	}
	wg.Wait()
	require.Equal(t, append(slices.Repeat([]int{1}, 11), 3), sizes())
	stop()
}

// Requests sparse on average still share a batch while another runs: a
// request arriving then waits for it (not the hour-long window), and the
// one after it joins the same batch.
func TestSparseRequestsWaitForTheBatchRunning(t *testing.T) {
	t.Parallel()
	step := 5 * time.Millisecond
	release := make(chan struct{})
	b, ran := sizedBatcherThen(3, 2, func(k int) {
		if k == 1 {
			<-release
		}
	})
	// taken counts the requests a runner has taken from the queue (every
	// one is shown to the urgency test, which ends no window here).
	var taken atomic.Int32
	b.Window(time.Hour).sparse(time.Millisecond, steppingClock(&step))
	b.Urgent(func(int) bool { taken.Add(1); return false })
	stop := start(b)

	var wg sync.WaitGroup
	for i := range 3 {
		wg.Go(func() {
			out, err := b.Do(context.Background(), i)
			require.NoError(t, err)
			require.Equal(t, i, out)
		})
		if i == 0 {
			require.Eventually(t, func() bool { return len(ran()) == 1 }, 5*time.Second, time.Millisecond, "the first batch runs at once")
		} else {
			require.Eventually(t, func() bool { return taken.Load() == int32(i+1) }, 5*time.Second, time.Millisecond,
				"request %d taken into the second batch", i)
		}
	}
	require.Equal(t, []int{1}, ran(), "the second batch waits for the first")
	close(release)
	wg.Wait()
	require.Equal(t, []int{1, 2}, ran())
	stop()
}

// The mean interval follows the requests, each interval counted as at
// most four times the gap.
func TestPaceMean(t *testing.T) {
	t.Parallel()
	step := 100 * time.Millisecond
	p := newPace(time.Millisecond, steppingClock(&step))
	require.True(t, p.sparse(), "a new pace is sparse")
	for range 5 {
		p.arrive()
	}
	require.Equal(t, 4*time.Millisecond, p.mean, "long intervals count as 4 gaps")
	step = 0
	p.arrive()
	require.Equal(t, 3500*time.Microsecond, p.mean, "an eighth of the way to the new interval")
	for range 9 {
		p.arrive()
	}
	require.True(t, p.sparse(), "4 ms x (7/8)^10 = 1.05 ms")
	p.arrive()
	require.False(t, p.sparse(), "4 ms x (7/8)^11 = 0.92 ms")
}
