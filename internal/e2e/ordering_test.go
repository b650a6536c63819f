package e2e

import (
	"encoding/json"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/systemtest"
	"github.com/hookline/hookline/internal/testwait"
)

// arrival is one request of the ordering tests: the event's type, its
// sequence number within the type, its place in the publish order, when it
// arrived, and whether it was answered 2xx.
type arrival struct {
	typ string
	n   int
	seq int
	at  time.Time
	ok  bool
}

// orderedReceiver records arrivals and answers 503 to those fail chooses,
// given the arrivals before.
type orderedReceiver struct {
	*receiver
	mu       sync.Mutex
	arrivals []arrival
}

func newOrderedReceiver(t *testing.T, fail func(a arrival, before []arrival) bool) *orderedReceiver {
	o := &orderedReceiver{}
	o.receiver = newReceiver(t, func(i int, w http.ResponseWriter, _ *http.Request) {
		var body struct {
			EventType string `json:"event_type"`
			Data      struct {
				N   int `json:"n"`
				Seq int `json:"seq"`
			} `json:"data"`
		}
		_ = json.Unmarshal(o.requests()[i].Body, &body)
		o.mu.Lock()
		defer o.mu.Unlock()
		a := arrival{typ: body.EventType, n: body.Data.N, seq: body.Data.Seq, at: time.Now(), ok: true}
		if fail(a, o.arrivals) {
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

// count counts the arrivals that match.
func count(got []arrival, match func(arrival) bool) int {
	n := 0
	for _, a := range got {
		if match(a) {
			n++
		}
	}
	return n
}

// requireInOrder checks that, per key, successful arrivals come in order
// and each is accepted before any later one arrives. Strict keys all events
// by their place in the publish order; per_event_type keys each type by its
// sequence number.
func requireInOrder(t *testing.T, got []arrival, perType bool) {
	t.Helper()
	last := map[string]int{}
	for i, a := range got {
		key, n := "", a.seq
		if perType {
			key, n = a.typ, a.n
		}
		prev, seen := last[key]
		if !seen {
			prev = -1
		}
		require.LessOrEqual(t, n, prev+1, "arrival %d (%s %d) skipped ahead of %d", i, a.typ, n, prev)
		require.GreaterOrEqual(t, n, prev, "arrival %d (%s %d) went back after %d", i, a.typ, n, prev)
		if a.ok {
			last[key] = n
		}
	}
}

// Section 9: an ordered endpoint failing event order.a 10 receives order.a
// 11 only after 10 succeeded; per_event_type keeps order within each type
// while the other type goes on; an unordered webhook is not held back.
//
// So that nothing rests on timing, the order.b events from 10 on are
// published only once order.a 10 has failed at the per_event_type
// endpoint, and that endpoint fails order.a 10 until it has accepted every
// order.b event and the unordered endpoint has received everything. Were
// order.b or the unordered webhook held behind the failing key, order.a 10
// would be exhausted instead of succeeding.
func TestOrderedDeliveryHoldsTheKeyBehindAFailure(t *testing.T) {
	t.Parallel()
	s := newSystem(t, func(o *systemtest.Options) { o.Workers = 32 })
	s.unlimited()
	const perTypeCount = 25
	isHead := func(a arrival) bool { return a.typ == "order.a" && a.n == 10 }
	failedHead := func(a arrival) bool { return isHead(a) && !a.ok }
	acceptedB := func(a arrival) bool { return a.typ == "order.b" && a.ok }
	unordered := newReceiver(t, func(int, http.ResponseWriter, *http.Request) {})
	strict := newOrderedReceiver(t, func(a arrival, before []arrival) bool {
		return isHead(a) && count(before, failedHead) < 3
	})
	perType := newOrderedReceiver(t, func(a arrival, before []arrival) bool {
		return isHead(a) && (count(before, failedHead) == 0 || count(before, acceptedB) < perTypeCount ||
			len(unordered.requests()) < 2*perTypeCount)
	})
	s.fastHook(strict.URL, map[string]any{"ordering_guarantee": "strict",
		"retry_config": map[string]any{"max_attempts": 5, "base_delay_ms": 300, "backoff_multiplier": 2}})
	s.fastHook(perType.URL, map[string]any{"ordering_guarantee": "per_event_type",
		"retry_config":           map[string]any{"max_attempts": 40, "base_delay_ms": 300, "max_delay_ms": 1000, "backoff_multiplier": 1.5},
		"circuit_breaker_config": map[string]any{"enabled": false}})
	s.fastHook(unordered.URL, nil)

	seq := 0
	publish := func(typ string, n int) {
		s.publish(typ, map[string]any{"n": n, "seq": seq})
		seq++
	}
	for n := range perTypeCount {
		publish("order.a", n)
		if n < 10 {
			publish("order.b", n)
		}
	}
	testwait.Eventually(t, 60*time.Second, func() bool { return count(perType.got(), failedHead) > 0 },
		"order.a 10 to fail at the per_event_type endpoint")
	for n := 10; n < perTypeCount; n++ {
		publish("order.b", n)
	}

	testwait.Eventually(t, 60*time.Second, func() bool { return len(strict.got()) == 2*perTypeCount+3 }, "strict deliveries")
	testwait.Eventually(t, 60*time.Second, func() bool {
		return count(perType.got(), func(a arrival) bool { return a.ok }) == 2*perTypeCount
	}, "per_event_type deliveries")
	require.Len(t, unordered.requests(), 2*perTypeCount)
	requireInOrder(t, strict.got(), false)
	requireInOrder(t, perType.got(), true)

	// Strict: order.a 10 failed three times and held everything after it.
	_, strictSuccess, strictFails := window(t, strict.got(), "order.a", 10)
	require.Equal(t, 3, strictFails, "strict: order.a 10 failed three times")
	for _, a := range strict.got() {
		if a.seq > 20 {
			require.True(t, a.at.After(strictSuccess), "strict: %s %d arrived before order.a 10 succeeded", a.typ, a.n)
		}
	}

	// per_event_type: order.a 10 held its type, not the other one.
	firstFail, success, fails := window(t, perType.got(), "order.a", 10)
	var bDuring int
	for _, a := range perType.got() {
		if a.typ == "order.b" && a.n >= 10 {
			require.True(t, a.at.After(firstFail) && a.at.Before(success), "order.b %d arrived outside order.a 10's failures", a.n)
			bDuring++
		}
		if a.typ == "order.a" && a.n > 10 {
			require.True(t, a.at.After(success), "order.a %d arrived before order.a 10 succeeded", a.n)
		}
	}
	require.Equal(t, perTypeCount-10, bDuring, "order.b deliveries published while order.a 10 was held")
	t.Logf("order.a 10 held its key for %s over %d failures; %d order.b deliveries meanwhile", success.Sub(firstFail), fails, bDuring)
}

// window returns when (typ, n) first failed, when it succeeded, and how
// many times it failed, requiring at least one failure and a success.
func window(t *testing.T, got []arrival, typ string, n int) (first, ok time.Time, fails int) {
	t.Helper()
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
	require.Positive(t, fails, "%s %d failed", typ, n)
	require.False(t, ok.IsZero(), "%s %d succeeded", typ, n)
	return first, ok, fails
}
