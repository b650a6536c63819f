package metrics

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Failures of our own making, and what they cost: panics caught per
// message, deliveries waiting on our own failure, deliveries whose
// message was lost after it was confirmed.
var (
	HandlerPanics = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Name: "handler_panics_total",
		Help: "Messages whose handler panicked (recovered, the process goes on), by what became of them: requeued (a copy counting its panics at the tail of its queue), dead_lettered (after queue.ConsumerConfig.MaxPanics panics), dropped (a dead letter that crashed the dlq recorder as often).",
	}, []string{"outcome"})
	LostDeliveriesResent = promauto.NewCounter(prometheus.CounterOpts{
		Namespace: Namespace, Name: "lost_deliveries_resent_total",
		Help: "Deliveries confirmed as enqueued that no worker took within an hour of their due time (their message was lost: returned, purged, or its queue deleted), handed back to the outbox relay by the dlq sweep.",
	})

	// InternalWaits are the deliveries a worker put back because of our
	// own failure (database, broker) and has not seen handled since.
	InternalWaits = &WaitTracker{
		waiting: prometheus.NewDesc(Namespace+"_worker_internal_waiting",
			"Deliveries this worker put back because of our own failure (database, broker) in the last 2 minutes and has not seen handled since. They wait without limit and without spending their endpoint's retries.",
			nil, nil),
		oldest: prometheus.NewDesc(Namespace+"_worker_internal_wait_seconds",
			"How long the longest-waiting of hookline_worker_internal_waiting has been waiting on our own failure, since it was first put back; 0 when none.",
			nil, nil),
		since: map[string]wait{},
		now:   time.Now,
	}
)

func init() {
	for _, o := range []string{"requeued", "dead_lettered", "dropped"} {
		HandlerPanics.WithLabelValues(o)
	}
	prometheus.MustRegister(InternalWaits)
}

// waitTTL is how long a put-back delivery counts as waiting without being
// put back again: a waiting message comes back at least every 30 s, and
// another worker may take it meanwhile.
const waitTTL = 2 * time.Minute

// WaitTracker exports how many deliveries wait on our own failure, and for
// how long, as this worker last saw them. With several workers, the max
// over them of hookline_worker_internal_wait_seconds is the longest wait.
type WaitTracker struct {
	waiting, oldest *prometheus.Desc
	mu              sync.Mutex
	since           map[string]wait
	now             func() time.Time
}

type wait struct{ since, seen time.Time }

// Waiting records that delivery key was put back, waiting on our own
// failure since since. A delivery with two messages (a duplicate) waits
// since the earlier.
func (w *WaitTracker) Waiting(key string, since time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if e, ok := w.since[key]; ok && e.since.Before(since) {
		since = e.since
	}
	w.since[key] = wait{since: since, seen: w.now()}
}

// Done records that delivery key was handled, unless it was put back again
// after started (when its handling began).
func (w *WaitTracker) Done(key string, started time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if e, ok := w.since[key]; ok && e.seen.Before(started) {
		delete(w.since, key)
	}
}

// Describe implements prometheus.Collector.
func (w *WaitTracker) Describe(ch chan<- *prometheus.Desc) {
	ch <- w.waiting
	ch <- w.oldest
}

// Collect implements prometheus.Collector; it forgets deliveries not put
// back for waitTTL.
func (w *WaitTracker) Collect(ch chan<- prometheus.Metric) {
	n, oldest := w.Stats()
	ch <- prometheus.MustNewConstMetric(w.waiting, prometheus.GaugeValue, float64(n))
	ch <- prometheus.MustNewConstMetric(w.oldest, prometheus.GaugeValue, oldest.Seconds())
}

// Stats returns how many deliveries wait and the longest wait.
func (w *WaitTracker) Stats() (int, time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.now()
	var oldest time.Duration
	for k, e := range w.since {
		if now.Sub(e.seen) > waitTTL {
			delete(w.since, k)
			continue
		}
		oldest = max(oldest, now.Sub(e.since))
	}
	return len(w.since), oldest
}
