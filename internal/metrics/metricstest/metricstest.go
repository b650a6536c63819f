// Package metricstest reads which metrics the deployment files use (the
// Grafana dashboards and Prometheus rules under deploy/) and which ones a
// process exports, for tests that hold the two together.
package metricstest

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// Dashboards returns the Grafana dashboard files of the repository at root.
func Dashboards(root string) ([]string, error) {
	return filepath.Glob(filepath.Join(root, "deploy/grafana/dashboards/*.json"))
}

// RuleFiles returns the Prometheus rule files of the repository at root.
func RuleFiles(root string) ([]string, error) {
	return filepath.Glob(filepath.Join(root, "deploy/prometheus/rules/*.yml"))
}

// Rule is one alerting or recording rule.
type Rule struct {
	Alert       string            `yaml:"alert"`
	Record      string            `yaml:"record"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

// ReadRules returns the rules of one rule file, in order.
func ReadRules(path string) ([]Rule, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var f struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []Rule `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(raw, &f); err != nil {
		return nil, fmt.Errorf("parse %s: %w", path, err)
	}
	var rules []Rule
	for _, g := range f.Groups {
		rules = append(rules, g.Rules...)
	}
	return rules, nil
}

// DashboardQueries returns the PromQL of one dashboard: every panel
// target's expr and every templating query, wherever they are nested.
func DashboardQueries(path string) ([]string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var doc any
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("parse %s: %w", path, err)
	}
	var out []string
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if s, ok := x.(string); ok && (k == "expr" || k == "query" || k == "definition") && s != "" {
					out = append(out, s)
					continue
				}
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(doc)
	return out, nil
}

// Queries maps every PromQL expression of the dashboards and rule files
// of the repository at root to the file it is in.
func Queries(root string) (map[string]string, error) {
	dashboards, err := Dashboards(root)
	if err != nil {
		return nil, err
	}
	rules, err := RuleFiles(root)
	if err != nil {
		return nil, err
	}
	if len(dashboards) == 0 || len(rules) == 0 {
		return nil, fmt.Errorf("no dashboards or rule files under %s", root)
	}
	out := map[string]string{}
	for _, f := range dashboards {
		qs, err := DashboardQueries(f)
		if err != nil {
			return nil, err
		}
		for _, q := range qs {
			out[q] = f
		}
	}
	for _, f := range rules {
		rs, err := ReadRules(f)
		if err != nil {
			return nil, err
		}
		for _, r := range rs {
			out[r.Expr] = f
		}
	}
	return out, nil
}

// nameRE finds the metric names a query reads that a process exports:
// hookline's own and the Go client's process_ and go_ metrics. Recording
// rules (hookline:...) and Prometheus's up are not exported by a process.
var nameRE = regexp.MustCompile(`\b(?:hookline|process|go)_[a-zA-Z0-9_]*[a-zA-Z0-9]\b`)

// Names returns the exported metric names that expr reads, sorted.
func Names(expr string) []string {
	names := nameRE.FindAllString(expr, -1)
	slices.Sort(names)
	return slices.Compact(names)
}

// Referenced maps every exported metric name that the dashboards and rule
// files of the repository at root read to a file that reads it.
func Referenced(root string) (map[string]string, error) {
	qs, err := Queries(root)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for q, f := range qs {
		for _, n := range Names(q) {
			out[n] = f
		}
	}
	return out, nil
}

// Families returns the metric families of a Prometheus text exposition
// (its # TYPE lines). A family with no series is not exposed at all.
func Families(exposition string) map[string]bool {
	out := map[string]bool{}
	for _, line := range strings.Split(exposition, "\n") {
		if f := strings.Fields(line); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			out[f[2]] = true
		}
	}
	return out
}

// Has reports whether name is one of families, or the _bucket, _sum or
// _count series of one (histograms and summaries).
func Has(families map[string]bool, name string) bool {
	if families[name] {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok && families[base] {
			return true
		}
	}
	return false
}
