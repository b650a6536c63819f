// Package metrics declares every Prometheus metric hookline exports, in one
// place, so that dashboards and alert rules can be checked against it.
package metrics

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Namespace prefixes every metric name.
const Namespace = "hookline"

var (
	httpRequests = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Name: "http_requests_total",
		Help: "API requests by route, method and status code.",
	}, []string{"route", "method", "code"})
	httpDuration = promauto.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: Namespace, Name: "http_request_duration_seconds",
		Help:    "API request latency by route and method.",
		Buckets: []float64{.001, .0025, .005, .01, .02, .05, .1, .25, .5, 1, 2.5},
	}, []string{"route", "method"})
)

// ObserveHTTP records one API request. route must be a route template, or
// one fixed value for requests that matched none. The method comes from
// the client, who may send any token: methods other than the standard ones
// are counted as "other", or each would be a series of its own.
func ObserveHTTP(route, method string, code int, d time.Duration) {
	method = knownMethod(method)
	httpRequests.WithLabelValues(route, method, strconv.Itoa(code)).Inc()
	httpDuration.WithLabelValues(route, method).Observe(d.Seconds())
}

func knownMethod(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return m
	}
	return "other"
}

// Publishing and the outbox.
var (
	PublishRequests = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Name: "publish_requests_total",
		Help: "Event publish requests by outcome: accepted, replayed, conflict, invalid, too_large, error.",
	}, []string{"outcome"})
	PublishDuration = promauto.NewHistogram(prometheus.HistogramOpts{
		Namespace: Namespace, Name: "publish_duration_seconds",
		Help:    "Time to accept an event: validation, idempotency check and the durable commit.",
		Buckets: []float64{.0005, .001, .002, .005, .01, .02, .05, .1, .25, .5, 1},
	})
	PublishCommitEvents = promauto.NewHistogram(prometheus.HistogramOpts{
		Namespace: Namespace, Name: "publish_commit_events",
		Help:    "Events per group commit of single publishes (HTTP and the publish queue); api.commit_window makes them larger.",
		Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 256},
	})
	DeliveriesCreated = promauto.NewCounter(prometheus.CounterOpts{
		Namespace: Namespace, Name: "deliveries_created_total",
		Help: "Deliveries created by fan-out.",
	})
	OutboxPublished = promauto.NewCounter(prometheus.CounterOpts{
		Namespace: Namespace, Name: "outbox_published_total",
		Help: "Deliveries confirmed by the broker, by the post-commit dispatcher or the relay.",
	})
	OutboxRelayed = promauto.NewCounter(prometheus.CounterOpts{
		Namespace: Namespace, Name: "outbox_relayed_total",
		Help: "Deliveries republished by the relay because no confirm was recorded in time.",
	})
	OutboxDropped = promauto.NewCounter(prometheus.CounterOpts{
		Namespace: Namespace, Name: "outbox_dispatch_skipped_total",
		Help: "Deliveries the post-commit dispatcher did not take (no room within a second, or the broker failing); the relay publishes them.",
	})
	OutboxBacklog = promauto.NewGauge(prometheus.GaugeOpts{
		Namespace: Namespace, Name: "outbox_backlog",
		Help: "Committed deliveries not yet confirmed as enqueued.",
	})
	OutboxLag = promauto.NewGauge(prometheus.GaugeOpts{
		Namespace: Namespace, Name: "outbox_lag_seconds",
		Help: "Age of the oldest committed delivery not yet confirmed as enqueued.",
	})
	FilterErrors = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Name: "filter_errors_total",
		Help: "Webhook payload filters that failed on an event (and so did not match it), by reason: error (a missing field, a wrong type) or cost_limit (cut off).",
	}, []string{"reason"})
	IdempotencyCache = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Name: "idempotency_cache_total",
		Help: "Redis idempotency fast-path lookups by result: hit, miss, error.",
	}, []string{"result"})
)

// Delivery workers.
var (
	// Deliveries has no event_type label: tenants choose event types, and
	// each one would be a series in every worker.
	Deliveries = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Name: "deliveries_total",
		Help: "Delivery attempts by the status they left the delivery in (succeeded, retrying, exhausted) and failure category (empty on success).",
	}, []string{"status", "failure_category"})
	DeliveryDuration = promauto.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: Namespace, Name: "delivery_duration_seconds",
		Help:    "Duration of delivery attempts (the endpoint's HTTP exchange), by outcome (success, failure).",
		Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
	}, []string{"outcome"})
	DeliveryAttemptNumber = promauto.NewHistogram(prometheus.HistogramOpts{
		Namespace: Namespace, Name: "delivery_attempt_number",
		Help:    "Attempt number of each delivery attempt (1 is the first try).",
		Buckets: []float64{1, 2, 3, 4, 5, 6, 8, 10, 15, 20, 30, 50},
	})
	DeliveriesPostponed = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Name: "deliveries_postponed_total",
		Help: "Deliveries put off without an attempt, by reason (host_busy, inactive, circuit_open, rate_limited).",
	}, []string{"reason"})
	DeliveriesParked = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Name: "deliveries_parked_total",
		Help: "Deliveries parked in Postgres until their time (reserved rate-limit slot, half-open decision, free host connection or tenant slot), by reason.",
	}, []string{"reason"})
	DeliveriesHastened = promauto.NewCounter(prometheus.CounterOpts{
		Namespace: Namespace, Name: "deliveries_hastened_total",
		Help: "Deliveries parked for a busy endpoint host whose time was brought forward when the host turned out faster than their reservations allowed for (after a stall).",
	})
	DeliveryRepublishes = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Name: "delivery_republishes_total",
		Help: "Delivery messages published again without an attempt (a deferral through the delay tiers, a hop between delay tiers, a parked delivery woken), by reason.",
	}, []string{"reason"})
	TenantShareDeferred = promauto.NewCounter(prometheus.CounterOpts{
		Namespace: Namespace, Name: "tenant_share_deferred_total",
		Help: "Deliveries deferred because their tenant held its share of this worker's slots while others had work.",
	})
	WorkerInternalErrors = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Name: "worker_internal_errors_total",
		Help: "Deliveries put back because of our own failure (database, broker), by stage; not charged to the endpoint.",
	}, []string{"stage"})
	WorkerBusy = promauto.NewGauge(prometheus.GaugeOpts{
		Namespace: Namespace, Name: "worker_busy",
		Help: "Deliveries being handled right now by this worker process.",
	})
	WorkerCapacity = promauto.NewGauge(prometheus.GaugeOpts{
		Namespace: Namespace, Name: "worker_capacity",
		Help: "Deliveries this worker process handles at once at most (worker.concurrency).",
	})
	OrderedParked = promauto.NewCounter(prometheus.CounterOpts{
		Namespace: Namespace, Name: "ordered_parked_total",
		Help: "Ordered deliveries parked by this worker because an earlier one of their order key was unfinished.",
	})
	OrderedReleased = promauto.NewCounter(prometheus.CounterOpts{
		Namespace: Namespace, Name: "ordered_released_total",
		Help: "Parked ordered deliveries released by this worker when the one before them finished.",
	})
	DeadLettered = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Name: "dead_lettered_total",
		Help: "Messages recorded from the dead-letter queue by the dlq process, by reason (exhausted, poison, gone).",
	}, []string{"reason"})
)

// Queues and the dead-letter side, observed by the dlq process.
var (
	QueueDepth = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: Namespace, Name: "queue_depth",
		Help: "Messages ready in RabbitMQ, by queue (high, normal, low: every shard of the priority's work queue; dead).",
	}, []string{"queue"})
	DLQDeliveries = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: Namespace, Name: "dlq_deliveries",
		Help: "Exhausted deliveries (the DLQ, never auto-purged), by tenant.",
	}, []string{"tenant_id"})
	BatchOperations = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: Namespace, Name: "batch_operations",
		Help: "DLQ batch retry operations, by state (pending, running, completed, cancelled, failed).",
	}, []string{"state"})
	BatchReenqueued = promauto.NewCounter(prometheus.CounterOpts{
		Namespace: Namespace, Name: "batch_reenqueued_total",
		Help: "Exhausted deliveries given a new delivery by a batch retry run by this dlq process.",
	})
	WebhooksDisabled = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Name: "webhooks_disabled_total",
		Help: "Webhooks disabled, by reason: manual (by their tenant, in the api) or auto_disabled (failing, by the dlq).",
	}, []string{"reason"})
	OwnerNotifications = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Name: "owner_notifications_total",
		Help: "Owner notification events, by type and outcome (created, or suppressed to avoid a notification loop).",
	}, []string{"event_type", "outcome"})
	RetentionPruned = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Name: "retention_pruned_total",
		Help: "Rows removed by the retention job, by kind (attempts, attempt_partitions, deliveries, delivery_partitions, payloads, events, event_partitions, portal_sessions, webhook_pauses, rollups).",
	}, []string{"kind"})
	RetentionLastSuccess = promauto.NewGauge(prometheus.GaugeOpts{
		Namespace: Namespace, Name: "retention_last_success_timestamp_seconds",
		Help: "Unix time of the last retention run that finished without error.",
	})
)

// Circuit breakers and rate limits.
var (
	// CircuitState is the only metric labelled by webhook: one series (and
	// one timestamp beside it) per webhook with recent traffic through
	// this worker, so at most webhooks in use x workers series.
	CircuitState       = newCircuitStates()
	CircuitTransitions = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Name: "circuit_breaker_transitions_total",
		Help: "Circuit transitions decided by this worker: opened, half_opened, closed, reopened.",
	}, []string{"transition"})
	RateLimitHits = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Name: "rate_limit_hits_total",
		Help: "Requests refused by a token bucket: deliveries (webhook or tenant bucket) and publishes.",
	}, []string{"scope"})
	RedisFallback = promauto.NewGauge(prometheus.GaugeOpts{
		Namespace: Namespace, Name: "redis_fallback_active",
		Help: "1 while Redis is unreachable and circuit decisions fall back to the state persisted in Postgres (rate limits fail open).",
	})
)

// Process health and settings, set up by Init.
var (
	// dependencyUp is collected at scrape time from the process's
	// readiness checks.
	dependencyUp = &dependencyCollector{desc: prometheus.NewDesc(Namespace+"_dependency_up",
		"1 if this process reached the dependency (postgres, redis, rabbitmq) when scraped, 0 if not: its readiness check.",
		[]string{"dependency"}, nil)}

	// RetentionInterval lets the retention alert count missed runs.
	RetentionInterval = promauto.NewGauge(prometheus.GaugeOpts{
		Namespace: Namespace, Name: "retention_interval_seconds",
		Help: "retention.interval of this dlq process (0 in the api and worker): how often retention should succeed.",
	})
)

func init() { prometheus.MustRegister(dependencyUp, CircuitState) }
