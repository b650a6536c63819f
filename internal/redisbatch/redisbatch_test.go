package redisbatch

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/redistest"
)

func newClient(t *testing.T) (*redis.Client, *redistest.Counter, string) {
	t.Helper()
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: redistest.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	counter := &redistest.Counter{}
	rdb.AddHook(counter)
	key := redistest.Prefix(t) + "counter"
	t.Cleanup(func() { rdb.Del(context.Background(), key) })
	return rdb, counter, key
}

func incr(p *Pipelines, key string) int64 {
	var cmd *redis.IntCmd
	p.Do(context.Background(), func(pipe redis.Pipeliner) { cmd = pipe.Incr(context.Background(), key) })
	return cmd.Val()
}

func TestWithoutRunEachCallerSendsItsOwnPipeline(t *testing.T) {
	rdb, counter, key := newClient(t)
	p := New(rdb, 0)
	require.Equal(t, int64(1), incr(p, key)) // the connection's own setup is a pipeline too
	before := counter.Pipelines()
	require.Equal(t, int64(2), incr(p, key))
	require.Equal(t, int64(3), incr(p, key))
	require.Equal(t, int64(2), counter.Pipelines()-before)
}

// Callers arriving while both runners are busy wait, and then share
// pipelines; each reads its own answer.
func TestCallersWaitingTogetherShareAPipeline(t *testing.T) {
	rdb, counter, key := newClient(t)
	p := New(rdb, time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = p.Run(ctx); close(done) }()
	require.Eventually(t, p.Running, 5*time.Second, time.Millisecond)

	// Hold both runners inside a pipeline of their own.
	release := make(chan struct{})
	var held sync.WaitGroup
	for range runners {
		entered := make(chan struct{})
		held.Add(1)
		go func() {
			defer held.Done()
			p.Do(context.Background(), func(redis.Pipeliner) { close(entered); <-release })
		}()
		<-entered
	}
	const callers = 50
	got := make([]int64, callers)
	var wg sync.WaitGroup
	for i := range got {
		wg.Add(1)
		go func() { defer wg.Done(); got[i] = incr(p, key) }()
	}
	require.Eventually(t, func() bool { return p.pipes.Waiting() == callers }, 5*time.Second, time.Millisecond)
	before := counter.Pipelines()
	close(release)
	wg.Wait()
	held.Wait()

	seen := map[int64]bool{}
	for _, v := range got {
		require.False(t, seen[v], "two callers read the same answer")
		seen[v] = true
		require.True(t, v >= 1 && v <= callers)
	}
	// Counted since the fifty were waiting: the held pipelines, at most
	// one pipeline per runner for the fifty, and the setup of a new
	// connection per runner; not one per caller.
	require.LessOrEqual(t, counter.Pipelines()-before, int64(3*runners))
	cancel()
	<-done
	require.False(t, p.Running())
	require.Equal(t, int64(callers+1), incr(p, key), "after Run each caller sends its own")
}

// Run returns only once the callers sharing a pipeline have their answers.
func TestRunWaitsForCallersInFlight(t *testing.T) {
	rdb, _, key := newClient(t)
	p := New(rdb, 0)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = p.Run(ctx); close(done) }()
	require.Eventually(t, p.Running, 5*time.Second, time.Millisecond)
	entered, release := make(chan struct{}), make(chan struct{})
	var cmd *redis.IntCmd
	answered := make(chan struct{})
	go func() {
		p.Do(context.Background(), func(pipe redis.Pipeliner) {
			close(entered)
			<-release
			cmd = pipe.Incr(context.Background(), key)
		})
		close(answered)
	}()
	<-entered
	cancel()
	select {
	case <-done:
		t.Fatal("Run returned while a caller was waiting for its shared pipeline")
	case <-answered:
		t.Fatal("the caller was answered before its pipeline ran")
	default:
	}
	close(release)
	<-answered
	<-done
	require.Equal(t, int64(1), cmd.Val())
}
