package metrics_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	_ "github.com/hookline/hookline/internal/metrics"
	"github.com/hookline/hookline/internal/metrics/metricstest"
)

const root = "../.."

// exported returns the name of every metric family registered with the
// default registry: the metrics package's and the Go client's process_ and
// go_ collectors (histograms also answer to _bucket, _sum and _count).
func exported(t *testing.T) map[string]bool {
	t.Helper()
	ch := make(chan *prometheus.Desc, 256)
	go func() {
		prometheus.DefaultRegisterer.(*prometheus.Registry).Describe(ch)
		close(ch)
	}()
	name := regexp.MustCompile(`fqName: "([a-z_:]+)"`)
	out := map[string]bool{}
	for d := range ch {
		m := name.FindStringSubmatch(d.String())
		require.NotNil(t, m, d.String())
		for _, suffix := range []string{"", "_bucket", "_sum", "_count"} {
			out[m[1]+suffix] = true
		}
	}
	return out
}

// Every hookline_* metric named anywhere in a dashboard or a rule file
// (queries, descriptions, comments) is one that the processes export.
func TestDeployFilesNameOnlyExportedMetrics(t *testing.T) {
	t.Parallel()
	known := exported(t)
	require.True(t, known["hookline_deliveries_total"], "the registry holds the package's metrics")
	files, err := metricstest.Dashboards(root)
	require.NoError(t, err)
	rules, err := metricstest.RuleFiles(root)
	require.NoError(t, err)
	files = append(files, rules...)
	require.NotEmpty(t, files)
	ref := regexp.MustCompile(`hookline_[a-z_]+`)
	for _, f := range files {
		raw, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, m := range ref.FindAllString(string(raw), -1) {
			if strings.HasSuffix(m, "_") {
				continue
			}
			require.True(t, known[m], "%s names %s, which no process exports", f, m)
		}
	}
}

// Every metric a dashboard or rule query reads, hookline's or the Go
// client's, is registered; the queries read the families they are meant to.
func TestQueriesReadOnlyExportedMetrics(t *testing.T) {
	t.Parallel()
	known := exported(t)
	refs, err := metricstest.Referenced(root)
	require.NoError(t, err)
	for name, file := range refs {
		require.True(t, known[name], "%s reads %s, which no process exports", file, name)
	}
	for _, want := range []string{
		"hookline_publish_requests_total", "hookline_deliveries_total", "hookline_delivery_duration_seconds_bucket",
		"hookline_queue_depth", "hookline_dlq_deliveries", "hookline_circuit_breaker_state",
		"hookline_redis_fallback_active", "hookline_worker_busy", "hookline_outbox_lag_seconds",
		"hookline_batch_operations", "hookline_batch_reenqueued_total", "hookline_owner_notifications_total",
		"hookline_retention_pruned_total", "hookline_retention_last_success_timestamp_seconds",
		"hookline_dependency_up",
	} {
		require.Contains(t, refs, want, "a dashboard or rule reads %s", want)
	}
}

// The dashboards are provisioned from one folder, each with its own uid,
// unique panel ids, the provisioned Prometheus data source, and panels that
// do not overlap.
func TestDashboardsAreWellFormed(t *testing.T) {
	t.Parallel()
	files, err := metricstest.Dashboards(root)
	require.NoError(t, err)
	uids := map[string]string{}
	for _, f := range files {
		d := readDashboard(t, f)
		require.NotEmpty(t, d.UID, f)
		require.Empty(t, uids[d.UID], "%s and %s share uid %s", f, uids[d.UID], d.UID)
		uids[d.UID] = f
		ids := map[int]bool{}
		var cells []gridPos
		for _, p := range d.Panels {
			require.False(t, ids[p.ID], "%s: panel id %d twice", f, p.ID)
			ids[p.ID] = true
			if p.Datasource != nil {
				require.Equal(t, "prometheus", p.Datasource.UID, "%s: panel %q", f, p.Title)
			}
			require.LessOrEqual(t, p.GridPos.X+p.GridPos.W, 24, "%s: panel %q is wider than the grid", f, p.Title)
			for _, c := range cells {
				require.False(t, c.overlaps(p.GridPos), "%s: panel %q overlaps another", f, p.Title)
			}
			cells = append(cells, p.GridPos)
			if p.Type != "row" && p.Type != "text" {
				require.NotEmpty(t, p.Targets, "%s: panel %q has no query", f, p.Title)
				require.NotEmpty(t, p.Description, "%s: panel %q says what it shows", f, p.Title)
			}
		}
	}
	require.Contains(t, uids, "hookline-overview")
	require.Contains(t, uids, "hookline-webhook")
	require.Contains(t, uids, "hookline-api")
	raw, err := os.ReadFile(filepath.Join(root, "deploy/grafana/provisioning/datasources/prometheus.yml"))
	require.NoError(t, err)
	require.Contains(t, string(raw), "uid: prometheus")
}

// The overview has a row for each part of the system, and the webhook
// drill-down is driven by a webhook_id variable drawn from a metric that
// carries that label, used by every panel of its first row.
func TestDashboardRows(t *testing.T) {
	t.Parallel()
	overview := readDashboard(t, filepath.Join(root, "deploy/grafana/dashboards/hookline-overview.json"))
	var rows []string
	for _, p := range overview.Panels {
		if p.Type == "row" {
			rows = append(rows, p.Title)
		}
	}
	require.Equal(t, []string{"Health at a glance", "Publishing", "Deliveries", "Queues and workers",
		"Circuit breakers", "Dead-letter queue", "Owner notifications", "Retention", "Outbox"}, rows)

	hook := readDashboard(t, filepath.Join(root, "deploy/grafana/dashboards/hookline-webhook.json"))
	require.Len(t, hook.Templating.List, 1)
	v := hook.Templating.List[0]
	require.Equal(t, "webhook_id", v.Name)
	require.Equal(t, "label_values(hookline_circuit_breaker_state, webhook_id)", v.Definition)
	first := true
	for _, p := range hook.Panels[1:] {
		if p.Type == "row" {
			break
		}
		for _, tg := range p.Targets {
			require.Contains(t, tg.Expr, `webhook_id="$webhook_id"`, "panel %q", p.Title)
		}
		first = false
	}
	require.False(t, first, "the first row has panels")
}
