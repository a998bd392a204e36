package spec

import (
	"errors"
	"strings"
	"testing"
)

func mustCheck(t *testing.T, l Lease) Result {
	t.Helper()
	r, err := l.Check()
	if err != nil {
		t.Fatalf("Check(%+v): %v", l, err)
	}
	return r
}

func replay(t *testing.T, r Result) {
	t.Helper()
	cycleFrom := -1
	if r.CycleFrom != nil {
		cycleFrom = *r.CycleFrom
	}
	if err := r.Lease.Replay(r.Counterexample, cycleFrom); err != nil {
		t.Fatalf("counterexample for %s does not replay: %v", r.Violated, err)
	}
}

func TestViolationBelowSafeMinimum(t *testing.T) {
	r := mustCheck(t, Seed(35, 0))
	if r.ProcessExclusion || r.Violated != "ProcessExclusion" || r.Kind != KindInvariant {
		t.Fatalf("LeaseSpan 35: want a ProcessExclusion violation, got %+v", r)
	}
	last := r.Counterexample[len(r.Counterexample)-1]
	if !last.State.OldAlive || !last.State.NewAlive {
		t.Fatalf("trace does not end with both processes alive: %v", last.State)
	}
	for _, s := range r.Counterexample[:len(r.Counterexample)-1] {
		if !ProcessExclusion(s.State) {
			t.Fatalf("trace is not minimal: exclusion already broken at %v", s.State)
		}
	}
	// The shortest way there: the standby sees the commit at time 0 and
	// acquires when the leader's stop bound runs out, at time 35.
	if last.State.Now != 35 || last.Action != "Spawn" {
		t.Fatalf("last step %s at now=%d, want Spawn at 35", last.Action, last.State.Now)
	}
	replay(t, r)
}

func TestHoldsAtAndAboveSafeMinimum(t *testing.T) {
	for span := 36; span <= 46; span++ {
		r := mustCheck(t, Seed(span, 0))
		if !r.OK() || r.Counterexample != nil {
			t.Errorf("LeaseSpan %d: %+v", span, r)
		}
	}
}

func TestTypeOKAndHandoffHoldEvenWhenUnsafe(t *testing.T) {
	for _, l := range []Lease{Seed(1, 0), Seed(20, 7), Seed(35, 0), Seed(36, 0), Seed(55, 20), Seed(60, 20)} {
		r := mustCheck(t, l)
		if !r.TypeOK || !r.Handoff {
			t.Errorf("%+v: TypeOK %t Handoff %t", l, r.TypeOK, r.Handoff)
		}
		if r.States < 100 {
			t.Errorf("%+v: only %d states", l, r.States)
		}
	}
}

func TestTypeOKRejectsOutOfRange(t *testing.T) {
	l := Seed(36, 0)
	for _, bad := range []State{
		{Now: int32(l.Limit()) + 1},
		{Age: 37},
		{Remaining: -1},
		{Remaining: 21},
		{PollLeft: 12},
		{Version: 3},
		{Leader: LeaderDone + 1},
	} {
		if l.TypeOK(bad) {
			t.Errorf("TypeOK accepts %v", bad)
		}
	}
	if !l.TypeOK(Init()) {
		t.Error("TypeOK rejects Init")
	}
}

// The law the sweep finds, for the module's own timings, over every
// ReplyMax the module allows.
func TestSafeMinimumLawSeed(t *testing.T) {
	for replyMax := 0; replyMax <= 20; replyMax++ {
		l := Seed(1, replyMax)
		min := l.SafeMinimum()
		if want := replyMax + 36; min != want {
			t.Fatalf("SafeMinimum(ReplyMax %d) = %d, want %d", replyMax, min, want)
		}
		for span, want := range map[int]bool{min - 1: false, min: true, min + 10: true} {
			l.LeaseSpan = span
			ok, err := l.Excludes()
			if err != nil || ok != want {
				t.Errorf("ReplyMax %d LeaseSpan %d: exclusion %t (%v), want %t", replyMax, span, ok, err, want)
			}
		}
	}
}

// The same law over a grid of small timings, every LeaseSpan from 1: exact
// where poll sums cover every instant (PollHigh >= 2*PollLow-1 and PollLow
// within the stop bound), sufficient everywhere.
func TestSafeMinimumLawGrid(t *testing.T) {
	for _, retry := range []int{0, 1, 3} {
		for _, renew := range []int{0, 2, 4} {
			for _, stopWait := range []int{0, 1, 3} {
				for _, poll := range [][2]int{{1, 1}, {1, 2}, {2, 3}, {2, 4}, {3, 3}, {3, 7}} {
					for _, replyMax := range []int{0, 2} {
						l := Lease{1, replyMax, retry, renew, stopWait, poll[0], poll[1]}
						checkLaw(t, l)
					}
				}
			}
		}
	}
}

func checkLaw(t *testing.T, l Lease) {
	t.Helper()
	bound := l.SafeMinimum() - 1
	exact := l.PollHigh >= 2*l.PollLow-1 && l.PollLow <= bound
	for l.LeaseSpan = 1; l.LeaseSpan <= l.SafeMinimum()+3; l.LeaseSpan++ {
		ok, err := l.Excludes()
		if err != nil {
			t.Fatal(err)
		}
		safe := l.LeaseSpan >= l.SafeMinimum()
		if safe && !ok || exact && ok != safe {
			t.Errorf("%+v: exclusion %t, law says %t (exact %t)", l, ok, safe, exact)
		}
	}
}

// A standby that can never defer (PollLow > PollHigh) gets stuck in Check.
func TestHandoffDeadlockCounterexample(t *testing.T) {
	l := Seed(36, 0)
	l.PollLow, l.PollHigh = 3, 2
	if !errors.Is(l.Validate(), ErrAssume) {
		t.Fatal("Validate accepts PollLow > PollHigh")
	}
	r, err := l.check()
	if err != nil {
		t.Fatal(err)
	}
	if r.Handoff || r.Kind != KindDeadlock {
		t.Fatalf("want a Handoff deadlock, got %+v", r)
	}
	last := r.Counterexample[len(r.Counterexample)-1].State
	if Done(last) || len(l.Enabled(last)) != 0 {
		t.Fatalf("last state %v is Done or enables %v", last, l.Enabled(last))
	}
	replay(t, r)
}

// A zero poll lets the standby observe forever while time stands still: a
// fair cycle that never reaches Done.
func TestHandoffCycleCounterexample(t *testing.T) {
	l := Seed(36, 0)
	l.PollLow, l.PollHigh = 0, 0
	r, err := l.check()
	if err != nil {
		t.Fatal(err)
	}
	if r.Handoff || r.Kind != KindCycle || r.CycleFrom == nil {
		t.Fatalf("want a Handoff cycle, got %+v", r)
	}
	replay(t, r)
	loop := r.Counterexample[*r.CycleFrom:]
	for _, act := range Actions {
		taken, disabled := false, false
		for i, s := range loop {
			taken = taken || i > 0 && s.Action == act.Name
			disabled = disabled || !strings.Contains(" "+strings.Join(l.Enabled(s.State), " ")+" ", " "+act.Name+" ")
		}
		if !taken && !disabled {
			t.Errorf("the loop is unfair to %s: always enabled, never taken", act.Name)
		}
	}
}

func TestReplayRejectsWhatTheModuleForbids(t *testing.T) {
	r := mustCheck(t, Seed(30, 0))
	steps := append([]Step(nil), r.Counterexample...)
	steps[3].State.Age++
	if err := r.Lease.Replay(steps, -1); !errors.Is(err, ErrNotBehaviour) {
		t.Fatalf("tampered trace replays: %v", err)
	}
	steps = append([]Step(nil), r.Counterexample...)
	steps[2].Action = "Tick"
	if err := r.Lease.Replay(steps, -1); !errors.Is(err, ErrNotBehaviour) {
		t.Fatalf("trace with a wrong action name replays: %v", err)
	}
	if err := r.Lease.Replay(r.Counterexample, 1); !errors.Is(err, ErrNotBehaviour) {
		t.Fatalf("an open trace replays as a loop: %v", err)
	}
}

func TestValidate(t *testing.T) {
	for _, c := range []struct {
		l    Lease
		want string
	}{
		{Seed(0, 0), "LeaseSpan 0"},
		{Seed(-1, 0), "LeaseSpan -1"},
		{Seed(36, -1), "ReplyMax -1"},
		{Seed(36, 21), "ReplyMax 21"},
		{Lease{36, 0, -1, 20, 10, 5, 11}, "Retry -1"},
		{Lease{36, 0, 5, 20, 10, 0, 11}, "PollLow 0"},
		{Lease{36, 0, 5, 20, 10, 5, 4}, "PollHigh 4"},
		{Lease{36, 0, 5, 20, 1001, 5, 11}, "StopWait 1001"},
	} {
		err := c.l.Validate()
		if !errors.Is(err, ErrAssume) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Validate(%+v) = %v, want it to name %q", c.l, err, c.want)
		}
	}
	if err := Seed(36, 20).Validate(); err != nil {
		t.Error(err)
	}
}

func TestSweepFindsTheLaw(t *testing.T) {
	if testing.Short() {
		t.Skip("the full sweep is make check-spec's job; the law tests above cover it")
	}
	rows, err := Sweep(Seed(1, 0), 2)
	if err != nil {
		t.Fatal(err)
	}
	for _, row := range rows {
		want := Seed(1, row.ReplyMax).SafeMinimum()
		if row.MinSafe != want || !row.HoldsAbove || row.CheckedTo != want+2 {
			t.Errorf("sweep row %+v, want smallest safe %d holding to %d", row, want, want+2)
		}
	}
}
