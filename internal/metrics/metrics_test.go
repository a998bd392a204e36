package metrics

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/unitlease/unitlease/policy"
)

// fakeSource is a daemon of n leases: lease-0001 held, the rest standby.
type fakeSource struct {
	leases   []LeaseView
	up       bool
	durable  atomic.Int32 // calls
	drained  bool
	isDurabl bool
}

func (f *fakeSource) Leases() []LeaseView { return f.leases }
func (f *fakeSource) Drained() bool       { return f.drained }
func (f *fakeSource) RedisUp(context.Context) bool {
	return f.up
}
func (f *fakeSource) RedisDurable(context.Context) bool {
	f.durable.Add(1)
	return f.isDurabl
}

func leases(n int) []LeaseView {
	var ls []LeaseView
	for i := range n {
		name := fmt.Sprintf("lease-%04d", i+1)
		l := LeaseView{Lease: name, Units: []string{name + ".service"}, Competing: true, Age: 2 * time.Second}
		if i == 0 {
			l = LeaseView{Lease: name, Units: []string{name + ".service"}, Holding: true, Token: 42, Age: 1500 * time.Millisecond, DeadlineLeft: 23500 * time.Millisecond}
		}
		ls = append(ls, l)
	}
	return ls
}

func newTest(t testing.TB, src *fakeSource) *Metrics {
	t.Helper()
	return New(src, Options{Version: "1.2.3", LeaseSpan: 39246 * time.Millisecond, CrashBound: 69246 * time.Millisecond})
}

// TestScrapeShowsEachLeasesRoleTokenAgeAndDeadline: the gauges read at
// a scrape: each lease's role, token and deadline only on the holder,
// the flags only while they are up.
func TestScrapeShowsEachLeasesRoleTokenAgeAndDeadline(t *testing.T) {
	src := &fakeSource{leases: leases(3), up: true}
	src.leases[2].Competing, src.leases[2].StopFailed = false, true // lost, and its stop failed
	src.leases[1].Disabled = true                                   // and yet competing, as the source says
	m := newTest(t, src)
	want := `
# HELP unitlease_lease_role This node's role for the lease, always 1: leader (holds it), standby (may take it), none (drained, excluded, ineligible, disabled, or its stop failed after a loss). One series per lease, whose role label changes with the role.
# TYPE unitlease_lease_role gauge
unitlease_lease_role{lease="lease-0001",role="leader"} 1
unitlease_lease_role{lease="lease-0002",role="standby"} 1
unitlease_lease_role{lease="lease-0003",role="none"} 1
# HELP unitlease_lease_token The fencing token of the tenure this node holds (UNITLEASE_TOKEN); only while it holds the lease.
# TYPE unitlease_lease_token gauge
unitlease_lease_token{lease="lease-0001"} 42
# HELP unitlease_lease_deadline_seconds Holder: time left before it must stop the units without a renewal; only while it holds the lease.
# TYPE unitlease_lease_deadline_seconds gauge
unitlease_lease_deadline_seconds{lease="lease-0001"} 23.5
# HELP unitlease_lease_age_seconds Holder: time since its last successful renewal was sent. Others: how long the lease's record has been unchanged.
# TYPE unitlease_lease_age_seconds gauge
unitlease_lease_age_seconds{lease="lease-0001"} 1.5
unitlease_lease_age_seconds{lease="lease-0002"} 2
unitlease_lease_age_seconds{lease="lease-0003"} 2
# HELP unitlease_lease_disabled 1, only while an operator disabled the lease cluster-wide (unitlease disable).
# TYPE unitlease_lease_disabled gauge
unitlease_lease_disabled{lease="lease-0002"} 1
# HELP unitlease_lease_stop_failed 1, only while this node could not stop the lease's units even with SIGKILL.
# TYPE unitlease_lease_stop_failed gauge
unitlease_lease_stop_failed{lease="lease-0003"} 1
# HELP unitlease_unit_info The units of each lease managed here; always 1.
# TYPE unitlease_unit_info gauge
unitlease_unit_info{lease="lease-0001",unit="lease-0001.service"} 1
unitlease_unit_info{lease="lease-0002",unit="lease-0002.service"} 1
unitlease_unit_info{lease="lease-0003",unit="lease-0003.service"} 1
`
	if err := testutil.GatherAndCompare(gatherer(t, m), strings.NewReader(want),
		nameRole, nameToken, nameDeadline, nameAge, nameDisabled, nameStopFailed, nameUnit); err != nil {
		t.Error(err)
	}
}

// TestJournalEventsCountByLease: each journal event that a counter
// stands for moves that counter of that lease, and only that one.
func TestJournalEventsCountByLease(t *testing.T) {
	m := newTest(t, &fakeSource{})
	a, b := m.Lease("a"), m.Lease("b")
	a.Journaled(policy.JournalAcquired, policy.CauseNone)
	a.Journaled(policy.JournalAcquired, policy.CauseNone)
	a.Journaled(policy.JournalReleased, policy.CauseHandoff)
	a.Journaled(policy.JournalReleased, policy.CauseUnitFailed) // not a handoff
	a.Journaled(policy.JournalKilled, policy.CauseHandoff)
	b.Journaled(policy.JournalStopFailed, policy.CauseLost)
	b.Journaled(policy.JournalLost, policy.CauseLost)
	b.Journaled(policy.JournalLost, policy.CauseMissing)
	b.Journaled(policy.JournalRenewFailed, policy.CauseRenewFailed)
	b.Journaled(policy.JournalUnitFailed, policy.CauseNone)
	b.Journaled(policy.JournalStarted, policy.CauseNone) // no counter
	b.Garbage()
	for _, c := range []struct {
		what string
		got  float64
		want float64
	}{
		{"acquisitions of a", float64(a.acquired.Load()), 2},
		{"acquisitions of b", float64(b.acquired.Load()), 0},
		{"handoffs of a", float64(a.handedOff.Load()), 1},
		{"handoffs of b", float64(b.handedOff.Load()), 0},
		{"losses of b (lost, missing, renew_failed)", float64(b.lost.Load()), 3},
		{"losses of a", float64(a.lost.Load()), 0},
		{"kills", value(t, m, nameKills), 1},
		{"stop failures", value(t, m, nameStopFailures), 1},
		{"unit failures", value(t, m, nameUnitFailures), 1},
		{"garbage", value(t, m, nameGarbage), 1},
		{"renewal failures", value(t, m, nameRenewFailures), 0},
		{"server changes", value(t, m, nameServerChanges), 0},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.what, c.got, c.want)
		}
	}
}

// TestAnswersFillTheHistogramsAndCountServerChanges: a renewal answered
// goes into the histogram with the time it took; one not answered is a
// failure; a change of the answering server is counted once per change.
func TestAnswersFillTheHistogramsAndCountServerChanges(t *testing.T) {
	m := newTest(t, &fakeSource{})
	l := m.Lease("a")
	rec := func(server string) policy.Record { return policy.Record{Present: true, Server: server} }
	// Durations whose sum is exact in binary: 2⁻⁸ s, 2⁻⁵ s, 2⁻⁹ s.
	l.Answered(policy.Renew, policy.Event{Kind: policy.RenewOK, Record: rec("s1")}, time.Second/256)
	l.Answered(policy.Renew, policy.Event{Kind: policy.RenewOK, Record: rec("s1")}, time.Second/32)
	l.Answered(policy.Renew, policy.Event{Kind: policy.RenewFailed}, 2*time.Second)
	l.Answered(policy.Renew, policy.Event{Kind: policy.RenewLost}, time.Second/512) // answered: lost is no failure to reach Redis
	l.Answered(policy.Acquire, policy.Event{Kind: policy.AcquireOK, Record: rec("s2")}, time.Millisecond)
	l.Answered(policy.Acquire, policy.Event{Kind: policy.AcquireUnknown}, 2*time.Second)
	l.Answered(policy.Observe, policy.Event{Kind: policy.Observed, Record: rec("s2")}, time.Millisecond)
	l.Answered(policy.Observe, policy.Event{Kind: policy.Observed, Record: rec("s1")}, time.Millisecond)
	l.Answered(policy.Observe, policy.Event{Kind: policy.ObserveFailed}, time.Millisecond)
	want := `
# HELP unitlease_renewal_duration_seconds Time from sending a renewal to its answer, for the renewals Redis answered.
# TYPE unitlease_renewal_duration_seconds histogram
unitlease_renewal_duration_seconds_bucket{le="0.0005"} 0
unitlease_renewal_duration_seconds_bucket{le="0.001"} 0
unitlease_renewal_duration_seconds_bucket{le="0.0025"} 1
unitlease_renewal_duration_seconds_bucket{le="0.005"} 2
unitlease_renewal_duration_seconds_bucket{le="0.01"} 2
unitlease_renewal_duration_seconds_bucket{le="0.025"} 2
unitlease_renewal_duration_seconds_bucket{le="0.05"} 3
unitlease_renewal_duration_seconds_bucket{le="0.1"} 3
unitlease_renewal_duration_seconds_bucket{le="0.25"} 3
unitlease_renewal_duration_seconds_bucket{le="0.5"} 3
unitlease_renewal_duration_seconds_bucket{le="1"} 3
unitlease_renewal_duration_seconds_bucket{le="2.5"} 3
unitlease_renewal_duration_seconds_bucket{le="+Inf"} 3
unitlease_renewal_duration_seconds_sum 0.037109375
unitlease_renewal_duration_seconds_count 3
# HELP unitlease_renewal_failures_total Renewals that got no answer within reply_max, or an error.
# TYPE unitlease_renewal_failures_total counter
unitlease_renewal_failures_total 1
# HELP unitlease_redis_server_changes_total Answers from another Redis server than the one before (a restart, a restore, a failover).
# TYPE unitlease_redis_server_changes_total counter
unitlease_redis_server_changes_total 2
`
	if err := testutil.GatherAndCompare(gatherer(t, m), strings.NewReader(want), nameRenewSeconds, nameRenewFailures, nameServerChanges); err != nil {
		t.Error(err)
	}
	if got, err := testutil.GatherAndCount(gatherer(t, m), nameAcquireSecs); err != nil || got != 1 {
		t.Errorf("acquisition histogram: %d series (%v)", got, err)
	}
	if n := histCount(t, m, nameAcquireSecs); n != 1 {
		t.Errorf("acquisitions observed = %d, want 1 (the unknown one got no answer)", n)
	}
	if h := familyOf(t, m, nameAcquireSecs).GetMetric()[0].GetHistogram(); h.GetSampleSum() != 0.001 || h.GetBucket()[1].GetCumulativeCount() != 1 || h.GetBucket()[0].GetCumulativeCount() != 0 {
		t.Errorf("acquisition histogram: %v, want 1 ms in le=0.001", h)
	}
}

func histCount(t *testing.T, m *Metrics, name string) uint64 {
	t.Helper()
	return familyOf(t, m, name).GetMetric()[0].GetHistogram().GetSampleCount()
}

// exposition is what m writes, which must parse.
func exposition(t testing.TB, m *Metrics) string {
	t.Helper()
	var b strings.Builder
	n, err := m.WriteTo(&b)
	if err != nil {
		t.Fatal(err)
	}
	if n != int64(b.Len()) {
		t.Errorf("WriteTo returned %d, wrote %d bytes", n, b.Len())
	}
	return b.String()
}

// parse reads an exposition with the client library's parser, its
// families sorted by name, as a registry gathers them.
func parse(t testing.TB, text string) []*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	byName, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatalf("the exposition does not parse: %v\n%s", err, text)
	}
	var mfs []*dto.MetricFamily
	for _, mf := range byName {
		mfs = append(mfs, mf)
	}
	slices.SortFunc(mfs, func(a, b *dto.MetricFamily) int { return strings.Compare(a.GetName(), b.GetName()) })
	return mfs
}

// encode writes families with the client library's encoder.
func encode(t testing.TB, mfs []*dto.MetricFamily) string {
	t.Helper()
	var b bytes.Buffer
	for _, mf := range mfs {
		if _, err := expfmt.MetricFamilyToText(&b, mf); err != nil {
			t.Fatal(err)
		}
	}
	return b.String()
}

// gatherer gathers m's exposition, parsed, for the client library's
// test helpers.
func gatherer(t testing.TB, m *Metrics) prometheus.Gatherer {
	return prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) { return parse(t, exposition(t, m)), nil })
}

// familyOf is one family of m's exposition.
func familyOf(t testing.TB, m *Metrics, name string) *dto.MetricFamily {
	t.Helper()
	for _, mf := range parse(t, exposition(t, m)) {
		if mf.GetName() == name {
			return mf
		}
	}
	t.Fatalf("%s not in the exposition", name)
	return nil
}

// value is the value of the one series of a counter or gauge family.
func value(t testing.TB, m *Metrics, name string) float64 {
	t.Helper()
	mf := familyOf(t, m, name)
	if len(mf.GetMetric()) != 1 {
		t.Fatalf("%s has %d series", name, len(mf.GetMetric()))
	}
	if mf.GetType() == dto.MetricType_COUNTER {
		return mf.GetMetric()[0].GetCounter().GetValue()
	}
	return mf.GetMetric()[0].GetGauge().GetValue()
}

// TestForgetRemovesTheLeasesSeries: a lease no longer managed leaves no
// counter behind; the others keep theirs.
func TestForgetRemovesTheLeasesSeries(t *testing.T) {
	src := &fakeSource{leases: []LeaseView{{Lease: "a", Competing: true}, {Lease: "b", Competing: true}}}
	m := newTest(t, src)
	m.Lease("a").Journaled(policy.JournalAcquired, policy.CauseNone)
	m.Lease("b")
	if out := scrape(t, m); !strings.Contains(out, `unitlease_acquisitions_total{lease="a"} 1`) {
		t.Fatalf("lease a's acquisition is not counted:\n%s", grep(out, "acquisitions"))
	}
	// The daemon ends the supervisor and forgets its meter at once.
	src.leases = src.leases[1:]
	m.Forget("a")
	out := scrape(t, m)
	if strings.Contains(out, `lease="a"`) {
		t.Errorf("lease a's series are still there:\n%s", grep(out, `lease="a"`))
	}
	if !strings.Contains(out, `unitlease_acquisitions_total{lease="b"} 0`) {
		t.Errorf("lease b's counters are gone:\n%s", grep(out, "acquisitions"))
	}
}

// TestDurabilityIsReadOnceAMinute: scrapes within DurableEvery reuse the
// reading (it costs Redis two requests); the next one after reads again.
func TestDurabilityIsReadOnceAMinute(t *testing.T) {
	src := &fakeSource{isDurabl: true, up: true}
	now := time.Unix(1000, 0)
	m := New(src, Options{Now: func() time.Time { return now }})
	for range 3 {
		scrape(t, m)
	}
	if got := src.durable.Load(); got != 1 {
		t.Fatalf("durability read %d times in three scrapes within a minute, want 1", got)
	}
	now = now.Add(time.Minute)
	src.isDurabl = false
	out := scrape(t, m)
	if got := src.durable.Load(); got != 2 {
		t.Fatalf("durability read %d times, want 2 once a minute passed", got)
	}
	if !strings.Contains(out, "unitlease_redis_durable 0\n") || !strings.Contains(out, "unitlease_redis_up 1\n") {
		t.Errorf("redis gauges:\n%s", grep(out, "unitlease_redis_"))
	}
}

// TestEveryNameIsExportedAndLintClean: with a held lease and each event
// once, every name in Names appears in a scrape, nothing else of this
// package does, and promlint (promtool check metrics) finds no problem.
func TestEveryNameIsExportedAndLintClean(t *testing.T) {
	src := &fakeSource{leases: leases(3), up: true}
	src.leases[1].Disabled, src.leases[2].StopFailed = true, true
	m := newTest(t, src)
	l := m.Lease("lease-0001")
	l.Answered(policy.Renew, policy.Event{Kind: policy.RenewOK}, time.Millisecond)
	l.Answered(policy.Acquire, policy.Event{Kind: policy.AcquireOK}, time.Millisecond)
	mfs := parse(t, exposition(t, m))
	var got []string
	for _, mf := range mfs {
		if strings.HasPrefix(mf.GetName(), nsPrefix) {
			got = append(got, mf.GetName())
		}
	}
	want := slices.Clone(Names)
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("exported %v\nwant     %v", got, want)
	}
	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
}

// TestHandlerServesTheTextFormat: /metrics answers in the text format,
// / points there, anything else is 404.
func TestHandlerServesTheTextFormat(t *testing.T) {
	m := newTest(t, &fakeSource{leases: leases(1), up: true})
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	for path, want := range map[string]int{"/metrics": 200, "/": 200, "/other": 404} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s: %d, want %d", path, resp.StatusCode, want)
		}
	}
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct, want := resp.Header.Get("Content-Type"), string(expfmt.NewFormat(expfmt.TypeTextPlain)); ct != want {
		t.Errorf("Content-Type %q, the library's %q", ct, want)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("the scrape does not parse: %v", err)
	}
	if _, ok := mfs[nameRole]; !ok {
		t.Errorf("no %s in the scrape", nameRole)
	}
}

// scrape is m's exposition, read back and written again by the client
// library.
func scrape(t testing.TB, m *Metrics) string {
	t.Helper()
	return encode(t, parse(t, exposition(t, m)))
}

func grep(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// discard is a ResponseWriter that keeps only the count of bytes.
type discard struct {
	h http.Header
	n int
}

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(p []byte) (int, error) { d.n += len(p); return len(p), nil }
func (d *discard) WriteHeader(int)             {}

// BenchmarkScrape is the daemon's side of one scrape of 1,000 (5,000)
// leases, each with its meter: gathered and written in the text format
// by the endpoint's handler, as a Prometheus asks for it.
func BenchmarkScrape(b *testing.B) {
	for _, n := range []int{1000, 5000} {
		b.Run(fmt.Sprintf("leases=%d", n), func(b *testing.B) {
			src := &fakeSource{leases: leases(n), up: true}
			m := newTest(b, src)
			for _, l := range src.leases {
				m.Lease(l.Lease)
			}
			h := m.Handler()
			req := httptest.NewRequest(http.MethodGet, Path, nil)
			req.Header.Set("Accept", "text/plain;version=0.0.4;q=0.9,*/*;q=0.1")
			req.Header.Set("Accept-Encoding", "gzip")
			b.ReportAllocs()
			var size int
			for b.Loop() {
				w := &discard{h: http.Header{}}
				h.ServeHTTP(w, req)
				size = w.n
			}
			b.ReportMetric(float64(size), "bytes/scrape")
		})
	}
}

// TestHandlerWritesWhatTheLibraryWould: the scrape the handler writes
// is, byte for byte, what the client library's encoder writes of it once
// its parser read it back: sorted, each family once, escaped, floats as
// the library formats them; with names that need escaping, a stop
// failed, a lease disabled and one with two units, the histograms
// observed and the node's counters moved.
func TestHandlerWritesWhatTheLibraryWould(t *testing.T) {
	src := &fakeSource{leases: leases(4), up: true}
	src.leases[1].Lease = `odd\lease "x"`
	src.leases[1].Units = []string{`a\x2db.service`, "second\nline.service"}
	src.leases[2].StopFailed, src.leases[3].Disabled = true, true
	src.leases[0].Token, src.leases[0].Age = 1<<53+1, 1234567*time.Microsecond
	m := newTest(t, src)
	m.Lease("lease-0001").Journaled(policy.JournalAcquired, policy.CauseNone)
	m.Lease("lease-0001").Journaled(policy.JournalKilled, policy.CauseHandoff)
	m.Lease("lease-0001").Answered(policy.Renew, policy.Event{Kind: policy.RenewOK}, 3*time.Millisecond)
	m.Lease("lease-0001").Answered(policy.Acquire, policy.Event{Kind: policy.AcquireOK}, 7*time.Second)
	m.Lease(src.leases[1].Lease)
	w := httptest.NewRecorder()
	m.Handler().ServeHTTP(w, httptest.NewRequest(http.MethodGet, Path, nil))
	if w.Code != 200 {
		t.Fatalf("status %d", w.Code)
	}
	if ct := w.Header().Get("Content-Type"); ct != string(expfmt.NewFormat(expfmt.TypeTextPlain)) {
		t.Errorf("Content-Type %q", ct)
	}
	got := w.Body.String()
	if want := encode(t, parse(t, got)); got != want {
		t.Errorf("the handler wrote\n%s\nthe library would write\n%s", got, want)
	}
	for _, s := range []string{
		`unitlease_unit_info{lease="odd\\lease \"x\"",unit="a\\x2db.service"} 1`,
		`unitlease_unit_info{lease="odd\\lease \"x\"",unit="second\nline.service"} 1`,
		`unitlease_lease_token{lease="lease-0001"} 9.007199254740992e+15`,
		`unitlease_lease_age_seconds{lease="lease-0001"} 1.234567`,
		`unitlease_lease_stop_failed{lease="lease-0003"} 1`,
		`unitlease_lease_disabled{lease="lease-0004"} 1`,
		`unitlease_acquisitions_total{lease="lease-0001"} 1`,
		"unitlease_leases 4",
		"unitlease_kills_total 1",
		`unitlease_renewal_duration_seconds_bucket{le="0.0025"} 0`,
		`unitlease_renewal_duration_seconds_bucket{le="0.005"} 1`,
		"unitlease_renewal_duration_seconds_sum 0.003",
		`unitlease_acquisition_duration_seconds_bucket{le="2.5"} 0`,
		`unitlease_acquisition_duration_seconds_bucket{le="+Inf"} 1`,
		"unitlease_acquisition_duration_seconds_count 1",
		`unitlease_build_info{goversion="` + runtime.Version() + `",version="1.2.3"} 1`,
		`go_info{version="` + runtime.Version() + `"} 1`,
	} {
		if !strings.Contains(got, s+"\n") {
			t.Errorf("no line %s", s)
		}
	}
}

// TestHandlerRefusesAThirdScrape: two scrapes at once are served, a
// third gets 503 until one ends.
func TestHandlerRefusesAThirdScrape(t *testing.T) {
	block := make(chan struct{})
	src := &blockingSource{fakeSource: fakeSource{leases: leases(1), up: true}, block: block, entered: make(chan struct{}, 2)}
	m := New(src, Options{Version: "1", LeaseSpan: time.Second, CrashBound: time.Second})
	h := m.Handler()
	done := make(chan int, 2)
	for range 2 {
		go func() {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, Path, nil))
			done <- w.Code
		}()
	}
	<-src.entered
	<-src.entered
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, Path, nil))
	if w.Code != http.StatusServiceUnavailable {
		t.Errorf("third scrape: %d, want 503", w.Code)
	}
	close(block)
	for range 2 {
		if c := <-done; c != 200 {
			t.Errorf("a scrape in flight: %d", c)
		}
	}
	w = httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, Path, nil))
	if w.Code != 200 {
		t.Errorf("a scrape after: %d", w.Code)
	}
}

// blockingSource holds each RedisUp until block closes.
type blockingSource struct {
	fakeSource
	block   chan struct{}
	entered chan struct{}
}

func (b *blockingSource) RedisUp(context.Context) bool {
	select {
	case b.entered <- struct{}{}:
	default:
	}
	<-b.block
	return true
}
