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
)

// exported returns the name of every metric family registered by the
// metrics package (histograms also answer to _bucket, _sum and _count).
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

// Every hookline_* metric named by a dashboard or an alert rule is one that
// the processes export.
func TestDeployFilesNameOnlyExportedMetrics(t *testing.T) {
	t.Parallel()
	known := exported(t)
	require.True(t, known["hookline_deliveries_total"], "the registry holds the package's metrics")
	files, err := filepath.Glob("../../deploy/grafana/dashboards/*.json")
	require.NoError(t, err)
	rules, err := filepath.Glob("../../deploy/prometheus/rules/*.yml")
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
