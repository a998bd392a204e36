package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/unitlease/unitlease/policy"
)

const ms = time.Millisecond

func TestParseLogSkipsMalformedLines(t *testing.T) {
	rs := ParseLog([]byte("start a 100\nnonsense\nstop a x\nstop a 200\n\nviolation b 300 extra\nviolation b 300\n"))
	want := []Record{{"start", "a", 100}, {"stop", "a", 200}, {"violation", "b", 300}}
	if len(rs) != len(want) {
		t.Fatalf("got %v, want %v", rs, want)
	}
	for i := range want {
		if rs[i] != want[i] {
			t.Errorf("record %d: %v, want %v", i, rs[i], want[i])
		}
	}
}

func TestCopies(t *testing.T) {
	for _, tc := range []struct {
		name string
		log  string
		cuts []Cut
		want []Copy
	}{
		{
			name: "stop, then the journal's exit",
			log:  "start a 100\nstop a 200\nexit a 210\n",
			want: []Copy{{Node: "a", Start: 100, FirstEnd: 200, LastEnd: 210}},
		},
		{
			name: "killed: only the journal's exit",
			log:  "start a 100\nexit a 300\n",
			want: []Copy{{Node: "a", Start: 100, FirstEnd: 300, LastEnd: 300}},
		},
		{
			name: "fail ends a copy like stop",
			log:  "start a 100\nfail a 150\n",
			want: []Copy{{Node: "a", Start: 100, FirstEnd: 150, LastEnd: 150}},
		},
		{
			name: "power cut ends the copy on its node only",
			log:  "start a 100\nstart b 500\n",
			cuts: []Cut{{"a", 400}, {"b", 450}},
			want: []Copy{{Node: "a", Start: 100, FirstEnd: 400, LastEnd: 400}, {Node: "b", Start: 500, FirstEnd: -1, LastEnd: -1}},
		},
		{
			name: "an exit with nothing running (a refused start) is ignored",
			log:  "exit b 50\nstart a 100\nexit b 120\n",
			want: []Copy{{Node: "a", Start: 100, FirstEnd: -1, LastEnd: -1}},
		},
		{
			name: "a start over a copy with no end marks it lost",
			log:  "start a 100\nstart a 300\n",
			want: []Copy{{Node: "a", Start: 100, FirstEnd: 300, LastEnd: 300, Lost: true}, {Node: "a", Start: 300, FirstEnd: -1, LastEnd: -1}},
		},
		{
			name: "records out of order in the file are sorted",
			log:  "stop a 200\nstart a 100\n",
			want: []Copy{{Node: "a", Start: 100, FirstEnd: 200, LastEnd: 200}},
		},
		{
			name: "an exit after the next start on the same node is the old copy's only if it is still open",
			log:  "start a 100\nstop a 200\nstart a 300\nexit a 400\n",
			want: []Copy{{Node: "a", Start: 100, FirstEnd: 200, LastEnd: 200}, {Node: "a", Start: 300, FirstEnd: 400, LastEnd: 400}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Copies(ParseLog([]byte(tc.log)), tc.cuts)
			if len(got) != len(tc.want) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("copy %d: %+v, want %+v", i, got[i], tc.want[i])
				}
			}
		})
	}
}

func TestOverlaps(t *testing.T) {
	for _, tc := range []struct {
		name string
		log  string
		cuts []Cut
		want int
	}{
		{"one after the other", "start a 100\nstop a 200\nstart b 300\n", nil, 0},
		{"touching is not overlapping", "start a 100\nstop a 200\nstart b 200\n", nil, 0},
		{"the second starts before the first stops", "start a 100\nstart b 150\nstop a 200\n", nil, 1},
		{"a start between the stop record and the exit overlaps", "start a 100\nstop a 200\nstart b 205\nexit a 210\n", nil, 1},
		{"two still running", "start a 100\nstart b 300\n", nil, 1},
		{"the cut ends the first in time", "start a 100\nstart b 300\n", []Cut{{"a", 250}}, 0},
		{"three at once", "start a 1\nstart b 2\nstart c 3\n", nil, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Overlaps(Copies(ParseLog([]byte(tc.log)), tc.cuts))
			if len(got) != tc.want {
				t.Errorf("%d overlaps %v, want %d", len(got), got, tc.want)
			}
		})
	}
}

func TestViolations(t *testing.T) {
	if n := Violations(ParseLog([]byte("start a 1\nviolation b 2\nstart b 2\nviolation c 3\n"))); n != 2 {
		t.Errorf("%d violations, want 2", n)
	}
}

func TestUncovered(t *testing.T) {
	copies := Copies(ParseLog([]byte("start a 100\nstop a 200\nstart b 300\nstop b 400\nstart c 350\n")), nil)
	for _, tc := range []struct {
		from, to, want time.Duration
	}{
		{0, 100, 100},
		{100, 200, 0},
		{150, 300, 100},
		{0, 1000, 200}, // before 100, and 200..300; c covers 350 onwards
		{300, 200, 0},
	} {
		if got := Uncovered(copies, tc.from, tc.to); got != tc.want {
			t.Errorf("Uncovered(%v, %v) = %v, want %v", tc.from, tc.to, got, tc.want)
		}
	}
}

func TestHandoverAfter(t *testing.T) {
	for _, tc := range []struct {
		name  string
		log   string
		cuts  []Cut
		fault time.Duration
		want  Handover
	}{
		{
			name: "power cut: the gap starts at the cut",
			log:  "start a 100\nstart b 3500\n", cuts: []Cut{{"a", 1000}}, fault: 1000,
			want: Handover{From: "a", To: "b", Start: 3500, Gap: 2500, Moved: true, Running: 1},
		},
		{
			name: "the old copy ran on after the fault: the gap starts at its stop",
			log:  "start a 100\nstop a 1800\nexit a 1810\nstart b 3000\n", fault: 1000,
			want: Handover{From: "a", To: "b", Start: 3000, Gap: 1200, Moved: true, Running: 1},
		},
		{
			name: "a short copy in between shortens the gap",
			log:  "start a 100\nstop a 1000\nstart b 1500\nstop b 1600\nstart c 2500\n", fault: 900,
			want: Handover{From: "a", To: "c", Start: 2500, Gap: 1400, Moved: true, Running: 1},
		},
		{
			name: "nothing moved",
			log:  "start a 100\n", fault: 900,
			want: Handover{From: "a", To: "a", Start: 100, Running: 1},
		},
		{
			name: "restarted on the same node",
			log:  "start a 100\nstop a 1000\nstart a 4000\n", fault: 900,
			want: Handover{From: "a", To: "a", Start: 4000, Gap: 3000, Moved: true, Running: 1},
		},
		{
			name: "two left running",
			log:  "start a 100\nstart b 2000\n", fault: 900,
			want: Handover{From: "a", To: "b", Start: 2000, Gap: 0, Moved: true, Running: 2},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := HandoverAfter(Copies(ParseLog([]byte(tc.log)), tc.cuts), tc.fault)
			if got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		in   []time.Duration
		want time.Duration
	}{
		{nil, 0},
		{[]time.Duration{5}, 5},
		{[]time.Duration{9, 1, 5}, 5},
		{[]time.Duration{4, 1, 3, 2}, 2},
	} {
		if got := Median(tc.in); got != tc.want {
			t.Errorf("Median(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestJudge(t *testing.T) {
	crash := Target{Ratio: 1.05, Under: 3 * time.Second}
	for _, tc := range []struct {
		name   string
		run    Run
		target Target
		pass   bool
	}{
		{"within the bound", Run{Gap: 2000 * ms, Bound: 2000 * ms, Copies: 1, LogCopies: 1}, crash, true},
		{"5% over is allowed", Run{Gap: 2100 * ms, Bound: 2000 * ms, Copies: 1, LogCopies: 1}, crash, true},
		{"more is not", Run{Gap: 2101 * ms, Bound: 2000 * ms, Copies: 1, LogCopies: 1}, crash, false},
		{"not under 3 s", Run{Gap: 3000 * ms, Bound: 3500 * ms, Copies: 1, LogCopies: 1}, crash, false},
		{"an overlap fails whatever the gap", Run{Overlaps: []string{"x"}, Copies: 1, LogCopies: 1}, crash, false},
		{"a violation fails", Run{Violations: 1, Copies: 1, LogCopies: 1}, crash, false},
		{"two copies at the end fail", Run{Copies: 2, LogCopies: 2}, crash, false},
		{"the log must agree with systemd", Run{Copies: 1, LogCopies: 2}, crash, false},
		{"none at the end fails", Run{Copies: 0, LogCopies: 0}, crash, false},
		{"handoff: stop + start + 50 ms", Run{Gap: 150 * ms, Bound: 100 * ms, Copies: 1, LogCopies: 1}, Target{Ratio: 1, Slack: 50 * ms}, true},
		{"handoff: one more", Run{Gap: 151 * ms, Bound: 100 * ms, Copies: 1, LogCopies: 1}, Target{Ratio: 1, Slack: 50 * ms}, false},
		{"no gap wanted", Run{Gap: ms, Copies: 1, LogCopies: 1}, Target{NoGap: true}, false},
		{"a problem fails", Run{Copies: 1, LogCopies: 1, Problems: []string{"refused event missing"}}, Target{NoGap: true}, false},
		{"an advisory figure fails nothing", Run{Gap: 3200 * ms, Bound: 3300 * ms, Copies: 1, LogCopies: 1}, Target{Ratio: 1.05, Under: 3 * time.Second, UnderAdvisory: true}, true},
		{"report only: any gap", Run{Gap: 9 * time.Second, Bound: 3 * time.Second, Copies: 1, LogCopies: 1}, Target{}, true},
		{"report only: still one copy at the end", Run{Copies: 2, LogCopies: 2}, Target{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.run
			r.Judge(tc.target)
			if r.Pass != tc.pass {
				t.Errorf("pass %t, want %t; problems %v", r.Pass, tc.pass, r.Problems)
			}
		})
	}
}

func TestAdvisoryFigureIsCounted(t *testing.T) {
	target := Target{Ratio: 1.05, Under: 3 * time.Second, UnderAdvisory: true}
	s := Scenario{Name: "power-cut", Target: target.String()}
	for _, gap := range []time.Duration{2900 * ms, 3100 * ms} {
		r := Run{Gap: gap, Bound: 3400 * ms, Copies: 1, LogCopies: 1}
		r.Judge(target)
		s.Runs = append(s.Runs, r)
	}
	s.Summarize()
	if !s.Summary.Pass || s.Summary.Over != 1 {
		t.Fatalf("summary %+v", s.Summary)
	}
	var b bytes.Buffer
	if err := Table(&b, []Scenario{s}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "< 3s (advisory)") || !strings.Contains(b.String(), "pass (1/2 over the advisory figure)") {
		t.Errorf("table:\n%s", b.String())
	}
}

func TestSummarizeAndTable(t *testing.T) {
	s := Scenario{Name: "power-cut", Target: Target{Ratio: 1.05}.String(), Runs: []Run{
		{Gap: 3000 * ms, Bound: 3300 * ms, Ratio: 3000.0 / 3300, Pass: true},
		{Gap: 3200 * ms, Bound: 3300 * ms, Ratio: 3200.0 / 3300, Pass: true, Violations: 1},
		{Gap: 3100 * ms, Bound: 3400 * ms, Ratio: 3100.0 / 3400, Pass: false},
	}}
	s.Summarize()
	m := s.Summary
	if m.Runs != 3 || m.Overlaps != 1 || m.GapMedian != 3100*ms || m.GapMax != 3200*ms || m.Bound != 3300*ms || m.Pass {
		t.Errorf("summary %+v", m)
	}
	var b bytes.Buffer
	if err := Table(&b, []Scenario{s}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "scenario") {
		t.Fatalf("table:\n%s", b.String())
	}
	for _, want := range []string{"power-cut", "3.1s", "3.2s", "3.3s", "0.970", "≤ 1.05 × bound", "FAIL"} {
		if !strings.Contains(lines[1], want) {
			t.Errorf("the row lacks %q: %s", want, lines[1])
		}
	}
}

func TestScenarioWithAnErrorFails(t *testing.T) {
	s := Scenario{Runs: []Run{{Pass: true}}, Error: "not settled"}
	s.Summarize()
	if s.Summary.Pass {
		t.Error("a scenario that could not finish passes")
	}
	empty := Scenario{}
	empty.Summarize()
	if empty.Summary.Pass {
		t.Error("a scenario without runs passes")
	}
}

func TestConfirmWaitMatchesPolicy(t *testing.T) {
	// policy's README: the confirm wait at the defaults is 16.033 s.
	if got := policy.DefaultTiming().ConfirmWait(); got != 16033*ms {
		t.Errorf("confirmWait(defaults) = %v, want 16.033s", got)
	}
}

func TestFastProfileIsValid(t *testing.T) {
	r, err := fastTiming.Resolved()
	if err != nil {
		t.Fatal(err)
	}
	if r.LeaseSpan != r.SafeMinimum() {
		t.Errorf("lease span %v, want the safe minimum %v", r.LeaseSpan, r.SafeMinimum())
	}
	if got := timingTable(fastTiming); !strings.Contains(got, `retry = "200ms"`) || !strings.Contains(got, `stop_wait = "1s"`) {
		t.Errorf("timing table:\n%s", got)
	}
}
