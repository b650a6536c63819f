package metrics

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hookline/hookline/internal/health"
)

// Process is what Init needs to know about the process whose metrics it
// prepares.
type Process struct {
	// Name is api, worker or dlq.
	Name string
	// Checks are the process's readiness checks. Each scrape runs them and
	// exports hookline_dependency_up per dependency; nil exports none.
	Checks health.Checks
	// RetentionInterval is retention.interval; only the dlq exports it.
	RetentionInterval time.Duration
}

// Label values known in advance, pre-created at zero by Init. They mirror
// the values the packages that count them use (tests keep them in step).
var (
	publishOutcomes      = []string{"accepted", "replayed", "conflict", "invalid", "too_large", "rate_limited", "error"}
	idempotencyResults   = []string{"hit", "miss", "error"}
	postponeReasons      = []string{"host_busy", "tenant_share", "inactive", "unverified", "circuit_open", "rate_limited"}
	internalErrorStages  = []string{"load", "order", "build", "record", "cancel"}
	deliveryOutcomes     = []string{"success", "failure"}
	circuitTransitions   = []string{"opened", "half_opened", "closed", "reopened"}
	deadLetterReasons    = []string{"exhausted", "poison", "gone", "malformed", "swept"}
	retentionKinds       = []string{"attempts", "attempt_partitions", "deliveries", "delivery_partitions", "payloads", "events", "event_partitions", "portal_sessions", "webhook_pauses", "rollups"}
	notificationOutcomes = []string{"created", "suppressed"}
	filterErrorReasons   = []string{"error", "cost_limit"}
)

// Owner notification types by the process that records them (the values of
// notify.Types, which imports this package).
var notificationTypes = map[string][]string{
	"worker": {"webhook.circuit_opened", "webhook.circuit_recovered"},
	"dlq":    {"webhook.delivery_exhausted", "webhook.endpoint_disabled"},
}

// Init prepares the metrics of one process: it exports at zero the series
// of every label value known in advance that the process counts, so that
// dashboards and alerts find their families (and rate() sees the first
// increase) before the first event of each kind; it makes each scrape probe
// p.Checks; and the dlq exports its retention interval. Call it once the
// checks are complete, before serving /metrics. Measured gauges (queue
// depth, DLQ size, batch states) are left until first measured, so that
// they never show a zero that was not measured.
func Init(p Process) {
	dependencyUp.set(p.Checks)
	switch p.Name {
	case "api":
		touch(PublishRequests, publishOutcomes)
		touch(IdempotencyCache, idempotencyResults)
		touch(RateLimitHits, []string{"publish"})
		touch(FilterErrors, filterErrorReasons)
		touch(WebhooksDisabled, []string{"manual"})
	case "worker":
		touch(DeliveriesPostponed, postponeReasons)
		touch(WorkerInternalErrors, internalErrorStages)
		touch(CircuitTransitions, circuitTransitions)
		touch(RateLimitHits, []string{"delivery"})
		for _, o := range deliveryOutcomes {
			DeliveryDuration.WithLabelValues(o)
		}
	case "dlq":
		touch(DeadLettered, deadLetterReasons)
		touch(RetentionPruned, retentionKinds)
		touch(FilterErrors, filterErrorReasons)
		touch(WebhooksDisabled, []string{"auto_disabled"})
		RetentionInterval.Set(p.RetentionInterval.Seconds())
	}
	for _, t := range notificationTypes[p.Name] {
		for _, o := range notificationOutcomes {
			OwnerNotifications.WithLabelValues(t, o)
		}
	}
}

func touch(c *prometheus.CounterVec, values []string) {
	for _, v := range values {
		c.WithLabelValues(v)
	}
}

// dependencyCollector exports hookline_dependency_up from readiness checks
// run at scrape time, so that an alert can tell how long a dependency has
// been unreachable even while the process itself is up.
type dependencyCollector struct {
	desc   *prometheus.Desc
	mu     sync.Mutex
	checks health.Checks
}

func (d *dependencyCollector) set(c health.Checks) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.checks = c
}

// Describe implements prometheus.Collector.
func (d *dependencyCollector) Describe(ch chan<- *prometheus.Desc) { ch <- d.desc }

// Collect implements prometheus.Collector.
func (d *dependencyCollector) Collect(ch chan<- prometheus.Metric) {
	d.mu.Lock()
	checks := d.checks
	d.mu.Unlock()
	if len(checks) == 0 {
		return
	}
	rep := checks.Run(context.Background(), 2*time.Second)
	for name := range checks {
		up := 1.0
		if slices.Contains(rep.Down, name) {
			up = 0
		}
		ch <- prometheus.MustNewConstMetric(d.desc, prometheus.GaugeValue, up, name)
	}
}
