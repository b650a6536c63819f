package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/systemtest"
	"github.com/hookline/hookline/internal/testwait"
)

// arrival is one request of the ordering tests: the event's type and
// sequence number, when it arrived, and whether it was answered 2xx.
type arrival struct {
	typ string
	n   int
	at  time.Time
	ok  bool
}

// orderedReceiver fails the first fails attempts of the event (typ, n) and
// accepts everything else, recording arrivals.
type orderedReceiver struct {
	*receiver
	mu       sync.Mutex
	arrivals []arrival
}

func newOrderedReceiver(t *testing.T, failTyp string, failN, fails int) *orderedReceiver {
	o := &orderedReceiver{}
	failed := 0
	o.receiver = newReceiver(t, func(i int, w http.ResponseWriter, _ *http.Request) {
		var body struct {
			EventType string `json:"event_type"`
			Data      struct {
				N int `json:"n"`
			} `json:"data"`
		}
		_ = json.Unmarshal(o.requests()[i].Body, &body)
		o.mu.Lock()
		defer o.mu.Unlock()
		a := arrival{typ: body.EventType, n: body.Data.N, at: time.Now(), ok: true}
		if body.EventType == failTyp && body.Data.N == failN && failed < fails {
			failed++
			a.ok = false
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		o.arrivals = append(o.arrivals, a)
	})
	return o
}

func (o *orderedReceiver) got() []arrival {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]arrival(nil), o.arrivals...)
}

// requireInOrder checks that, per key (all events for strict, each type for
// per_event_type), successful arrivals come in sequence order and each
// event is accepted before any later one arrives.
func requireInOrder(t *testing.T, got []arrival, perType bool) {
	t.Helper()
	last := map[string]int{}
	for i, a := range got {
		key := ""
		if perType {
			key = a.typ
		}
		prev, seen := last[key]
		if !seen {
			prev = -1
		}
		require.LessOrEqual(t, a.n, prev+1, "arrival %d (%s %d) skipped ahead of %d", i, a.typ, a.n, prev)
		require.GreaterOrEqual(t, a.n, prev, "arrival %d (%s %d) went back after %d", i, a.typ, a.n, prev)
		if a.ok {
			last[key] = a.n
		}
	}
}

// Section 9: an ordered endpoint failing its first 3 attempts on event 10
// receives event 11 only after 10 succeeded; per_event_type keeps order
// within each type while the other type goes on; an unordered webhook is
// not held back at all.
func TestOrderedDeliveryHoldsTheKeyBehindAFailure(t *testing.T) {
	t.Parallel()
	s := newSystem(t, func(o *systemtest.Options) { o.Workers = 32 })
	s.unlimited()
	retry := map[string]any{"max_attempts": 5, "base_delay_ms": 300, "backoff_multiplier": 2}
	strict := newOrderedReceiver(t, "order.a", 10, 3)
	perType := newOrderedReceiver(t, "order.a", 10, 3)
	unordered := newReceiver(t, func(int, http.ResponseWriter, *http.Request) {})
	s.fastHook(strict.URL, map[string]any{"ordering_guarantee": "strict", "retry_config": retry})
	s.fastHook(perType.URL, map[string]any{"ordering_guarantee": "per_event_type", "retry_config": retry})
	s.fastHook(unordered.URL, nil)

	const perTypeCount = 25
	for n := range perTypeCount {
		for _, typ := range []string{"order.a", "order.b"} {
			s.publish(typ, map[string]any{"n": n})
		}
	}
	testwait.Eventually(t, 60*time.Second, func() bool { return len(strict.got()) == 2*perTypeCount+3 }, "strict deliveries")
	testwait.Eventually(t, 60*time.Second, func() bool { return len(perType.got()) == 2*perTypeCount+3 }, "per_event_type deliveries")
	require.Len(t, unordered.requests(), 2*perTypeCount)

	// Strict: one sequence over both types, a then b for each n.
	var seq []arrival
	for _, a := range strict.got() {
		a.n = 2*a.n + map[string]int{"order.a": 0, "order.b": 1}[a.typ]
		seq = append(seq, a)
	}
	requireInOrder(t, seq, false)
	requireInOrder(t, perType.got(), true)

	// The failing event held its key: a-11 came after a-10 succeeded, and
	// b went on meanwhile for per_event_type.
	firstFail, success := window(t, perType.got(), "order.a", 10)
	var bDuring int
	for _, a := range perType.got() {
		if a.typ == "order.b" && a.at.After(firstFail) && a.at.Before(success) {
			bDuring++
		}
		if a.typ == "order.a" && a.n == 11 {
			require.True(t, a.at.After(success), "a-11 arrived before a-10 succeeded")
		}
	}
	require.Positive(t, bDuring, "order.b deliveries went on while order.a was held")
	_, strictSuccess := window(t, strict.got(), "order.a", 10)
	for _, a := range strict.got() {
		if a.typ == "order.b" && a.n == 10 {
			require.True(t, a.at.After(strictSuccess), "strict: b-10 arrived before a-10 succeeded")
		}
	}
	// The unordered webhook was done before the ordered key was released.
	var lastUnordered time.Time
	for _, r := range unordered.requests() {
		if r.At.After(lastUnordered) {
			lastUnordered = r.At
		}
	}
	require.True(t, lastUnordered.Before(success), "the unordered webhook waited on an ordered key")
	t.Logf("a-10 held its key for %s; %d order.b deliveries meanwhile", success.Sub(firstFail), bDuring)
}

// window returns when (typ, n) first failed and when it succeeded.
func window(t *testing.T, got []arrival, typ string, n int) (time.Time, time.Time) {
	t.Helper()
	var first, ok time.Time
	fails := 0
	for _, a := range got {
		if a.typ != typ || a.n != n {
			continue
		}
		if !a.ok {
			fails++
			if first.IsZero() {
				first = a.at
			}
		} else {
			ok = a.at
		}
	}
	require.Equal(t, 3, fails, fmt.Sprintf("%s %d failed three times", typ, n))
	require.False(t, ok.IsZero(), "%s %d succeeded", typ, n)
	return first, ok
}
