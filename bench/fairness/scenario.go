package main

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

// scenario is who publishes besides the quiet tenants.
type scenario struct {
	name  string
	quiet int  // quiet tenants, sharing the quiet rate, each on a receiver of its own
	many  bool // instead: -tenants quiet tenants taking turns, on one receiver
	hang  bool // the hanging tenant publishes
	flood bool // the flooding tenant publishes
}

// scenarios in the order they run; solo first, as the others are read
// against it.
var scenarios = []scenario{
	{name: "solo", quiet: 1},
	{name: "a", quiet: 1, hang: true},
	{name: "b", quiet: 1, flood: true},
	{name: "c", quiet: 1, hang: true, flood: true},
	{name: "d", quiet: 10, hang: true, flood: true},
	{name: "e", many: true, hang: true, flood: true},
}

// The noisy tenants.
const (
	hangWebhooks  = 60    // each on its own listener that never answers
	hangRate      = 10    // events/s, each fanned out to every one of them
	hangTimeoutMS = 10000 // their attempt timeout
	floodRate     = 200   // events/s at high priority, to one webhook...
	floodRPM      = 60    // ...limited to this many requests a minute (burst: the default 20)
	warmUpEvents  = 20
)

// tenantLoad is one tenant of a scenario, or e's quiet tenants together:
// their publishing and their endpoints.
type tenantLoad struct {
	stream *stream
	recv   *receiver          // quiet and flood: the healthy receiver
	hangs  []*hangingListener // hang: the listeners that never answer
}

// setup is the tenants of one scenario.
type setup struct {
	quiet   []*tenantLoad
	hang    *tenantLoad // nil unless the scenario has it
	flood   *tenantLoad
	groupOf map[string]string // tenant id -> "quiet" or "noisy"
	closers []func()
}

func (s *setup) close() {
	for i := len(s.closers) - 1; i >= 0; i-- {
		s.closers[i]()
	}
}

func (s *setup) streams() []*stream {
	var out []*stream
	for _, t := range append(append([]*tenantLoad{}, s.quiet...), s.hang, s.flood) {
		if t != nil {
			out = append(out, t.stream)
		}
	}
	return out
}

// newSetup creates the scenario's tenants, their receivers and webhooks.
// The caller closes it, also on error.
func newSetup(ctx context.Context, a api, sc scenario, o options) (*setup, error) {
	s := &setup{groupOf: map[string]string{}}
	d := o.publishFor(sc)
	if sc.many {
		t, err := s.manyTenants(ctx, a, o.tenants, newPublishing("fair.quiet", "", o.quietRate, d))
		if err != nil {
			return s, err
		}
		s.quiet = append(s.quiet, t)
	}
	for i := range sc.quiet {
		pub := newPublishing("fair.quiet", "", o.quietRate/float64(sc.quiet), d)
		t, err := s.healthyTenant(ctx, a, fmt.Sprintf("quiet-%d", i+1), "quiet", openWebhookLimit, pub)
		if err != nil {
			return s, err
		}
		s.quiet = append(s.quiet, t)
	}
	if sc.flood {
		pub := newPublishing("fair.flood", "high", floodRate, d)
		t, err := s.healthyTenant(ctx, a, "noisy-flood", "noisy", fmt.Sprintf(`"rate_limit": {"requests_per_minute": %d}`, floodRPM), pub)
		if err != nil {
			return s, err
		}
		s.flood = t
	}
	if sc.hang {
		t, err := s.hangingTenant(ctx, a, newPublishing("fair.hang", "", hangRate, d))
		if err != nil {
			return s, err
		}
		s.hang = t
	}
	return s, nil
}

// healthyTenant creates a tenant publishing pub to one webhook (with the
// extra JSON fields webhook) on a receiver of its own that answers 200 at
// once.
func (s *setup) healthyTenant(ctx context.Context, a api, name, group, webhook string, pub publishing) (*tenantLoad, error) {
	id, key, err := a.createTenant(ctx, name)
	if err != nil {
		return nil, err
	}
	s.groupOf[id] = group
	r, err := newReceiver(pub.n)
	if err != nil {
		return nil, err
	}
	s.closers = append(s.closers, r.close)
	if err := a.createWebhook(ctx, key, r.url, webhook); err != nil {
		return nil, err
	}
	return &tenantLoad{stream: &stream{keys: []string{key}, publishing: pub}, recv: r}, nil
}

// hangingTenant creates the tenant whose events go to hangWebhooks
// endpoints that never answer, with a 10 s attempt timeout and no circuit
// breaker, so that every attempt holds a connection for the full timeout.
func (s *setup) hangingTenant(ctx context.Context, a api, pub publishing) (*tenantLoad, error) {
	id, key, err := a.createTenant(ctx, "noisy-hang")
	if err != nil {
		return nil, err
	}
	s.groupOf[id] = "noisy"
	t := &tenantLoad{stream: &stream{keys: []string{key}, publishing: pub}}
	extra := fmt.Sprintf(`"retry_config": {"timeout_ms": %d}, "circuit_breaker_config": {"enabled": false}, %s`, hangTimeoutMS, openWebhookLimit)
	for range hangWebhooks {
		h, err := newHangingListener()
		if err != nil {
			return nil, err
		}
		s.closers = append(s.closers, h.close)
		t.hangs = append(t.hangs, h)
		if err := a.createWebhook(ctx, key, h.url, extra); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// warmUp publishes a few events of a tenant of its own and waits until
// they are received, so that no scenario measures connections being
// opened for the first time.
func warmUp(ctx context.Context, a api) error {
	s := &setup{groupOf: map[string]string{}}
	defer s.close()
	t, err := s.healthyTenant(ctx, a, "warm-up", "warm-up", openWebhookLimit, publishing{eventType: "fair.warmup", rate: 50, n: warmUpEvents})
	if err != nil {
		return err
	}
	publish(ctx, a.url, []*stream{t.stream}, time.Now())
	if t.stream.accepted.Load() != warmUpEvents {
		return fmt.Errorf("warm-up: %d of %d events accepted (first error: %s)", t.stream.accepted.Load(), warmUpEvents, t.stream.err())
	}
	return waitFor(ctx, 30*time.Second, func() bool { return t.recv.received() == warmUpEvents })
}

// waitFor polls done every 100 ms until it holds (nil), ctx ends or limit
// passes (an error).
func waitFor(ctx context.Context, limit time.Duration, done func() bool) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	deadline := time.Now().Add(limit)
	for !done() {
		if time.Now().After(deadline) {
			return fmt.Errorf("not done within %s", limit)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	return nil
}

// newAPI returns a client of the api keeping up to createParallel
// connections alive, for e's tenants created that many at a time.
func newAPI(url, adminToken string) api {
	return api{url: url, adminToken: adminToken, client: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		MaxIdleConns: createParallel, MaxIdleConnsPerHost: createParallel, IdleConnTimeout: time.Minute,
	}}}
}
