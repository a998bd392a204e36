package main

// The measurements, pure: the witness log's copies, their overlaps, the
// time with no copy running, the targets, the table and the JSON.

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// Record is one line of the witness log: "WHAT NODE NS", NS on
// CLOCK_MONOTONIC, which every node shares with the host.
type Record struct {
	What, Node string
	At         time.Duration
}

// The records the witness writes.
const (
	recStart     = "start"     // the copy took its lock (or found it held) and runs
	recStop      = "stop"      // its last act after SIGTERM
	recFail      = "fail"      // its last act before exiting with status 1
	recExit      = "exit"      // from the node's journal: systemd saw the unit's processes gone
	recViolation = "violation" // it found the lock held by another copy
)

// ParseLog reads a witness log; malformed lines are skipped.
func ParseLog(data []byte) []Record {
	var rs []Record
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 3 && !(len(f) == 4 && f[0] == recStart) { // a start also names its token
			continue
		}
		ns, err := strconv.ParseInt(f[2], 10, 64)
		if err != nil {
			continue
		}
		rs = append(rs, Record{What: f[0], Node: f[1], At: time.Duration(ns)})
	}
	return rs
}

// Cut is a node losing power at At: a copy running there ends at that
// moment and leaves no record of it.
type Cut struct {
	Node string
	At   time.Duration
}

// Copy is one life of the witness on a node.
type Copy struct {
	Node  string
	Start time.Duration
	// FirstEnd is the earliest evidence that the copy ended: its own stop
	// or fail record, else the exit record, else the power cut. LastEnd is
	// the latest: the exit record, else stop or fail, else the cut. Both
	// are -1 while the copy runs. Overlaps use LastEnd and gaps FirstEnd,
	// so each errs on its own side.
	FirstEnd, LastEnd time.Duration
	// Lost: a later start on the same node found this copy without any
	// end; it is taken to have run until then.
	Lost bool
}

// Running reports whether no end of the copy is known.
func (c Copy) Running() bool { return c.LastEnd < 0 }

func (c Copy) lastEnd() time.Duration {
	if c.LastEnd < 0 {
		return time.Duration(1<<63 - 1)
	}
	return c.LastEnd
}

func (c Copy) firstEnd() time.Duration {
	if c.FirstEnd < 0 {
		return time.Duration(1<<63 - 1)
	}
	return c.FirstEnd
}

// Copies rebuilds every copy's life from the records and the power cuts,
// in order of time. The witness writes start, stop, fail and violation;
// exit records come from elsewhere (systemd's journal) and mark a moment
// after the copy's processes were gone, the only end that a copy killed
// with SIGKILL leaves. An exit record with no copy open on its node (a
// start the guard refused also ends in one) is ignored.
func Copies(rs []Record, cuts []Cut) []Copy {
	evs := slices.Clone(rs)
	for _, c := range cuts {
		evs = append(evs, Record{What: "cut", Node: c.Node, At: c.At})
	}
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].At < evs[j].At })
	var copies []Copy
	open := map[string]int{} // node: index of its copy until its exit record or cut
	for _, e := range evs {
		i, ok := open[e.Node]
		switch e.What {
		case recStart:
			if ok && copies[i].LastEnd < 0 {
				copies[i].FirstEnd, copies[i].LastEnd, copies[i].Lost = e.At, e.At, true
			}
			open[e.Node] = len(copies)
			copies = append(copies, Copy{Node: e.Node, Start: e.At, FirstEnd: -1, LastEnd: -1})
		case recStop, recFail:
			if ok && copies[i].FirstEnd < 0 {
				copies[i].FirstEnd, copies[i].LastEnd = e.At, e.At
			}
		case recExit:
			if ok {
				if copies[i].FirstEnd < 0 {
					copies[i].FirstEnd = e.At
				}
				copies[i].LastEnd = e.At
				delete(open, e.Node)
			}
		case "cut":
			if ok {
				if copies[i].FirstEnd < 0 {
					copies[i].FirstEnd, copies[i].LastEnd = e.At, e.At
				}
				delete(open, e.Node)
			}
		}
	}
	return copies
}

// Overlap is two copies alive at once.
type Overlap struct{ A, B Copy }

func (o Overlap) String() string {
	return fmt.Sprintf("%s [%v, %s] and %s [%v, %s]", o.A.Node, o.A.Start, endString(o.A), o.B.Node, o.B.Start, endString(o.B))
}

func endString(c Copy) string {
	if c.Running() {
		return "running"
	}
	return c.LastEnd.String()
}

// Overlaps lists every pair of copies whose lives, start to LastEnd,
// intersect.
func Overlaps(copies []Copy) []Overlap {
	var out []Overlap
	for i, a := range copies {
		for _, b := range copies[i+1:] {
			if a.Start < b.lastEnd() && b.Start < a.lastEnd() {
				out = append(out, Overlap{a, b})
			}
		}
	}
	return out
}

// Violations counts the witness's own reports of finding its lock held.
func Violations(rs []Record) int {
	n := 0
	for _, r := range rs {
		if r.What == recViolation {
			n++
		}
	}
	return n
}

// Uncovered is the time within [from, to] during which no copy runs, each
// copy counted from its start to its FirstEnd.
func Uncovered(copies []Copy, from, to time.Duration) time.Duration {
	if to <= from {
		return 0
	}
	type span struct{ a, b time.Duration }
	var spans []span
	for _, c := range copies {
		a, b := max(c.Start, from), min(c.firstEnd(), to)
		if a < b {
			spans = append(spans, span{a, b})
		}
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].a < spans[j].a })
	var gap time.Duration
	at := from
	for _, s := range spans {
		if s.a > at {
			gap += s.a - at
		}
		at = max(at, s.b)
	}
	return gap + max(0, to-at)
}

// Handover describes what a fault at the given moment led to.
type Handover struct {
	From, To string        // the node running a copy at the fault, and the one at the end ("" if none)
	Start    time.Duration // the start of the copy running at the end
	Gap      time.Duration // time with no copy running from the fault until that start
	Moved    bool          // a copy started after the fault
	Running  int           // copies running at the end, by the log
}

// HandoverAfter measures the fault at from: the copy running then, the
// copy running at the end, and the time with no copy in between.
func HandoverAfter(copies []Copy, from time.Duration) Handover {
	var h Handover
	var last *Copy
	for i, c := range copies {
		if c.Start <= from && c.firstEnd() >= from && h.From == "" {
			h.From = c.Node
		}
		if c.Running() {
			h.Running++
			last = &copies[i]
		}
	}
	if last != nil {
		h.To, h.Start = last.Node, last.Start
		if last.Start > from {
			h.Moved = true
			h.Gap = Uncovered(copies, from, last.Start)
		}
	}
	return h
}

// Median of ds (the mean of the middle two for an even count); 0 for none.
func Median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(ds))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// Target is what a scenario's gap must meet.
type Target struct {
	Ratio float64       // gap <= Ratio * bound + Slack; 0: no bound
	Slack time.Duration // see Ratio
	Under time.Duration // gap < Under; 0: none
	// UnderAdvisory reports a gap not under Under without failing the run.
	UnderAdvisory bool
	NoGap         bool // no copy may stop: the gap must be zero
}

func (t Target) String() string {
	var parts []string
	switch {
	case t.NoGap:
		parts = append(parts, "no gap")
	case t.Ratio > 0 && t.Slack > 0 && t.Ratio == 1:
		parts = append(parts, "≤ bound + "+t.Slack.String())
	case t.Ratio > 0:
		parts = append(parts, fmt.Sprintf("≤ %.2f × bound", t.Ratio))
	}
	if t.Under > 0 {
		u := "< " + t.Under.String()
		if t.UnderAdvisory {
			u += " (advisory)"
		}
		parts = append(parts, u)
	}
	if len(parts) == 0 {
		return "none: ratio reported"
	}
	return strings.Join(parts, ", ")
}

// Run is one repetition of a scenario.
type Run struct {
	Index      int           `json:"index"`
	Fault      time.Duration `json:"fault_monotonic_ns"` // host CLOCK_MONOTONIC just before the fault
	From       string        `json:"from"`
	To         string        `json:"to"`
	Moved      bool          `json:"moved"`
	Gap        time.Duration `json:"gap_ns"`   // time with no copy running
	Bound      time.Duration `json:"bound_ns"` // 0: none
	BoundParts string        `json:"bound"`    // what the bound adds up
	Ratio      float64       `json:"ratio"`    // Gap / Bound
	Overlaps   []string      `json:"overlaps"`
	Violations int           `json:"violations"`
	Over       bool          `json:"over_advisory"` // the gap is not under the advisory figure
	Copies     int           `json:"copies_at_end"` // by systemd on every node
	LogCopies  int           `json:"log_copies_at_end"`
	Problems   []string      `json:"problems"`
	Events     []string      `json:"events"` // the daemons' journal entries during the run
	Took       time.Duration `json:"took_ns"`
	Pass       bool          `json:"pass"`
}

// Judge fills in Ratio and Pass: no overlap, no violation, exactly one
// copy at the end by systemd and by the log, no problem, and the target.
func (r *Run) Judge(t Target) {
	if r.Bound > 0 {
		r.Ratio = float64(r.Gap) / float64(r.Bound)
	}
	var miss []string
	if len(r.Overlaps) > 0 || r.Violations > 0 {
		miss = append(miss, fmt.Sprintf("%d overlaps, %d violations", len(r.Overlaps), r.Violations))
	}
	if r.Copies != 1 || r.LogCopies != 1 {
		miss = append(miss, fmt.Sprintf("%d copies running at the end (%d by the witness log)", r.Copies, r.LogCopies))
	}
	switch {
	case t.NoGap && r.Gap > 0:
		miss = append(miss, fmt.Sprintf("gap %v, want none", r.Gap))
	case t.Ratio > 0 && r.Bound > 0 && float64(r.Gap) > t.Ratio*float64(r.Bound)+float64(t.Slack):
		miss = append(miss, fmt.Sprintf("gap %v above %s (bound %v)", r.Gap, t, r.Bound))
	}
	switch {
	case t.Under > 0 && r.Gap >= t.Under && t.UnderAdvisory:
		r.Over = true
	case t.Under > 0 && r.Gap >= t.Under:
		miss = append(miss, fmt.Sprintf("gap %v not under %v", r.Gap, t.Under))
	}
	r.Problems = append(r.Problems, miss...)
	r.Pass = len(r.Problems) == 0
}

// Scenario is one scenario's runs and their summary.
type Scenario struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	Target      string `json:"target"`
	Runs        []Run  `json:"runs"`
	Summary     struct {
		Runs      int           `json:"runs"`
		Overlaps  int           `json:"overlaps"` // overlapping pairs and violations over every run
		GapMedian time.Duration `json:"gap_median_ns"`
		GapMax    time.Duration `json:"gap_max_ns"`
		Bound     time.Duration `json:"bound_ns"`      // the median of the runs' bounds
		RatioMax  float64       `json:"ratio_max"`     // the worst run's
		Over      int           `json:"over_advisory"` // runs not under the advisory figure
		Pass      bool          `json:"pass"`
	} `json:"summary"`
	Error      string `json:"error,omitempty"`       // the scenario could not run to the end
	SetupRetry string `json:"setup_retry,omitempty"` // why the first setup failed, if it did
}

// Summarize fills in Summary from Runs.
func (s *Scenario) Summarize() {
	var gaps, bounds []time.Duration
	sum := &s.Summary
	sum.Runs, sum.Overlaps, sum.RatioMax, sum.Pass = len(s.Runs), 0, 0, s.Error == "" && len(s.Runs) > 0
	for _, r := range s.Runs {
		sum.Overlaps += len(r.Overlaps) + r.Violations
		gaps = append(gaps, r.Gap)
		if r.Bound > 0 {
			bounds = append(bounds, r.Bound)
		}
		sum.RatioMax = max(sum.RatioMax, r.Ratio)
		if r.Over {
			sum.Over++
		}
		sum.Pass = sum.Pass && r.Pass
	}
	sum.GapMedian, sum.Bound = Median(gaps), Median(bounds)
	sum.GapMax = 0
	if len(gaps) > 0 {
		sum.GapMax = slices.Max(gaps)
	}
}

// Table writes one line per scenario.
func Table(w io.Writer, scenarios []Scenario) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "scenario\truns\toverlaps\tgap median\tgap max\tbound\tratio\ttarget\tresult")
	for _, s := range scenarios {
		m := s.Summary
		result := "pass"
		if !m.Pass {
			result = "FAIL"
		}
		if m.Over > 0 {
			result += fmt.Sprintf(" (%d/%d over the advisory figure)", m.Over, m.Runs)
		}
		if s.SetupRetry != "" {
			result += " (set up twice)"
		}
		bound, ratio := "-", "-"
		if m.Bound > 0 {
			bound, ratio = fmtDur(m.Bound), fmt.Sprintf("%.3f", m.RatioMax)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", s.Name, m.Runs, m.Overlaps,
			fmtDur(m.GapMedian), fmtDur(m.GapMax), bound, ratio, s.Target, result)
	}
	return tw.Flush()
}

// fmtDur rounds to the millisecond.
func fmtDur(d time.Duration) string {
	if d == 0 {
		return "0"
	}
	return d.Round(time.Millisecond).String()
}
