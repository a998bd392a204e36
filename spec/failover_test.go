package spec

import (
	"errors"
	"strings"
	"testing"
)

func mustCheckFailover(t *testing.T, f Failover) FailoverResult {
	t.Helper()
	r, err := f.Check()
	if err != nil {
		t.Fatalf("Check(%+v): %v", f, err)
	}
	return r
}

func replayFailover(t *testing.T, f Failover, steps []FailoverStep, cycleFrom *int) {
	t.Helper()
	from := -1
	if cycleFrom != nil {
		from = *cycleFrom
	}
	if err := f.Replay(steps, from); err != nil {
		t.Fatalf("counterexample does not replay: %v", err)
	}
}

// The new master brings back a released record (here the one the leader
// acquired over) and a standby without the rule takes it at once.
func TestFailoverReleasedCounterexampleWithoutRule(t *testing.T) {
	f := SeedFailover(36, 0, 0, false)
	r := mustCheckFailover(t, f)
	if r.ProcessExclusion || r.Violated != "ProcessExclusion" || r.Kind != KindInvariant {
		t.Fatalf("want a ProcessExclusion violation, got %+v", r)
	}
	if !r.TypeOK || !r.Handoff {
		t.Errorf("TypeOK %t Handoff %t", r.TypeOK, r.Handoff)
	}
	replayFailover(t, f, r.Counterexample, nil)
	last := r.Counterexample[len(r.Counterexample)-1].State
	if !last.OldAlive || !last.NewAlive || !last.Rolled || !last.Released(last.Frozen) || last.Age == int16(f.LeaseSpan) {
		t.Fatalf("want both alive after taking a released record at once, got %v", last)
	}
	for _, s := range r.Counterexample[:len(r.Counterexample)-1] {
		if !FailoverExclusion(s.State) {
			t.Fatalf("trace is not minimal: exclusion already broken at %v", s.State)
		}
	}
	if times := FailoverTimes(r.Counterexample); times[len(times)-1] != 0 {
		t.Errorf("the shortest one spawns at %d, want 0 (cut, rollback and take at once)", times[len(times)-1])
	}
	// The same at the seed's MaxLag and Detect: the take comes Detect after the cut.
	g := SeedFailover(36, 10, 10, false)
	steps, err := g.Hazard(HazardReleased)
	if err != nil || steps == nil {
		t.Fatalf("no released-record counterexample at %+v: %v", g, err)
	}
	replayFailover(t, g, steps, nil)
}

// The new master lacks the leader's last renewal and holds the record the
// standby saw before: without the rule the standby's age goes on across
// the change, and it starts a lease span after its first sight of that
// record while the leader, whose later renewal succeeded, still runs. It
// needs no MaxLag: replication lag is enough.
func TestFailoverHeldCounterexampleWithoutRule(t *testing.T) {
	f := SeedFailover(36, 0, 0, false)
	steps, err := f.Hazard(HazardHeld)
	if err != nil || steps == nil {
		t.Fatalf("no held-record counterexample: %v", err)
	}
	replayFailover(t, f, steps, nil)
	last := steps[len(steps)-1].State
	if !last.OldAlive || !last.NewAlive || last.Released(last.Frozen) || last.Seen != last.Frozen || last.Frozen >= last.Top {
		t.Fatalf("want both alive over an older held record, got %v", last)
	}
	// The standby first saw that record on the old master, before the cut.
	times := FailoverTimes(steps)
	first := -1
	for i, s := range steps {
		if s.Action == "Observe" && s.State.Seen == last.Frozen && !s.State.Rolled {
			first = times[i]
			break
		}
	}
	if first < 0 || times[len(times)-1]-first != f.LeaseSpan {
		t.Fatalf("the standby started %d after its first sight on the old master (at %d), want LeaseSpan %d",
			times[len(times)-1]-first, first, f.LeaseSpan)
	}
}

// With the rule, neither happens: ProcessExclusion and Handoff hold at the
// smallest safe lease span (the rollback does not block the lease).
func TestFailoverHoldsWithRule(t *testing.T) {
	cases := []Failover{SeedFailover(36, 0, 0, true), SeedFailover(36, 3, 5, true)}
	if !testing.Short() {
		cases = append(cases, SeedFailover(36, 10, 10, true), SeedFailover(40, 14, 10, true))
	}
	for _, f := range cases {
		r := mustCheckFailover(t, f)
		if !r.OK() || r.Counterexample != nil {
			t.Errorf("%+v: %+v", f, r.Violated)
		}
		if r.States < 10_000 {
			t.Errorf("%+v: only %d states", f, r.States)
		}
	}
}

// With the rule the released shortcut stays: a standby that saw the
// leader's release happen under the same server takes it at once; never a
// release first seen under the new server.
func TestFailoverWitnessedReleaseTakenAtOnce(t *testing.T) {
	f := SeedFailover(36, 0, 0, true)
	early := func(s FailoverState) bool {
		return s.Standby == Check && f.Ready(s) && int(s.Age) < f.LeaseSpan
	}
	steps, err := f.Find(early)
	if err != nil || steps == nil {
		t.Fatalf("the standby never takes a release at once: %v", err)
	}
	last := steps[len(steps)-1].State
	if last.Rolled || last.Seen != last.RelVer || !last.Witnessed {
		t.Errorf("taken at once: %v", last)
	}
	steps, err = f.Find(func(s FailoverState) bool { return early(s) && s.Rolled })
	if err != nil || steps != nil {
		t.Errorf("a release from the new master is taken at once (%v): %v", err, steps)
	}
}

// The law the sweep finds, at the module's own timings, with the rule:
// ProcessExclusion holds at MaxLag = Detect + LeaseSpan - 36 and fails one
// second above.
func TestFailoverSafeLawSeed(t *testing.T) {
	type point struct{ span, detect int }
	points := []point{{36, 0}, {37, 2}}
	if !testing.Short() {
		points = append(points, point{36, 10}, point{40, 7})
	}
	for _, p := range points {
		f := SeedFailover(p.span, 0, p.detect, true)
		bound := f.SafeMaxLag()
		if want := p.detect + p.span - 36; bound != want {
			t.Fatalf("SafeMaxLag(%+v) = %d, want %d", p, bound, want)
		}
		for lag, want := range map[int]bool{bound: true, bound + 1: false} {
			f.MaxLag = lag
			ok, err := f.Excludes()
			if err != nil || ok != want {
				t.Errorf("%+v: exclusion %t (%v), want %t", f, ok, err, want)
			}
			if law := FailoverSafe(f.LeaseSpan, f.Retry, f.Renew, f.StopWait, f.MaxLag, f.Detect); law != want {
				t.Errorf("FailoverSafe(%+v) = %t", f, law)
			}
		}
	}
}

// Without the rule the lease span does not help: only a failover that
// comes after the old leader's unit is gone, whatever it did, is safe.
func TestFailoverLawWithoutRuleSeed(t *testing.T) {
	if testing.Short() {
		t.Skip("four checks of about a million states; the grid covers the law")
	}
	for _, c := range []struct {
		span, lag, detect int
		want              bool
	}{{36, 0, 35, false}, {36, 0, 36, true}, {40, 0, 35, false}, {36, 5, 41, true}} {
		f := SeedFailover(c.span, c.lag, c.detect, false)
		ok, err := f.Excludes()
		if err != nil || ok != c.want || (f.SafeMaxLag() >= c.lag) != c.want {
			t.Errorf("%+v: exclusion %t (%v), SafeMaxLag %d, want %t", f, ok, err, f.SafeMaxLag(), c.want)
		}
	}
}

// Both laws over a grid of small timings, every MaxLag from 0 to past the
// bound: exact where poll sums cover every instant (PollHigh >=
// 2*PollLow-1), sufficient everywhere.
func TestFailoverSafeLawGrid(t *testing.T) {
	type timing struct{ retry, renew, stopWait, pollLow, pollHigh int }
	var grid []timing
	for _, retry := range []int{1, 2} {
		for _, renew := range []int{0, 3} {
			for _, stopWait := range []int{0, 2} {
				for _, poll := range [][2]int{{1, 1}, {1, 2}, {2, 3}, {2, 2}} {
					grid = append(grid, timing{retry, renew, stopWait, poll[0], poll[1]})
				}
			}
		}
	}
	if testing.Short() {
		grid = grid[:4] // every kind of poll, the smallest timings
	}
	for _, tm := range grid {
		bound := tm.retry + tm.renew + tm.stopWait + 1
		exact := tm.pollHigh >= 2*tm.pollLow-1
		for _, span := range []int{bound, bound + 2} {
			for _, rule := range []bool{true, false} {
				detects := []int{0, 1, 3}
				if !rule {
					detects = []int{0, bound - 1, bound, bound + 2}
				}
				for _, detect := range detects {
					f := Failover{span, 0, detect, rule, tm.retry, tm.renew, tm.stopWait, tm.pollLow, tm.pollHigh}
					law := f.SafeMaxLag()
					for f.MaxLag = 0; f.MaxLag <= max(law, 0)+2; f.MaxLag++ {
						ok, err := f.Excludes()
						if err != nil {
							t.Fatal(err)
						}
						safe := f.MaxLag <= law
						if safe && !ok || exact && ok != safe {
							t.Errorf("%+v: exclusion %t, law says %t (exact %t)", f, ok, safe, exact)
						}
					}
				}
			}
		}
	}
}

func TestFailoverSweepFindsTheLaw(t *testing.T) {
	if testing.Short() {
		t.Skip("the sweep is make check-spec's job; the law tests above cover it")
	}
	rows, err := FailoverSweep(SeedFailover(36, 0, 0, true), []int{0, 10})
	if err != nil {
		t.Fatal(err)
	}
	for _, row := range rows {
		if !row.OK() || row.Law != row.Detect || row.LawWithoutRule != -1 {
			t.Errorf("sweep row %+v", row)
		}
	}
}

func TestFailoverTypeOKRejectsOutOfRange(t *testing.T) {
	f := SeedFailover(36, 10, 10, true)
	for _, bad := range []FailoverState{
		{Clock: int16(max(f.CutMax(), f.Settle())) + 1, Top: 1, Seen: None},
		{Top: 0, Seen: None},
		{Top: int16(f.MaxTop()) + 1, Seen: None},
		{Top: 1, Seen: -2},
		{Top: 1, Seen: None, Age: 37},
		{Top: 1, Seen: None, Remaining: 21},
		{Top: 1, Seen: None, PollLeft: 12},
		{Top: 1, Seen: None, SeenID: 2},
		{Top: 1, Seen: None, Leader: Pending},
	} {
		if f.TypeOK(bad) {
			t.Errorf("TypeOK accepts %v", bad)
		}
	}
	if !f.TypeOK(f.Init()) {
		t.Error("TypeOK rejects Init")
	}
}

func TestFailoverReplayRejectsWhatTheModuleForbids(t *testing.T) {
	f := SeedFailover(36, 0, 0, false)
	r := mustCheckFailover(t, f)
	steps := append([]FailoverStep(nil), r.Counterexample...)
	steps[len(steps)-3].State.Age++
	if err := f.Replay(steps, -1); !errors.Is(err, ErrNotBehaviour) {
		t.Fatalf("tampered trace replays: %v", err)
	}
	// The same trace is no behaviour of the module with the rule: the
	// standby may not take the released record at once.
	g := f
	g.Rule = true
	if err := g.Replay(r.Counterexample, -1); !errors.Is(err, ErrNotBehaviour) || !strings.Contains(err.Error(), "Acquire") {
		t.Fatalf("the counterexample replays with the rule: %v", err)
	}
}

func TestFailoverValidate(t *testing.T) {
	for _, c := range []struct {
		f    Failover
		want string
	}{
		{SeedFailover(0, 0, 0, true), "LeaseSpan 0"},
		{SeedFailover(36, -1, 0, true), "MaxLag -1"},
		{SeedFailover(36, 0, -1, true), "Detect -1"},
		{SeedFailover(36, 0, 1001, true), "Detect 1001"},
		{Failover{36, 0, 0, true, 0, 20, 10, 5, 11}, "Retry 0"},
		{Failover{36, 0, 0, true, 5, 20, 10, 0, 11}, "PollLow 0"},
		{Failover{36, 0, 0, true, 5, 20, 10, 5, 4}, "PollHigh 4"},
	} {
		err := c.f.Validate()
		if !errors.Is(err, ErrAssume) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Validate(%+v) = %v, want it to name %q", c.f, err, c.want)
		}
	}
	if err := SeedFailover(36, 10, 10, false).Validate(); err != nil {
		t.Error(err)
	}
}
