package event_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/event"
	"github.com/hookline/hookline/internal/metrics"
	"github.com/hookline/hookline/internal/webhook"
)

// hooks registers webhooks through the store, as the API does.
type hooks struct {
	t      *testing.T
	store  *webhook.Store
	tenant uuid.UUID
}

func (h hooks) add(events []string, filter string) webhook.Webhook {
	h.t.Helper()
	w, err := h.store.Create(context.Background(), webhook.Webhook{TenantID: h.tenant, URL: "https://8.8.8.8/h",
		Events: events, Filter: filter, Active: true, RetryConfig: webhook.DefaultRetryConfig(),
		CircuitBreakerConfig: webhook.DefaultBreakerConfig(), RateLimit: webhook.RateLimit{RequestsPerMinute: 60, Burst: 1},
		OrderingGuarantee: webhook.OrderingNone, Headers: webhook.Headers{}, Metadata: json.RawMessage(`{}`),
		Secret: webhook.NewSecret()})
	require.NoError(h.t, err)
	return w
}

// set changes a webhook as a PATCH does.
func (h hooks) set(w webhook.Webhook, change func(*webhook.Webhook)) webhook.Webhook {
	h.t.Helper()
	change(&w)
	out, err := h.store.Update(context.Background(), w)
	require.NoError(h.t, err)
	return out
}

// receivers publishes an event and returns the webhooks it was fanned out
// to, checking that the answer counts exactly those.
func receivers(t *testing.T, svc *event.Service, pool *pgxpool.Pool, tenant uuid.UUID, eventType, data string) []uuid.UUID {
	t.Helper()
	res, err := svc.Publish(context.Background(), tenant, event.Request{EventType: eventType, Source: "checkout",
		Data: json.RawMessage(data)})
	require.NoError(t, err)
	return deliveredTo(t, pool, res)
}

func deliveredTo(t *testing.T, pool *pgxpool.Pool, res event.Result) []uuid.UUID {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT webhook_id FROM deliveries WHERE event_id = $1 ORDER BY webhook_id`, res.ID)
	require.NoError(t, err)
	var out []uuid.UUID
	for rows.Next() {
		var id uuid.UUID
		require.NoError(t, rows.Scan(&id))
		out = append(out, id)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, len(out), res.Deliveries, "the answer counts the deliveries made")
	return out
}

func ids(ws ...webhook.Webhook) []uuid.UUID {
	out := []uuid.UUID{}
	for _, w := range ws {
		out = append(out, w.ID)
	}
	slices.SortFunc(out, func(a, b uuid.UUID) int { return strings.Compare(a.String(), b.String()) })
	return out
}

func filterErrors(reason string) float64 {
	return testutil.ToFloat64(metrics.FilterErrors.WithLabelValues(reason))
}

// Fan-out delivers an event to a webhook with a filter only if the filter
// is true for it: nested fields, lists, presence, event type and source.
// A filter that fails at run time (a missing field read without has(), a
// wrong type) does not match and is counted; the publish itself succeeds.
func TestFanOutHonoursFilters(t *testing.T) {
	t.Parallel()
	svc, pool, _, tenant := tracedService(t, false)
	h := hooks{t: t, store: webhook.NewStore(pool), tenant: tenant}
	all := h.add([]string{"order.*"}, "")
	amount := h.add([]string{"order.*"}, `data.amount > 100 && data.currency == "EUR"`)
	vip := h.add([]string{"order.*"}, `"vip" in data.tags`)
	gold := h.add([]string{"order.*"}, `has(data.customer) && data.customer.tier == "gold"`)
	plain := h.add([]string{"order.*"}, `data.customer.tier == "gold"`)
	source := h.add([]string{"*"}, `source == "checkout" && event_type.endsWith(".created")`)
	other := h.add([]string{"invoice.*"}, `true`)
	_ = other

	tests := []struct {
		name, eventType, data string
		want                  []uuid.UUID
		errors                float64
	}{
		{"every filter true", "order.created", `{"amount": 150, "currency": "EUR", "tags": ["vip"], "customer": {"tier": "gold"}}`,
			ids(all, amount, vip, gold, plain, source), 0},
		{"nested field false", "order.created", `{"amount": 150, "currency": "EUR", "tags": [], "customer": {"tier": "silver"}}`,
			ids(all, amount, source), 0},
		{"missing fields: has() is false, plain access fails", "order.updated", `{"amount": 50, "tags": ["new", "vip"]}`,
			ids(all, vip), 1},
		{"wrong types fail", "order.created", `{"amount": "150", "currency": "EUR", "tags": "vip", "customer": {"tier": 1}}`,
			ids(all, source), 2},
	}
	for _, tc := range tests {
		before := filterErrors("error")
		got := receivers(t, svc, pool, tenant, tc.eventType, tc.data)
		require.Equal(t, tc.want, got, tc.name)
		require.GreaterOrEqual(t, filterErrors("error")-before, tc.errors, "%s: run-time errors counted", tc.name)
	}
}

// A filter whose evaluation would run too long on an event is cut off by
// the cost limit: the event is not delivered to that webhook, the cut is
// counted, and the publish succeeds for the other webhooks.
func TestFanOutCutsOffCostlyFilters(t *testing.T) {
	t.Parallel()
	svc, pool, _, tenant := tracedService(t, false)
	h := hooks{t: t, store: webhook.NewStore(pool), tenant: tenant}
	all := h.add([]string{"*"}, "")
	scan := h.add([]string{"*"}, `data.numbers.exists(n, n == 2)`)

	require.Equal(t, ids(all, scan), receivers(t, svc, pool, tenant, "batch.done", `{"numbers": [1, 1, 2]}`))
	before := filterErrors("cost_limit")
	long := `{"numbers": [` + strings.Repeat("1,", 5000) + `2]}`
	require.Equal(t, ids(all), receivers(t, svc, pool, tenant, "batch.done", long))
	require.GreaterOrEqual(t, filterErrors("cost_limit")-before, 1.0)
}

// A change of filter applies from the next publish, whichever api made it
// and whichever serves the publish: each api caches its tenants' filters,
// and the commit finds a cached view out of date. Adding a filter, changing
// it, removing it, registering a new filtered webhook and pausing one all
// count.
func TestFilterChangesApplyToTheNextPublish(t *testing.T) {
	t.Parallel()
	svc, pool, _, tenant := tracedService(t, false)
	other := event.NewService(pool, nil, "", discard{}, slog.New(slog.DiscardHandler))
	runService(t, other)
	h := hooks{t: t, store: webhook.NewStore(pool), tenant: tenant}
	w := h.add([]string{"order.*"}, `data.amount > 100`)
	const big, small = `{"amount": 500}`, `{"amount": 5}`
	for _, s := range []*event.Service{svc, other} { // both apis cache the view
		require.Equal(t, ids(w), receivers(t, s, pool, tenant, "order.created", big))
		require.Empty(t, receivers(t, s, pool, tenant, "order.created", small))
	}

	w = h.set(w, func(w *webhook.Webhook) { w.Filter = `data.amount < 10` })
	for _, s := range []*event.Service{svc, other} {
		require.Empty(t, receivers(t, s, pool, tenant, "order.created", big), "the changed filter applies")
		require.Equal(t, ids(w), receivers(t, s, pool, tenant, "order.created", small))
	}

	w = h.set(w, func(w *webhook.Webhook) { w.Filter = "" })
	require.Equal(t, ids(w), receivers(t, svc, pool, tenant, "order.created", big), "without a filter, everything")

	added := h.add([]string{"order.*"}, `has(data.vip)`)
	require.Equal(t, ids(w), receivers(t, other, pool, tenant, "order.created", big), "a new filtered webhook is seen")
	require.Equal(t, ids(w, added), receivers(t, other, pool, tenant, "order.created", `{"vip": true}`))

	w = h.set(w, func(w *webhook.Webhook) { w.Filter = `data.amount == 7` })
	require.Empty(t, receivers(t, svc, pool, tenant, "order.created", big), "a filter added to a webhook is seen")

	h.set(added, func(w *webhook.Webhook) { w.Active = false })
	require.Equal(t, ids(w), receivers(t, other, pool, tenant, "order.created", `{"vip": true, "amount": 7}`))
	h.set(added, func(w *webhook.Webhook) { w.Active = true; w.Events = []string{"invoice.*"} })
	require.Equal(t, ids(w), receivers(t, svc, pool, tenant, "order.created", `{"vip": true, "amount": 7}`),
		"event types still decide first")
}

// runService runs svc's group commit until the test ends.
func runService(t *testing.T, svc *event.Service) {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	t.Cleanup(func() {
		stop()
		require.NoError(t, <-done)
	})
}

// addTenant creates a tenant with limits no test here reaches.
func addTenant(t *testing.T, pool *pgxpool.Pool, name string) uuid.UUID {
	t.Helper()
	id := uuid.New()
	_, err := pool.Exec(context.Background(), `INSERT INTO tenants (id, name, rate_limit_rpm, rate_limit_burst, publish_rps, publish_burst)
		VALUES ($1, $2, 1000, 100, 1000, 100)`, id, name)
	require.NoError(t, err)
	return id
}

// Events committed together (one group commit for many publishes, several
// tenants, filters changing meanwhile) are each fanned out by their own
// tenant's filters.
func TestConcurrentPublishesEachFollowTheirFilters(t *testing.T) {
	t.Parallel()
	svc, pool, _, tenant := tracedService(t, false)
	second := addTenant(t, pool, "t2")
	store := webhook.NewStore(pool)
	odd := hooks{t: t, store: store, tenant: tenant}.add([]string{"n"}, `int(data.n) % 2 == 1`)
	even := hooks{t: t, store: store, tenant: second}.add([]string{"n"}, `int(data.n) % 2 == 0`)
	changing := hooks{t: t, store: store, tenant: tenant}
	flip := changing.add([]string{"n"}, `data.n >= 0.0`)

	var wg sync.WaitGroup
	results := make([]event.Result, 60)
	errs := make([]error, 60)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			who := tenant
			if i%3 == 0 {
				who = second
			}
			results[i], errs[i] = svc.Publish(context.Background(), who, event.Request{EventType: "n",
				Data: json.RawMessage(fmt.Sprintf(`{"n": %d}`, i))})
		}()
		if i == 30 {
			flip = changing.set(flip, func(w *webhook.Webhook) { w.Filter = `data.n >= 0.0 && true` })
		}
	}
	wg.Wait()
	for i, res := range results {
		require.NoError(t, errs[i])
		got := deliveredTo(t, pool, res)
		switch {
		case i%3 == 0 && i%2 == 0:
			require.Equal(t, ids(even), got, "event %d", i)
		case i%3 == 0:
			require.Empty(t, got, "event %d", i)
		case i%2 == 1:
			require.Equal(t, ids(odd, flip), got, "event %d", i)
		default:
			require.Equal(t, ids(flip), got, "event %d", i)
		}
	}
}
