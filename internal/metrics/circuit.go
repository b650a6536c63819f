package metrics

import (
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
)

// The values of hookline_circuit_breaker_state.
const (
	CircuitClosed   = 0
	CircuitHalfOpen = 1
	CircuitOpen     = 2
)

// How long a circuit's series outlive its last observation. A closed
// circuit with no traffic has nothing to report; an open one may see no
// delivery for a whole sleep window (at most an hour), its deliveries
// parked until the half-open time, and must not vanish from the
// dashboards meanwhile.
const (
	closedCircuitIdle = 10 * time.Minute
	openCircuitIdle   = 2 * time.Hour
)

// CircuitStates exports hookline_circuit_breaker_state and, beside each
// series, the time it was last observed
// (hookline_circuit_breaker_state_updated_timestamp_seconds). The worker
// sets it from every breaker decision and recorded outcome, closed
// included, so that every webhook with recent traffic has a series; a
// series not observed for closedCircuitIdle (openCircuitIdle while not
// closed) is dropped at the next scrape, which keeps the label set to the
// webhooks in use. Each worker exports the circuits as it last saw them;
// across workers the current state is the one observed most recently (the
// hookline:circuit_breaker_state:latest rule in deploy/prometheus).
//
// Set costs a map write under a mutex and no allocation once the webhook
// is known; the label strings are made at scrape time.
type CircuitStates struct {
	state, updated *prometheus.Desc
	mu             sync.Mutex
	seen           map[uuid.UUID]circuitSeen
}

type circuitSeen struct {
	state float64
	at    time.Time
}

func newCircuitStates() *CircuitStates {
	return &CircuitStates{
		state: prometheus.NewDesc(Namespace+"_circuit_breaker_state",
			"Circuit state per webhook as this worker last observed it: 0 closed, 1 half-open, 2 open. One series per webhook with traffic in the last 10 minutes (2 hours while not closed).",
			[]string{"webhook_id"}, nil),
		updated: prometheus.NewDesc(Namespace+"_circuit_breaker_state_updated_timestamp_seconds",
			"Unix time this worker last observed the webhook's circuit state; across workers the latest one is the current state.",
			[]string{"webhook_id"}, nil),
		seen: map[uuid.UUID]circuitSeen{},
	}
}

// Set records that the circuit of webhook was observed in state
// (CircuitClosed, CircuitHalfOpen or CircuitOpen) at at.
func (c *CircuitStates) Set(webhook uuid.UUID, state float64, at time.Time) {
	c.mu.Lock()
	if prev, ok := c.seen[webhook]; !ok || !at.Before(prev.at) {
		c.seen[webhook] = circuitSeen{state: state, at: at}
	}
	c.mu.Unlock()
}

// Describe implements prometheus.Collector.
func (c *CircuitStates) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.state
	ch <- c.updated
}

// Collect implements prometheus.Collector: it drops the circuits not
// observed recently and exports the others.
func (c *CircuitStates) Collect(ch chan<- prometheus.Metric) {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	for id, s := range c.seen {
		idle := closedCircuitIdle
		if s.state != CircuitClosed {
			idle = openCircuitIdle
		}
		if now.Sub(s.at) > idle {
			delete(c.seen, id)
			continue
		}
		label := id.String()
		ch <- prometheus.MustNewConstMetric(c.state, prometheus.GaugeValue, s.state, label)
		ch <- prometheus.MustNewConstMetric(c.updated, prometheus.GaugeValue, float64(s.at.UnixNano())/1e9, label)
	}
}
