package metrics_test

import (
	"context"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/breaker"
	"github.com/hookline/hookline/internal/health"
	"github.com/hookline/hookline/internal/metrics"
	"github.com/hookline/hookline/internal/notify"
)

func gather(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	mfs, err := prometheus.DefaultGatherer.Gather()
	require.NoError(t, err)
	out := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		out[mf.GetName()] = mf
	}
	return out
}

// value returns the value of the series of family name whose labels
// include want, failing when there is none.
func value(t *testing.T, mfs map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	t.Helper()
	require.NotNil(t, mfs[name], "family %s is exported", name)
	v, ok := find(mfs, name, want)
	require.True(t, ok, "no series of %s with %v", name, want)
	return v
}

// find returns the value of the series of family name whose labels
// include want, and whether there is one.
func find(mfs map[string]*dto.MetricFamily, name string, want map[string]string) (float64, bool) {
	for _, m := range mfs[name].GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		match := true
		for k, v := range want {
			match = match && labels[k] == v
		}
		if !match {
			continue
		}
		switch {
		case m.Counter != nil:
			return m.GetCounter().GetValue(), true
		case m.Gauge != nil:
			return m.GetGauge().GetValue(), true
		case m.Histogram != nil:
			return float64(m.GetHistogram().GetSampleCount()), true
		}
	}
	return 0, false
}

// Init pre-creates each process's known series at zero, exports the
// dlq's retention interval, and makes every scrape probe the process's
// dependencies.
func TestInit(t *testing.T) {
	down := errors.New("connection refused")
	checks := health.Checks{
		"postgres": func(context.Context) error { return nil },
		"redis":    func(context.Context) error { return down },
	}
	for _, name := range []string{"api", "worker", "dlq"} {
		metrics.Init(metrics.Process{Name: name, Checks: checks, RetentionInterval: 90 * time.Minute})
	}
	mfs := gather(t)
	for _, c := range []struct {
		name, label string
		values      []string
	}{
		{"hookline_publish_requests_total", "outcome", metrics.KnownValues["PublishRequests"]},
		{"hookline_idempotency_cache_total", "result", metrics.KnownValues["IdempotencyCache"]},
		{"hookline_deliveries_postponed_total", "reason", metrics.KnownValues["DeliveriesPostponed"]},
		{"hookline_worker_internal_errors_total", "stage", metrics.KnownValues["WorkerInternalErrors"]},
		{"hookline_delivery_duration_seconds", "outcome", metrics.KnownValues["DeliveryDuration"]},
		{"hookline_circuit_breaker_transitions_total", "transition", metrics.KnownValues["CircuitTransitions"]},
		{"hookline_dead_lettered_total", "reason", metrics.KnownValues["DeadLettered"]},
		{"hookline_retention_pruned_total", "kind", metrics.KnownValues["RetentionPruned"]},
		{"hookline_rate_limit_hits_total", "scope", metrics.KnownValues["RateLimitHits"]},
		{"hookline_filter_errors_total", "reason", metrics.KnownValues["FilterErrors"]},
		{"hookline_owner_notifications_total", "event_type", notify.Types},
	} {
		for _, v := range c.values {
			require.Zero(t, value(t, mfs, c.name, map[string]string{c.label: v}), "%s{%s=%q}", c.name, c.label, v)
		}
	}
	require.Equal(t, 5400.0, value(t, mfs, "hookline_retention_interval_seconds", nil))
	require.Equal(t, 1.0, value(t, mfs, "hookline_dependency_up", map[string]string{"dependency": "postgres"}))
	require.Equal(t, 0.0, value(t, mfs, "hookline_dependency_up", map[string]string{"dependency": "redis"}))
	require.NotContains(t, mfs, "hookline_batch_operations", "measured gauges wait for their first measurement")
}

// Setting a circuit's state stamps the time of the observation beside it.
func TestCircuitStateIsStamped(t *testing.T) {
	t.Parallel()
	id := uuid.New()
	at := time.Now().Add(-time.Second)
	metrics.CircuitState.Set(id, metrics.CircuitOpen, at)
	metrics.CircuitState.Set(id, metrics.CircuitClosed, at.Add(-time.Second)) // an older observation, reported late
	mfs := gather(t)
	require.Equal(t, 2.0, value(t, mfs, "hookline_circuit_breaker_state", map[string]string{"webhook_id": id.String()}))
	stamp := value(t, mfs, "hookline_circuit_breaker_state_updated_timestamp_seconds", map[string]string{"webhook_id": id.String()})
	require.InDelta(t, float64(at.UnixNano())/1e9, stamp, 1e-3)
}

// A closed circuit not observed for 10 minutes, and one in another state
// not observed for 2 hours, leave the metrics; the others stay.
func TestIdleCircuitsLeaveTheMetrics(t *testing.T) {
	t.Parallel()
	now := time.Now()
	cases := []struct {
		state float64
		age   time.Duration
		kept  bool
	}{
		{metrics.CircuitClosed, 9 * time.Minute, true},
		{metrics.CircuitClosed, 11 * time.Minute, false},
		{metrics.CircuitOpen, 11 * time.Minute, true},
		{metrics.CircuitHalfOpen, 119 * time.Minute, true},
		{metrics.CircuitOpen, 121 * time.Minute, false},
	}
	ids := make([]uuid.UUID, len(cases))
	for i, c := range cases {
		ids[i] = uuid.New()
		metrics.CircuitState.Set(ids[i], c.state, now.Add(-c.age))
	}
	for range 2 { // dropped at the first scrape, still absent at the next
		mfs := gather(t)
		for i, c := range cases {
			_, found := find(mfs, "hookline_circuit_breaker_state", map[string]string{"webhook_id": ids[i].String()})
			require.Equal(t, c.kept, found, "state %v observed %s ago", c.state, c.age)
		}
	}
}

// The label values Init knows are those the code uses: the breaker's
// transitions, notify's types, and every string literal passed to a
// metric's WithLabelValues anywhere in the repository.
func TestKnownLabelValuesMatchTheCode(t *testing.T) {
	t.Parallel()
	for _, tr := range []breaker.Transition{breaker.Opened, breaker.HalfOpened, breaker.ClosedAgain, breaker.Reopened} {
		require.Contains(t, metrics.KnownValues["CircuitTransitions"], string(tr))
	}
	var types []string
	for _, ts := range metrics.NotificationTypes {
		types = append(types, ts...)
	}
	slices.Sort(types)
	want := slices.Clone(notify.Types)
	slices.Sort(want)
	require.Equal(t, want, types, "every notification type is pre-created by the process that records it")

	literals := labelLiterals(t)
	require.NotEmpty(t, literals["RateLimitHits"], "the scan finds calls")
	for metric, values := range literals {
		known, ok := metrics.KnownValues[metric]
		if !ok {
			continue
		}
		for _, v := range values {
			require.Contains(t, known, v, "metrics.%s is given %q; add it to Init's values", metric, v)
		}
	}
}

// labelLiterals finds metrics.X.WithLabelValues(...) calls in the
// repository's non-test Go files and returns, per X, the string literals
// given as the label Init pre-creates (the last one for
// OwnerNotifications, the first otherwise).
func labelLiterals(t *testing.T) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) == 0 {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || sel.Sel.Name != "WithLabelValues" {
				return true
			}
			inner, ok := sel.X.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if pkg, ok := inner.X.(*ast.Ident); !ok || pkg.Name != "metrics" {
				return true
			}
			arg := call.Args[0]
			if inner.Sel.Name == "OwnerNotifications" {
				arg = call.Args[len(call.Args)-1]
			}
			if lit, ok := arg.(*ast.BasicLit); ok && lit.Kind == token.STRING {
				s, err := strconv.Unquote(lit.Value)
				if err == nil {
					out[inner.Sel.Name] = append(out[inner.Sel.Name], s)
				}
			}
			return true
		})
		return nil
	})
	require.NoError(t, err)
	return out
}
