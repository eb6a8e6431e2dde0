package server_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// The dashboard and the alerting rules racefree ships (deploy/).
const (
	grafanaDashboard = "../deploy/grafana/racefree.json"
	alertRules       = "../deploy/prometheus/alerts.yml"
	alertTests       = "../deploy/prometheus/alerts_test.yml"
)

// metricName matches racefree's metric names, and database/sql's pool
// statistics (go_sql_*), which the dashboard shows too.
var metricName = regexp.MustCompile(`\b(racefree|go_sql)_[a-z0-9_]*[a-z0-9]`)

// referencedMetrics returns the metric names path uses: in a Grafana
// dashboard the names in its queries (targets' expr, template variables'
// query); in rules, the names in their expr lines (one line each).
func referencedMetrics(t *testing.T, path string) []string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	text := string(raw)
	if strings.HasSuffix(path, ".json") {
		var exprs []string
		var walk func(v any)
		walk = func(v any) {
			switch v := v.(type) {
			case map[string]any:
				for k, x := range v {
					if s, ok := x.(string); ok && (k == "expr" || k == "definition" || k == "query") {
						exprs = append(exprs, s)
					}
					walk(x)
				}
			case []any:
				for _, x := range v {
					walk(x)
				}
			}
		}
		var doc any
		if err := json.Unmarshal(raw, &doc); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		walk(doc)
		text = strings.Join(exprs, "\n")
	} else {
		var exprs []string
		for _, line := range strings.Split(text, "\n") {
			if e, ok := strings.CutPrefix(strings.TrimSpace(line), "expr:"); ok {
				exprs = append(exprs, e)
			}
		}
		text = strings.Join(exprs, "\n")
	}
	seen := map[string]bool{}
	for _, n := range metricName.FindAllString(text, -1) {
		seen[n] = true
	}
	var out []string
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	if len(out) == 0 {
		t.Fatalf("%s names no racefree metric", path)
	}
	return out
}

// TestAlertingRules runs promtool on the alerting rules: `check rules`
// (syntax, PromQL) and `test rules` (their unit tests, which fire and
// hold back each alert). Without promtool on PATH it is skipped, except
// in CI (CI=true), where it fails: .ci/run installs it.
func TestAlertingRules(t *testing.T) {
	t.Parallel()
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("promtool is not on PATH, and CI=true: install it (Debian's package prometheus; .ci/run does)")
		}
		t.Skip("promtool is not on PATH (Debian's package prometheus): the alerting rules are not checked")
	}
	for _, args := range [][]string{{"check", "rules", alertRules}, {"test", "rules", alertTests}} {
		out, err := exec.Command(promtool, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// TestGrafanaDashboard: the dashboard is JSON Grafana imports, every
// panel queries through the data source variable and every query is
// scoped to the job variable.
func TestGrafanaDashboard(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(grafanaDashboard)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		UID    string `json:"uid"`
		Panels []struct {
			Title      string `json:"title"`
			Type       string `json:"type"`
			Datasource struct {
				UID string `json:"uid"`
			} `json:"datasource"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatal(err)
	}
	if d.UID == "" || len(d.Panels) == 0 {
		t.Fatalf("dashboard without uid or panels: %+v", d)
	}
	for _, p := range d.Panels {
		if p.Type == "row" {
			continue
		}
		if p.Datasource.UID != "${datasource}" || len(p.Targets) == 0 {
			t.Errorf("panel %q: data source %q, %d queries", p.Title, p.Datasource.UID, len(p.Targets))
		}
		for _, q := range p.Targets {
			if !strings.Contains(q.Expr, `job=~"$job"`) {
				t.Errorf("panel %q: query %s is not scoped to $job", p.Title, q.Expr)
			}
		}
	}
}
