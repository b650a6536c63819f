package console

import (
	"context"
	"html/template"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/hookline/hookline/internal/chart"
	"github.com/hookline/hookline/internal/history"
)

// chartWindow is one window the charts cover: its name, length and bucket
// count.
type chartWindow struct {
	Name    string
	Window  time.Duration
	Buckets int
}

// chartWindows are the windows of the webhook and tenant pages: the last
// hour by minute, the last day by hour (hourly rollups).
var chartWindows = []chartWindow{
	{Name: "last hour", Window: time.Hour, Buckets: 60},
	{Name: "last day", Window: 24 * time.Hour, Buckets: 24},
}

// chartSet is the three charts of one window: deliveries (succeeded and
// failed attempts per bucket), success rate and latency.
type chartSet struct {
	Name                         string
	Deliveries, Success, Latency template.HTML
}

// chartTTL is how long drawn charts are reused: a page reloaded in a loop
// (by a portal's customer, say) queries a tenant's day of attempts at
// most once per chartTTL in each api process, so that it cannot load
// Postgres for the other tenants.
const chartTTL = 5 * time.Second

// maxCachedCharts bounds the charts kept; past it the cache is emptied.
const maxCachedCharts = 10_000

// chartCache keeps drawn charts by tenant and webhook (uuid.Nil: the
// tenant's).
type chartCache struct {
	mu      sync.Mutex
	entries map[[2]uuid.UUID]cachedCharts
}

type cachedCharts struct {
	sets    []chartSet
	expires time.Time
}

// charts draws the windows of chartWindows for the tenant's attempts, or
// one webhook's when webhookID is set, or returns those drawn within
// chartTTL.
func (c *Console) charts(ctx context.Context, tenantID uuid.UUID, webhookID *uuid.UUID) ([]chartSet, error) {
	key := [2]uuid.UUID{tenantID}
	if webhookID != nil {
		key[1] = *webhookID
	}
	now := c.now()
	c.chartCache.mu.Lock()
	e, ok := c.chartCache.entries[key]
	c.chartCache.mu.Unlock()
	if ok && now.Before(e.expires) {
		return e.sets, nil
	}
	sets, err := c.drawCharts(ctx, tenantID, webhookID)
	if err != nil {
		return nil, err
	}
	c.chartCache.mu.Lock()
	defer c.chartCache.mu.Unlock()
	if c.chartCache.entries == nil || len(c.chartCache.entries) >= maxCachedCharts {
		c.chartCache.entries = map[[2]uuid.UUID]cachedCharts{}
	}
	c.chartCache.entries[key] = cachedCharts{sets: sets, expires: now.Add(chartTTL)}
	return sets, nil
}

// drawCharts queries and draws the charts of charts.
func (c *Console) drawCharts(ctx context.Context, tenantID uuid.UUID, webhookID *uuid.UUID) ([]chartSet, error) {
	out := make([]chartSet, 0, len(chartWindows))
	for _, w := range chartWindows {
		step := w.Window / time.Duration(w.Buckets)
		s, err := c.deliveries.Series(ctx, tenantID, webhookID, w.Window, w.Buckets, c.now().Truncate(step).Add(step))
		if err != nil {
			return nil, err
		}
		out = append(out, drawSeries(w.Name, s))
	}
	return out, nil
}

// drawSeries turns a window of attempts into its three charts.
func drawSeries(name string, s history.Series) chartSet {
	var ok, failed, rate, p50, p95 []chart.Point
	for _, b := range s.Buckets {
		succeeded, failures := float64(b.Successes), float64(b.Failures)
		ok = append(ok, chart.Point{T: b.Start, V: &succeeded})
		failed = append(failed, chart.Point{T: b.Start, V: &failures})
		var percent *float64
		if r := b.SuccessRate(); r != nil {
			v := *r * 100
			percent = &v
		}
		rate = append(rate, chart.Point{T: b.Start, V: percent})
		p50 = append(p50, chart.Point{T: b.Start, V: b.P50MS})
		p95 = append(p95, chart.Point{T: b.Start, V: b.P95MS})
	}
	window := chart.Chart{Start: s.Start, End: s.End, Step: s.Step}
	deliveries := window
	deliveries.Title = "Attempts, " + name
	deliveries.Series = []chart.Series{{Name: "succeeded", Class: "ok", Points: ok}, {Name: "failed", Class: "bad", Points: failed}}
	success := window
	success.Title, success.Unit = "Success rate, "+name, chart.Percent
	success.Series = []chart.Series{{Name: "success rate", Points: rate}}
	latency := window
	latency.Title, latency.Unit = "Latency, "+name, chart.Millis
	latency.Series = []chart.Series{{Name: "p50", Points: p50}, {Name: "p95", Points: p95}}
	return chartSet{Name: name, Deliveries: chart.Bars(deliveries), Success: chart.Lines(success), Latency: chart.Lines(latency)}
}
