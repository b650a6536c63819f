package metrics_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/hookline/hookline/internal/metrics/metricstest"
)

const installPromtool = "on Debian: apt-get install -y prometheus"

func alertRules(t *testing.T) []metricstest.Rule {
	t.Helper()
	files, err := metricstest.RuleFiles(root)
	require.NoError(t, err)
	var out []metricstest.Rule
	for _, f := range files {
		rules, err := metricstest.ReadRules(f)
		require.NoError(t, err)
		for _, r := range rules {
			if r.Alert != "" {
				out = append(out, r)
			}
		}
	}
	return out
}

// The alerts of docs/DESIGN.md §13 are all there, and each has a
// severity, a summary, a description and a runbook that points to a
// section of docs/OPERATIONS.md.
func TestAlertsHaveSummaryAndRunbook(t *testing.T) {
	t.Parallel()
	ops, err := os.ReadFile(filepath.Join(root, "docs/OPERATIONS.md"))
	require.NoError(t, err)
	anchors := headingAnchors(string(ops))
	names := map[string]bool{}
	for _, r := range alertRules(t) {
		require.False(t, names[r.Alert], "alert %s defined twice", r.Alert)
		names[r.Alert] = true
		require.Contains(t, []string{"warning", "critical"}, r.Labels["severity"], r.Alert)
		require.NotEmpty(t, r.Annotations["summary"], r.Alert)
		require.NotEmpty(t, r.Annotations["description"], r.Alert)
		link, ok := strings.CutPrefix(r.Annotations["runbook"], "docs/OPERATIONS.md#")
		require.True(t, ok, "%s: runbook %q points into docs/OPERATIONS.md", r.Alert, r.Annotations["runbook"])
		require.True(t, anchors[link], "%s: docs/OPERATIONS.md has a section #%s", r.Alert, link)
		require.Equal(t, strings.ToLower(r.Alert), link, "the section is named after the alert")
	}
	for _, want := range []string{
		"CircuitOpen", "CircuitOpenOverAnHour", "RedisFallbackActive", "DLQOver1000PerTenant",
		"DeliverySuccessRateLow", "WorkerUtilisationHigh", "QueueDepthHigh", "RedisDown", "PostgresDown",
		"RetentionNotSucceeding", "BatchOperationFailed", "DLQGrowingFast",
		"DeliveriesWaitingOnInternalFailure", "MessageHandlerPanicked", "DeliveriesLostInQueue",
	} {
		require.True(t, names[want], "alert %s is defined", want)
	}
}

// headingAnchors returns the GitHub anchors of a Markdown document's
// headings.
func headingAnchors(doc string) map[string]bool {
	out := map[string]bool{}
	drop := regexp.MustCompile(`[^a-z0-9 _-]`)
	for _, line := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.ToLower(strings.TrimSpace(strings.TrimLeft(line, "#")))
		out[strings.ReplaceAll(drop.ReplaceAllString(h, ""), " ", "-")] = true
	}
	return out
}

// promtool accepts the rules and the scrape configuration, and the rules
// pass their unit tests (deploy/prometheus/tests.yml).
func TestPromtool(t *testing.T) {
	t.Parallel()
	promtool := tool(t, "promtool", installPromtool)
	files, err := metricstest.RuleFiles(root)
	require.NoError(t, err)
	for _, args := range [][]string{
		append([]string{"check", "rules"}, files...),
		{"check", "config", filepath.Join(root, "deploy/prometheus/prometheus.yml")},
		{"test", "rules", filepath.Join(root, "deploy/prometheus/tests.yml")},
	} {
		out, err := exec.Command(promtool, args...).CombinedOutput()
		require.NoError(t, err, "promtool %s:\n%s", strings.Join(args, " "), out)
	}
}

// Every dashboard query is valid PromQL: promtool checks them as the
// expressions of recording rules, with Grafana's variables filled in.
func TestDashboardQueriesParse(t *testing.T) {
	t.Parallel()
	promtool := tool(t, "promtool", installPromtool)
	files, err := metricstest.Dashboards(root)
	require.NoError(t, err)
	vars := strings.NewReplacer("$__rate_interval", "1m", "$webhook_id", "w")
	type rule struct {
		Record string `yaml:"record"`
		Expr   string `yaml:"expr"`
	}
	var rules []rule
	for _, f := range files {
		qs, err := metricstest.DashboardQueries(f)
		require.NoError(t, err)
		for _, q := range qs {
			if strings.HasPrefix(q, "label_values(") {
				continue
			}
			require.NotContains(t, vars.Replace(q), "$", "%s: unknown variable in %s", f, q)
			rules = append(rules, rule{Record: fmt.Sprintf("dashboard_query_%d", len(rules)), Expr: vars.Replace(q)})
		}
	}
	require.NotEmpty(t, rules)
	raw, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboards", "rules": rules}}})
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "dashboards.yml")
	require.NoError(t, os.WriteFile(path, raw, 0o600))
	out, err := exec.Command(promtool, "check", "rules", path).CombinedOutput()
	require.NoError(t, err, "%s", out)
}
