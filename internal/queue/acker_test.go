package queue

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fakeBroker settles messages as RabbitMQ does on one channel: tags 1..n
// are outstanding; a single ack, nack or reject settles its tag, an ack
// with multiple every outstanding tag up to its own; naming a tag that is
// not outstanding is the channel error "unknown delivery tag".
type fakeBroker struct {
	mu          sync.Mutex
	outstanding map[uint64]bool
	outcome     map[uint64]string
	calls       int
	err         error
}

func newFakeBroker(n int) *fakeBroker {
	b := &fakeBroker{outstanding: map[uint64]bool{}, outcome: map[uint64]string{}}
	for tag := uint64(1); tag <= uint64(n); tag++ {
		b.outstanding[tag] = true
	}
	return b
}

func (b *fakeBroker) settle(tag uint64, multiple bool, outcome string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.calls++
	if !b.outstanding[tag] {
		if b.err == nil {
			b.err = fmt.Errorf("unknown delivery tag %d (%s, multiple %v)", tag, outcome, multiple)
		}
		return b.err
	}
	for t := range b.outstanding {
		if t == tag || multiple && t < tag {
			delete(b.outstanding, t)
			b.outcome[t] = outcome
		}
	}
	return nil
}

func (b *fakeBroker) Ack(tag uint64, multiple bool) error { return b.settle(tag, multiple, "ack") }
func (b *fakeBroker) Nack(tag uint64, multiple, requeue bool) error {
	return b.settle(tag, multiple, "nack")
}
func (b *fakeBroker) Reject(tag uint64, requeue bool) error { return b.settle(tag, false, "reject") }

// Messages settled in any order by concurrent handlers, a few nacked or
// rejected, are each settled exactly once as their handler said, in far
// fewer calls than messages.
func TestAckerSettlesEveryMessageOnceAsItsHandlerSaid(t *testing.T) {
	t.Parallel()
	const n = 2000
	broker := newFakeBroker(n)
	a := newAcker(broker, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { a.run(ctx); close(done) }()

	want := make(map[uint64]string, n)
	tags := make(chan uint64, n)
	for tag := uint64(1); tag <= n; tag++ {
		switch rand.IntN(20) {
		case 0:
			want[tag] = "nack"
		case 1:
			want[tag] = "reject"
		default:
			want[tag] = "ack"
		}
		tags <- tag
	}
	close(tags)
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for tag := range tags {
				var err error
				switch want[tag] {
				case "nack":
					err = a.Nack(tag, false, true)
				case "reject":
					err = a.Reject(tag, false)
				default:
					err = a.Ack(tag, false)
				}
				if err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	cancel()
	<-done

	broker.mu.Lock()
	defer broker.mu.Unlock()
	require.NoError(t, broker.err)
	require.Empty(t, broker.outstanding, "every message settled")
	require.Equal(t, want, broker.outcome)
	require.Less(t, broker.calls, n, "acks were grouped")
}

// A message whose handler hangs does not hold back the acks of the
// messages after it for longer than ackHold; it stays outstanding.
func TestAckerSendsAcksAboveAHangingMessageAlone(t *testing.T) {
	t.Parallel()
	broker := newFakeBroker(100)
	a := newAcker(broker, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { a.run(ctx); close(done) }()
	for tag := uint64(2); tag <= 100; tag++ {
		require.NoError(t, a.Ack(tag, false))
	}
	require.Eventually(t, func() bool {
		broker.mu.Lock()
		defer broker.mu.Unlock()
		return len(broker.outstanding) == 1
	}, 5*time.Second, time.Millisecond)
	broker.mu.Lock()
	require.True(t, broker.outstanding[1], "the hanging message is still outstanding")
	require.NoError(t, broker.err)
	broker.mu.Unlock()

	// Once it is done, its ack is not held behind anything.
	require.NoError(t, a.Ack(1, false))
	cancel()
	<-done
	broker.mu.Lock()
	defer broker.mu.Unlock()
	require.NoError(t, broker.err)
	require.Empty(t, broker.outstanding)
}

// Held acks below the first unsettled message go as one ack with multiple.
func TestAckerGroupsContiguousAcks(t *testing.T) {
	t.Parallel()
	broker := newFakeBroker(10)
	a := newAcker(broker, slog.New(slog.DiscardHandler))
	for tag := uint64(1); tag <= 10; tag++ {
		require.NoError(t, a.Ack(tag, false))
	}
	a.mu.Lock()
	a.flush(time.Now(), false)
	a.mu.Unlock()
	require.Equal(t, 1, broker.calls)
	require.Empty(t, broker.outstanding)
}
