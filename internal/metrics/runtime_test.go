package metrics

import (
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"
)

// runtimeFamilies is the go_ and process_ families of an exposition.
func runtimeFamilies(mfs []*dto.MetricFamily) map[string]*dto.MetricFamily {
	out := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		if strings.HasPrefix(mf.GetName(), "go_") || strings.HasPrefix(mf.GetName(), "process_") {
			out[mf.GetName()] = mf
		}
	}
	return out
}

// sampleValue is a family's first series' value (a summary's count).
func sampleValue(mf *dto.MetricFamily) float64 {
	m := mf.GetMetric()[0]
	switch mf.GetType() {
	case dto.MetricType_COUNTER:
		return m.GetCounter().GetValue()
	case dto.MetricType_SUMMARY:
		return float64(m.GetSummary().GetSampleCount())
	}
	return m.GetGauge().GetValue()
}

// TestRuntimeAndProcessSeriesAreTheLibrarys: each go_ and process_
// family served is one the client library's Go and process collectors
// serve, with the same help, type and labels, and a value that agrees
// with theirs, read just after; the subset the README lists, and all of
// it on Linux.
func TestRuntimeAndProcessSeriesAreTheLibrarys(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	runtime.GC()
	ours := runtimeFamilies(parse(t, exposition(t, newTest(t, &fakeSource{up: true}))))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	lib := runtimeFamilies(mfs)
	if runtime.GOOS == "linux" {
		var names []string
		for n := range ours {
			names = append(names, n)
		}
		slices.Sort(names)
		if want := readmeRuntimeNames(t); !slices.Equal(names, want) {
			t.Errorf("served %v\nthe README lists %v", names, want)
		}
	}
	for name, o := range ours {
		l, ok := lib[name]
		if !ok {
			t.Errorf("%s: the library serves no such family", name)
			continue
		}
		if o.GetHelp() != l.GetHelp() || o.GetType() != l.GetType() {
			t.Errorf("%s: help %q, type %v; the library's %q, %v", name, o.GetHelp(), o.GetType(), l.GetHelp(), l.GetType())
		}
		labels := func(mf *dto.MetricFamily) (ls []string) {
			for _, m := range mf.GetMetric() {
				for _, lp := range m.GetLabel() {
					ls = append(ls, lp.GetName()+"="+lp.GetValue())
				}
			}
			return ls
		}
		if len(o.GetMetric()) != len(l.GetMetric()) || !slices.Equal(labels(o), labels(l)) {
			t.Errorf("%s: series %v, the library's %v", name, labels(o), labels(l))
		}
		if name == "go_gc_duration_seconds" && len(o.GetMetric()[0].GetSummary().GetQuantile()) != len(l.GetMetric()[0].GetSummary().GetQuantile()) {
			t.Errorf("%s: quantiles %v, the library's %v", name, o.GetMetric()[0].GetSummary().GetQuantile(), l.GetMetric()[0].GetSummary().GetQuantile())
		}
		got, want := sampleValue(o), sampleValue(l)
		var ok2 bool
		switch name {
		case "go_info", "go_gc_gogc_percent", "go_gc_gomemlimit_bytes", "go_sched_gomaxprocs_threads",
			"process_max_fds", "process_virtual_memory_max_bytes":
			ok2 = got == want
		case "process_start_time_seconds", "process_cpu_seconds_total", "go_memstats_last_gc_time_seconds":
			ok2 = math.Abs(got-want) <= 1 && got > 0
		case "go_goroutines", "go_threads", "process_open_fds", "go_gc_duration_seconds":
			ok2 = math.Abs(got-want) <= 5 && got > 0
		default: // sizes, which move between two reads
			ok2 = got > 0 && got <= 2*want && want <= 2*got
		}
		if !ok2 {
			t.Errorf("%s = %v, the library read %v", name, got, want)
		}
	}
}

// readmeRuntimeNames are the go_ and process_ names the README's Metrics
// section lists as served (before it lists what is not).
func readmeRuntimeNames(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, sec, _ := strings.Cut(string(b), "\n## Metrics\n")
	sec, _, _ = strings.Cut(sec, "\n## ")
	served, notServed, ok := strings.Cut(sec, "Not served")
	if !ok {
		t.Fatal("the README's Metrics section does not say which of the client's series are not served")
	}
	re := regexp.MustCompile("`((?:go|process)_[a-z_]+)`")
	var out []string
	for _, n := range re.FindAllStringSubmatch(served, -1) {
		out = append(out, n[1])
	}
	for _, n := range re.FindAllStringSubmatch(notServed, -1) {
		if slices.Contains(out, n[1]) {
			t.Errorf("the README lists %s as served and as not", n[1])
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// TestProcessSeriesLeftOutWhenUnreadable: a stat file or fd directory
// that cannot be read leaves its series out of a scrape that is whole
// otherwise; a command name with spaces and parentheses does not shift
// the fields.
func TestProcessSeriesLeftOutWhenUnreadable(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the process's series are read from /proc")
	}
	statSeries := []string{"process_cpu_seconds_total", "process_resident_memory_bytes", "process_virtual_memory_bytes", "process_start_time_seconds"}
	for _, c := range []struct {
		what, stat string
		fd         bool
		missing    []string
	}{
		{"no stat, no fd", "", false, append(slices.Clone(statSeries), "process_open_fds")},
		{"a stat cut short", "1 (x) S 1 2 3 4 5 6 7 8 9 10 11 12", true, statSeries},
		{"a stat not numbers", "1 (x) S 1 2 3 4 5 6 7 8 9 10 11 a b 14 15 16 17 18 19 20 21 22 23", true, statSeries},
		{"a stat without parentheses", "1 x S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23", true, statSeries},
		{"a stat whose name has ) ( and spaces", "1 (a) b (c) S 1 2 3 4 5 6 7 8 9 10 250 150 14 15 16 17 18 19 200 4096 3 22 23", true, nil},
	} {
		t.Run(c.what, func(t *testing.T) {
			dir := t.TempDir()
			if c.stat != "" {
				if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(c.stat+"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if c.fd {
				for _, f := range []string{"fd/0", "fd/1", "fd/7"} {
					if err := os.MkdirAll(filepath.Join(dir, f), 0o755); err != nil {
						t.Fatal(err)
					}
				}
			}
			m := newTest(t, &fakeSource{leases: leases(2), up: true})
			m.proc = dir
			text := exposition(t, m)
			if again := encode(t, parse(t, text)); again != text {
				t.Errorf("the library writes the exposition otherwise:\n%s", again)
			}
			for _, n := range c.missing {
				if strings.Contains(text, "\n"+n) {
					t.Errorf("%s served from an unreadable %s:\n%s", n, dir, grep(text, n))
				}
			}
			for _, n := range []string{"process_max_fds", "process_virtual_memory_max_bytes", "go_goroutines", "unitlease_leases", nameRole} {
				if !strings.Contains(text, "\n"+n) {
					t.Errorf("%s left out too", n)
				}
			}
			if c.missing == nil {
				for series, want := range map[string]float64{
					"process_cpu_seconds_total":     4,
					"process_virtual_memory_bytes":  4096,
					"process_resident_memory_bytes": 3 * float64(os.Getpagesize()),
					"process_open_fds":              3,
				} {
					if got := value(t, m, series); got != want {
						t.Errorf("%s = %v, want %v", series, got, want)
					}
				}
				if st := value(t, m, "process_start_time_seconds"); st < 1e9 {
					t.Errorf("process_start_time_seconds = %v", st)
				}
			}
		})
	}
}

// TestBinaryLinksNoClientLibrary: the daemon's binary imports neither
// Prometheus's client library nor what it brings (its data model,
// protobuf, procfs); only the tests do.
func TestBinaryLinksNoClientLibrary(t *testing.T) {
	// The go command that runs the test puts its GOROOT in the
	// environment.
	goCmd := filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	if _, err := os.Stat(goCmd); os.Getenv("GOROOT") == "" || err != nil {
		if goCmd, err = exec.LookPath("go"); err != nil {
			t.Skip("no go command")
		}
	}
	cmd := exec.Command(goCmd, "list", "-deps", "./cmd/unitlease")
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	deps := strings.Fields(string(out))
	if !slices.Contains(deps, "github.com/unitlease/unitlease/internal/metrics") {
		t.Fatalf("go list -deps ./cmd/unitlease lists no internal/metrics:\n%s", out)
	}
	for _, d := range deps {
		for _, bad := range []string{"github.com/prometheus/", "google.golang.org/protobuf/", "expvar", "database/sql"} {
			if strings.HasPrefix(d, bad) {
				t.Errorf("the binary links %s", d)
			}
		}
	}
}

// TestStartTimeWithoutProcStat: where /proc/stat is hidden (the daemon's
// unit has ProcSubset=pid), the process's start is still served: when its
// Go code began to run. Where it can be read, the boot time in it and
// the stat's start are.
func TestStartTimeWithoutProcStat(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the process's series are read from /proc")
	}
	dir := t.TempDir()
	stat := "1 (x) S 1 2 3 4 5 6 7 8 9 10 250 150 14 15 16 17 18 19 200 4096 3 22 23"
	if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(stat+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "kstat"), []byte("cpu  1 2 3\nbtime 1700000000\nprocesses 9\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	defer func(p string) { procStat = p }(procStat)
	for _, c := range []struct {
		what, kstat string
		want        float64
	}{
		{"hidden", filepath.Join(dir, "none"), unixSeconds(started)},
		{"readable", filepath.Join(dir, "kstat"), 1700000000 + 200.0/userHZ},
	} {
		procStat = c.kstat
		m := newTest(t, &fakeSource{up: true})
		m.proc = dir
		for range 2 { // the second scrape serves what the first read
			if got := value(t, m, "process_start_time_seconds"); got != c.want {
				t.Errorf("%s: process_start_time_seconds = %v, want %v", c.what, got, c.want)
			}
		}
	}
}
