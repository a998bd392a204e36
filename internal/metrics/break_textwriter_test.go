package metrics

import (
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/unitlease/unitlease/policy"
)

// copySource returns a fresh copy of its leases at each call, as the
// daemon's source does, so concurrent scrapes do not share a slice.
type copySource struct{ fakeSource }

func (c *copySource) Leases() []LeaseView { return slices.Clone(c.fakeSource.leases) }

// refCollector emits the leases' series as const metrics, the way the
// client library would: an independent reference for the text writer.
type refCollector struct {
	views  []LeaseView
	meters map[string]*Lease
}

func (refCollector) Describe(chan<- *prometheus.Desc) {}

func (r refCollector) Collect(ch chan<- prometheus.Metric) {
	help := map[string]leaseFamily{}
	for _, f := range leaseFamilies {
		help[f.name] = f
	}
	d := func(name string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help[name].help, labels, nil)
	}
	g := func(name string, v float64, kv ...string) {
		var ln, lv []string
		for i := 0; i < len(kv); i += 2 {
			ln, lv = append(ln, kv[i]), append(lv, kv[i+1])
		}
		typ := prometheus.GaugeValue
		if help[name].typ == "counter" {
			typ = prometheus.CounterValue
		}
		ch <- prometheus.MustNewConstMetric(d(name, ln...), typ, v, lv...)
	}
	for _, l := range r.views {
		role := "none"
		switch {
		case l.Holding:
			role = "leader"
		case l.Competing:
			role = "standby"
		}
		g(nameRole, 1, "lease", l.Lease, "role", role)
		if l.Holding {
			g(nameToken, float64(l.Token), "lease", l.Lease)
			g(nameDeadline, l.DeadlineLeft.Seconds(), "lease", l.Lease)
		}
		g(nameAge, l.Age.Seconds(), "lease", l.Lease)
		if l.StopFailed {
			g(nameStopFailed, 1, "lease", l.Lease)
		}
		if l.Disabled {
			g(nameDisabled, 1, "lease", l.Lease)
		}
		for _, u := range l.Units {
			g(nameUnit, 1, "lease", l.Lease, "unit", u)
		}
		if mt := r.meters[l.Lease]; mt != nil {
			g(nameAcquisitions, float64(mt.acquired.Load()), "lease", l.Lease)
			g(nameLosses, float64(mt.lost.Load()), "lease", l.Lease)
			g(nameHandoffs, float64(mt.handedOff.Load()), "lease", l.Lease)
		}
	}
	ch <- prometheus.MustNewConstMetric(prometheus.NewDesc(nameLeases, helpLeases, nil, nil), prometheus.GaugeValue, float64(len(r.views)))
}

func stripRuntime(s string) string {
	var keep []string
	for _, l := range strings.Split(s, "\n") {
		if !strings.Contains(l, "go_") && !strings.Contains(l, "process_") {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}

func manyLeases(n int) []LeaseView {
	ls := leases(n)
	for i := range ls {
		l := &ls[i]
		switch i % 7 {
		case 1:
			l.Lease = fmt.Sprintf(`odd\%04d:x@y.z-_`, i)
			l.Units = nil
		case 2:
			l.Units = []string{`a\x2db.service`, "b.service", "c\"d.service", "e\nf"}
			l.StopFailed = true
		case 3:
			l.Disabled, l.Competing = true, false
		case 4:
			l.Holding, l.Competing, l.Token = true, false, uint64(i)<<50+uint64(i)
			l.DeadlineLeft = time.Duration(i) * 1234567 * time.Nanosecond
			l.Age = -time.Duration(i) * time.Nanosecond
		case 5:
			l.Age = time.Duration(1<<62 + i)
		}
	}
	return ls
}

// refNode is the node's families as the client library makes them, fed
// the same counts and observations as the Metrics under test, with the
// help texts of nodeFamilies.
type refNode struct {
	reg                    *prometheus.Registry
	counters               map[string]prometheus.Counter
	renewSecs, acquireSecs prometheus.Histogram
}

func newRefNode(src *fakeSource, opt Options) *refNode {
	help := map[string]string{}
	for _, f := range nodeFamilies {
		help[f.name] = f.help
	}
	r := &refNode{reg: prometheus.NewPedanticRegistry(), counters: map[string]prometheus.Counter{}}
	for _, n := range []string{nameStopFailures, nameKills, nameUnitFailures, nameGarbage, nameRenewFailures, nameServerChanges} {
		r.counters[n] = prometheus.NewCounter(prometheus.CounterOpts{Name: n, Help: help[n]})
		r.reg.MustRegister(r.counters[n])
	}
	r.renewSecs = prometheus.NewHistogram(prometheus.HistogramOpts{Name: nameRenewSeconds, Help: help[nameRenewSeconds], Buckets: latencyBuckets})
	r.acquireSecs = prometheus.NewHistogram(prometheus.HistogramOpts{Name: nameAcquireSecs, Help: help[nameAcquireSecs], Buckets: latencyBuckets})
	r.reg.MustRegister(r.renewSecs, r.acquireSecs)
	gauge := func(name string, v float64, labels prometheus.Labels) {
		g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help[name], ConstLabels: labels})
		g.Set(v)
		r.reg.MustRegister(g)
	}
	gauge(nameRedisUp, float64(b2i(src.up)), nil)
	gauge(nameRedisDurable, float64(b2i(src.isDurabl)), nil)
	gauge(nameDrained, float64(b2i(src.drained)), nil)
	gauge(nameLeaseSpan, opt.LeaseSpan.Seconds(), nil)
	gauge(nameCrashBound, opt.CrashBound.Seconds(), nil)
	gauge(nameBuild, 1, prometheus.Labels{"version": opt.Version, "goversion": runtime.Version()})
	return r
}

// latencies are observations at, around and beyond the buckets' bounds.
func latencies() []float64 {
	var vs []float64
	for _, b := range latencyBuckets {
		vs = append(vs, b, math.Nextafter(b, 0), math.Nextafter(b, 10))
	}
	return append(vs, 0, 1e-9, 2.5000001, 7, 1e6, 1/3.0)
}

// TestBreakTextWriterMatchesIndependentReference: WriteTo writes, byte
// for byte (the runtime's and the process's lines aside), what the
// library encodes of const metrics built independently of textWriter for
// the leases, and of the library's own counters and histograms, fed the
// same, for the node, at 0, 1, 3 and 900 leases (past several flushes);
// the whole is what the library writes again of it once parsed; and it
// parses, each family once, in sorted order, lint clean.
func TestBreakTextWriterMatchesIndependentReference(t *testing.T) {
	for _, n := range []int{0, 1, 3, 900} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			src := &copySource{fakeSource{leases: manyLeases(n), up: true, isDurabl: n%2 == 1, drained: n == 3}}
			opt := Options{Version: `v"1\2` + "\n", LeaseSpan: 39246 * time.Millisecond, CrashBound: 69246 * time.Millisecond}
			m := New(src, opt)
			ref := newRefNode(&src.fakeSource, opt)
			for i, c := range []struct {
				m   *counter
				ref string
			}{{&m.stopFailures, nameStopFailures}, {&m.kills, nameKills}, {&m.unitFailures, nameUnitFailures}, {&m.garbage, nameGarbage}, {&m.renewFailures, nameRenewFailures}, {&m.serverChanges, nameServerChanges}} {
				for range (i + n) % 5 {
					c.m.Inc()
					ref.counters[c.ref].Inc()
				}
			}
			for i, v := range latencies() {
				if i%(n+1) == 0 || n == 900 {
					m.renewSeconds.Observe(v)
					ref.renewSecs.Observe(v)
				}
				if n > 0 && i%n == 0 {
					m.acquireSeconds.Observe(v)
					ref.acquireSecs.Observe(v)
				}
			}
			meters := map[string]*Lease{}
			for i, l := range src.leases {
				if i%3 == 0 {
					mt := m.Lease(l.Lease)
					for range i % 5 {
						mt.Journaled(policy.JournalAcquired, policy.CauseNone)
						mt.Journaled(policy.JournalLost, policy.CauseLost)
					}
					meters[l.Lease] = mt
				}
			}
			m.Lease("not-a-view") // a meter with no view: no series
			got := exposition(t, m)

			views := slices.Clone(src.leases)
			slices.SortFunc(views, func(a, b LeaseView) int { return strings.Compare(a.Lease, b.Lease) })
			ref.reg.MustRegister(refCollector{views: views, meters: meters})
			fams, err := ref.reg.Gather()
			if err != nil {
				t.Fatal(err)
			}
			want := encode(t, fams)
			if g, wnt := stripRuntime(got), stripRuntime(want); g != wnt {
				gl, wl := strings.Split(g, "\n"), strings.Split(wnt, "\n")
				for i := range min(len(gl), len(wl)) {
					if gl[i] != wl[i] {
						t.Fatalf("line %d: WriteTo %q, library %q (lines %d vs %d)", i, gl[i], wl[i], len(gl), len(wl))
					}
				}
				t.Fatalf("WriteTo %d lines, library %d", len(gl), len(wl))
			}
			mfs := parse(t, got)
			if again := encode(t, mfs); again != got {
				t.Errorf("the library writes the exposition otherwise:\n%s\nWriteTo:\n%s", again, got)
			}
			if n <= 3 { // the same families; promlint takes seconds over 900 leases' series
				problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
				if err != nil {
					t.Fatal(err)
				}
				for _, p := range problems {
					t.Errorf("promlint: %s: %s", p.Metric, p.Text)
				}
			}
			var names []string
			for _, l := range strings.Split(got, "\n") {
				if strings.HasPrefix(l, "# TYPE ") {
					names = append(names, strings.Fields(l)[2])
				}
			}
			if !slices.IsSorted(names) {
				t.Errorf("families not sorted: %v", names)
			}
			if c := slices.Compact(slices.Clone(names)); len(c) != len(names) {
				t.Errorf("a family written twice: %v", names)
			}
			if n == 0 {
				for _, f := range leaseFamilies {
					if strings.Contains(got, f.name) {
						t.Errorf("zero leases, yet %s is there", f.name)
					}
				}
				if !strings.Contains(got, "\nunitlease_leases 0\n") {
					t.Errorf("no unitlease_leases 0")
				}
			}
		})
	}
}

// failingWriter fails every write once failAt bytes were written, and
// counts the writes it got after the first failure.
type failingWriter struct {
	h                 http.Header
	n, failAt         int
	failed            bool
	writesAfterFailed int
	panicAt           bool
}

var errGone = errors.New("scraper gone")

func (f *failingWriter) Header() http.Header { return f.h }
func (f *failingWriter) WriteHeader(int)     {}
func (f *failingWriter) Write(p []byte) (int, error) {
	if f.failed {
		f.writesAfterFailed++
		return 0, errGone
	}
	if f.n+len(p) > f.failAt {
		if f.panicAt {
			panic(http.ErrAbortHandler)
		}
		f.failed = true
		k := f.failAt - f.n
		f.n = f.failAt
		return k, errGone
	}
	f.n += len(p)
	return len(p), nil
}

// TestBreakTextWriterWriteErrorsMidScrape: a ResponseWriter that fails
// (or panics, as net/http's abort does) at any point of a scrape: the
// handler returns, writes nothing more after the first error, and gives
// its slot back (more failing scrapes than slots, then one that works).
func TestBreakTextWriterWriteErrorsMidScrape(t *testing.T) {
	src := &copySource{fakeSource{leases: manyLeases(400), up: true}}
	m := newTest(t, &src.fakeSource)
	m.src = src
	h := m.Handler()
	full := httptest.NewRecorder()
	h.ServeHTTP(full, httptest.NewRequest(http.MethodGet, Path, nil))
	size := full.Body.Len()
	for _, at := range []int{0, 1, 100, 4096, flushAt - 1, flushAt, flushAt + 1, size / 2, size - 100, size - 1} {
		for _, pan := range []bool{false, true} {
			fw := &failingWriter{h: http.Header{}, failAt: at, panicAt: pan}
			func() {
				defer func() {
					if r := recover(); r != nil && r != http.ErrAbortHandler {
						t.Errorf("failAt %d: panic %v", at, r)
					}
				}()
				h.ServeHTTP(fw, httptest.NewRequest(http.MethodGet, Path, nil))
			}()
			if fw.writesAfterFailed > 0 {
				t.Errorf("failAt %d: %d writes after the first error", at, fw.writesAfterFailed)
			}
		}
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, Path, nil))
	if w.Code != 200 {
		t.Errorf("after failed scrapes: status %d (a slot leaked)", w.Code)
	}
}

// TestBreakTextWriterScrapesRaceLeaseAndForget: two scrapes at a time
// through the handler and Gather, while meters are made, counted and
// forgotten: nothing races, and every scrape parses.
func TestBreakTextWriterScrapesRaceLeaseAndForget(t *testing.T) {
	src := &copySource{fakeSource{leases: manyLeases(50), up: true}}
	m := newTest(t, &src.fakeSource)
	m.src = src
	h := m.Handler()
	stop := make(chan struct{})
	var churn sync.WaitGroup
	churn.Go(func() {
		for n := 0; ; n++ {
			select {
			case <-stop:
				return
			default:
			}
			name := src.fakeSource.leases[n%50].Lease
			l := m.Lease(name)
			l.Journaled(policy.JournalAcquired, policy.CauseNone)
			l.Journaled(policy.JournalReleased, policy.CauseHandoff)
			if n%3 == 0 {
				m.Forget(name)
			}
		}
	})
	var scrapes sync.WaitGroup
	for i := range 2 {
		scrapes.Go(func() {
			for range 30 {
				if i == 0 {
					w := httptest.NewRecorder()
					h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, Path, nil))
					if w.Code != 200 {
						t.Errorf("status %d", w.Code)
						return
					}
					p := expfmt.NewTextParser(model.UTF8Validation)
					if _, err := p.TextToMetricFamilies(w.Body); err != nil {
						t.Errorf("parse: %v", err)
						return
					}
				} else if _, err := m.WriteTo(io.Discard); err != nil {
					t.Errorf("WriteTo: %v", err)
					return
				}
			}
		})
	}
	scrapes.Wait()
	close(stop)
	churn.Wait()
}

// TestBreakTextWriterEscapesHelpAndLabels: a help text keeps its
// double quotes and escapes a backslash and a line feed; a label value
// escapes all three; the library's parser reads both back as they were.
func TestBreakTextWriterEscapesHelpAndLabels(t *testing.T) {
	var b strings.Builder
	w := &textWriter{w: &b}
	w.pending = family{"x_total", "a \"b\" c\\d\ne", "counter"}
	w.sample("x_total", "", "k", "\"q\"\\\n", "l", "", 1)
	w.pending = family{"y", "never written", "gauge"}
	w.pending = family{}
	if err := w.flush(); err != nil {
		t.Fatal(err)
	}
	want := "# HELP x_total a \"b\" c\\\\d\\ne\n# TYPE x_total counter\nx_total{k=\"\\\"q\\\"\\\\\\n\",l=\"\"} 1\n"
	if b.String() != want {
		t.Fatalf("wrote %q, want %q", b.String(), want)
	}
	mfs := parse(t, b.String())
	if h, v := mfs[0].GetHelp(), mfs[0].GetMetric()[0].GetLabel()[0].GetValue(); h != "a \"b\" c\\d\ne" || v != "\"q\"\\\n" {
		t.Errorf("read back help %q, label %q", h, v)
	}
	if again := encode(t, mfs); again != b.String() {
		t.Errorf("the library writes %q", again)
	}
}
