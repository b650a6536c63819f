package main

import (
	"context"
	"fmt"
	"log"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Scenario e's many quiet tenants.
const (
	// maxTenants bounds -tenants.
	maxTenants = 50_000
	// createParallel is how many of e's tenants are created at once, each
	// tenant then its webhook, over as many keep-alive connections: enough
	// to keep the api and Postgres busy on two cores without queueing on
	// the api's database pool.
	createParallel = 16
	// setupLimit bounds the creation of e's tenants and webhooks.
	setupLimit = 15 * time.Minute
	// progressEvery is how many created tenants make a progress line.
	progressEvery = 2000
)

// publishFor is how long sc publishes: -duration, or for e at least long
// enough for every one of the -tenants to publish once at -quiet-rate
// together. The rate stays solo's, so that solo is e's baseline: a higher
// rate would measure a saturated machine, not the sharing of the worker
// (see the package comment).
func (o options) publishFor(sc scenario) time.Duration {
	if !sc.many {
		return o.duration
	}
	need := time.Duration(math.Ceil(float64(o.tenants)/o.quietRate)) * time.Second
	return max(o.duration, need)
}

// manyTenants creates n quiet tenants, each with one webhook on one shared
// receiver at a path of its own, /hook/<index>, and returns them as one
// load: a stream publishing pub with their keys in turn, event i by
// tenant i mod n. Every tenant publishes at least once.
func (s *setup) manyTenants(ctx context.Context, a api, n int, pub publishing) (*tenantLoad, error) {
	pub.n = max(pub.n, n)
	r, err := newReceiver(pub.n)
	if err != nil {
		return nil, err
	}
	s.closers = append(s.closers, r.close)
	ids, keys := make([]string, n), make([]string, n)
	var created atomic.Int64
	began := time.Now()
	err = forEach(ctx, n, createParallel, func(ctx context.Context, i int) error {
		id, key, err := a.createTenant(ctx, fmt.Sprintf("quiet-%d", i+1))
		if err != nil {
			return fmt.Errorf("tenant %d of %d: %w", i+1, n, err)
		}
		ids[i] = id
		if err := a.createWebhook(ctx, key, fmt.Sprintf("%s/%d", r.url, i), openWebhookLimit); err != nil {
			return fmt.Errorf("webhook of tenant %d of %d: %w", i+1, n, err)
		}
		keys[i] = key
		if c := created.Add(1); c%progressEvery == 0 {
			log.Printf("%d of %d tenants and webhooks created (%.0f/s)", c, n, float64(c)/time.Since(began).Seconds())
		}
		return nil
	})
	for _, id := range ids {
		if id != "" {
			s.groupOf[id] = "quiet"
		}
	}
	if err != nil {
		return nil, err
	}
	return &tenantLoad{stream: &stream{keys: keys, publishing: pub}, recv: r}, nil
}

// forEach calls f with 0 to n-1 on parallel goroutines, within setupLimit.
// The first error stops the calls not started yet (and cancels the
// context of those under way); it is returned, as is the end of ctx.
func forEach(ctx context.Context, n, parallel int, f func(context.Context, int) error) error {
	ctx, cancelTime := context.WithTimeout(ctx, setupLimit)
	defer cancelTime()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(parallel, n) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := f(ctx, i); err != nil {
					cancel(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return context.Cause(ctx)
}

// manyResult is what e measured of its tenants one by one.
type manyResult struct {
	tenants   int
	events    int   // scheduled
	published int   // tenants with at least one event scheduled
	kept      int   // of those, tenants whose every event was received within shareWindow
	crossed   int64 // requests on one tenant's webhook carrying another's event
	dups      int64 // requests for an event already received
}

// tenantsKept reads the receipts of a stream published by n tenants in
// turn (event i by tenant i mod n), lat holding each event's latency (0:
// not received).
func tenantsKept(lat []time.Duration, n int) manyResult {
	m := manyResult{tenants: n, events: len(lat), published: min(n, len(lat))}
	late := make([]bool, m.published)
	for i, l := range lat {
		if l <= 0 || l > shareWindow {
			late[i%n] = true
		}
	}
	for _, l := range late {
		if !l {
			m.kept++
		}
	}
	return m
}

// turns says how many events each tenant published: "once", "1 or 2 times"...
func (m manyResult) turns() string {
	lo, hi := m.events/m.tenants, (m.events+m.tenants-1)/m.tenants
	switch {
	case lo == hi && lo == 1:
		return "once"
	case lo == hi:
		return fmt.Sprintf("%d times", lo)
	}
	return fmt.Sprintf("%d or %d times", lo, hi)
}
