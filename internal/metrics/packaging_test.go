package metrics

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const (
	rulesFile     = "../../packaging/prometheus/unitlease.rules.yml"
	rulesTestFile = "../../packaging/prometheus/unitlease.rules.test.yml"
	dashboardFile = "../../packaging/grafana/unitlease.json"
)

// metricName finds the names of this package's metrics in an expression.
var metricName = regexp.MustCompile(`\bunitlease_[a-z_]+\b`)

// unknownNames returns the unitlease_ names expr uses that this package
// does not export (a histogram's series by their base name).
func unknownNames(expr string) []string {
	var bad []string
	for _, n := range metricName.FindAllString(expr, -1) {
		base := n
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if b, ok := strings.CutSuffix(n, suffix); ok && slices.Contains(Names, b) {
				base = b
			}
		}
		if !slices.Contains(Names, base) {
			bad = append(bad, n)
		}
	}
	return bad
}

// TestAlertRulesNameMetricsThatExist: every metric an alert rule reads
// is one this package exports, and every alert has a unit test in which
// it fires.
func TestAlertRulesNameMetricsThatExist(t *testing.T) {
	rules, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	tests, err := os.ReadFile(rulesTestFile)
	if err != nil {
		t.Fatal(err)
	}
	if bad := unknownNames(string(rules)); len(bad) > 0 {
		t.Errorf("%s names metrics that do not exist: %v", rulesFile, bad)
	}
	if bad := unknownNames(string(tests)); len(bad) > 0 {
		t.Errorf("%s names metrics that do not exist: %v", rulesTestFile, bad)
	}
	alerts := regexp.MustCompile(`(?m)^\s*- alert: (\w+)`).FindAllStringSubmatch(string(rules), -1)
	if len(alerts) < 6 {
		t.Fatalf("%d alerts in %s", len(alerts), rulesFile)
	}
	// A test block that expects the alert: its alertname, then exp_alerts
	// with an entry before the next alertname.
	for _, a := range alerts {
		fires := regexp.MustCompile(`alertname: ` + a[1] + `\s*\n\s*exp_alerts:\s*\n\s*- exp_labels:`)
		if !fires.Match(tests) {
			t.Errorf("alert %s has no test in which it fires", a[1])
		}
		quiet := regexp.MustCompile(`alertname: ` + a[1] + `\s*\n\s*exp_alerts: \[\]`)
		if !quiet.Match(tests) {
			t.Errorf("alert %s has no test in which it stays quiet", a[1])
		}
	}
}

// dashboard is the part of a Grafana dashboard the tests read.
type dashboard struct {
	Title      string  `json:"title"`
	UID        string  `json:"uid"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name       string `json:"name"`
			Definition string `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	Type    string `json:"type"`
	Title   string `json:"title"`
	Repeat  string `json:"repeat"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Datasource *struct {
		UID string `json:"uid"`
	} `json:"datasource"`
}

// TestDashboardQueriesNameMetricsThatExist: the dashboard is valid JSON,
// repeats a row per lease, and every query (and variable) names metrics
// this package exports; promtool, where installed, parses every query.
func TestDashboardQueriesNameMetricsThatExist(t *testing.T) {
	data, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	dec := json.NewDecoder(strings.NewReader(string(data)))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	if d.UID == "" || d.Title == "" {
		t.Errorf("dashboard without uid or title")
	}
	var exprs []string
	repeated := false
	for _, p := range d.Panels {
		if p.Type == "row" {
			repeated = repeated || p.Repeat == "lease"
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q does not use the datasource variable", p.Title)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			if tg.Expr == "" {
				t.Errorf("panel %q has an empty query", p.Title)
			}
			exprs = append(exprs, tg.Expr)
			if bad := unknownNames(tg.Expr); len(bad) > 0 {
				t.Errorf("panel %q: query %q names metrics that do not exist: %v", p.Title, tg.Expr, bad)
			}
		}
	}
	if !repeated {
		t.Error("no row repeats per lease")
	}
	for _, v := range d.Templating.List {
		if bad := unknownNames(v.Definition); len(bad) > 0 {
			t.Errorf("variable %s: %q names metrics that do not exist: %v", v.Name, v.Definition, bad)
		}
	}
	promtoolParses(t, exprs)
}

// promtoolParses has promtool check a rule file whose rules are the
// queries, with Grafana's variables filled in: each must parse as PromQL.
func promtoolParses(t *testing.T, exprs []string) {
	t.Helper()
	if _, err := exec.LookPath("promtool"); err != nil {
		t.Skip("promtool is not installed (Debian's prometheus package has it); CI installs it")
	}
	fill := strings.NewReplacer("$__rate_interval", "5m", "$lease", "db", "$instance", ".*")
	var b strings.Builder
	b.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	for i, e := range exprs {
		q, _ := json.Marshal(fill.Replace(e)) // a JSON string is a YAML string
		fmt.Fprintf(&b, "      - record: dashboard:query%d\n        expr: %s\n", i, q)
	}
	path := filepath.Join(t.TempDir(), "dashboard.rules.yml")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("promtool", "check", "rules", path).CombinedOutput(); err != nil {
		t.Errorf("promtool check rules on the dashboard's queries: %v\n%s", err, out)
	}
}

// TestManPageListsEveryMetric: unitlease(8) describes every name.
func TestManPageListsEveryMetric(t *testing.T) {
	man, err := os.ReadFile("../../packaging/man/unitlease.8.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range Names {
		if !strings.Contains(string(man), "**"+n+"**") {
			t.Errorf("unitlease(8) does not describe %s", n)
		}
	}
}
