package policy

import (
	"testing"
	"time"

	"pgregory.net/rapid"
)

// TestStepToIsStep: over random event sequences (the answers of a store
// and a unit the world's store model gives, arbitrary events, a peer's
// writes, ticks at, before and after the wake-up, clocks that go back),
// StepTo in place and Step on a copy give the same machine and the same
// output, Step leaves its receiver as it was, and StepTo into an Output
// that still holds an earlier step's actions, wake-up and journal event
// leaves nothing of them behind (the supervisor's carry re-steps into the
// Output it just read).
func TestStepToIsStep(t *testing.T) {
	reached := map[State]int{}
	runs := 0
	rapid.Check(t, func(rt *rapid.T) {
		runs++
		tm := worldTimings[rapid.IntRange(0, len(worldTimings)-1).Draw(rt, "timing")]
		tm.LeaseSpan = tm.SafeMinimum() + time.Duration(rapid.IntRange(0, 2000).Draw(rt, "extra_ms"))*time.Millisecond
		grids := renewGrids(tm)
		m, err := New(Config{
			Timing:     tm,
			Seed:       rapid.Uint64().Draw(rt, "seed"),
			RenewGrid:  grids[rapid.IntRange(0, len(grids)-1).Draw(rt, "grid")],
			Identified: rapid.Bool().Draw(rt, "identified"),
			Node:       "a",
			Withdrawn:  rapid.IntRange(0, 7).Draw(rt, "withdrawn") == 0,
		})
		if err != nil {
			rt.Fatal(err)
		}
		var st store
		var pending []Action
		now := Instant(rapid.IntRange(0, 1000).Draw(rt, "origin_s")) * Instant(time.Second)
		wake := now
		out := Output{} // reused across steps, as carry does
		steps := rapid.IntRange(1, 1500).Draw(rt, "steps")
		for i := range steps {
			var e Event
			switch rapid.IntRange(0, 19).Draw(rt, "what") {
			case 0, 1, 2, 3, 4, 5: // the wake-up, on time or late
				now = max(now, wake) + Instant(rapid.IntRange(0, 300).Draw(rt, "late_ms"))*Instant(time.Millisecond)
				e = Event{Kind: Tick}
			case 6: // an early tick, or a clock read that went back
				now -= Instant(rapid.IntRange(0, 2000).Draw(rt, "back_ms")) * Instant(time.Millisecond)
				e = Event{Kind: Tick}
			case 7, 8, 9, 10, 11, 12, 13, 14, 15, 16: // the answer to an outstanding action
				if len(pending) == 0 {
					e = Event{Kind: Tick}
					break
				}
				j := rapid.IntRange(0, len(pending)-1).Draw(rt, "answer")
				a := pending[j]
				pending = append(pending[:j], pending[j+1:]...)
				now += Instant(rapid.IntRange(0, 4000).Draw(rt, "reply_ms")) * Instant(time.Millisecond)
				switch a.Kind {
				case StartUnit:
					e = Event{Kind: UnitStarted}
					if rapid.IntRange(0, 7).Draw(rt, "start_fails") == 0 {
						e.Kind = UnitStartFailed
					}
				case StopUnit:
					k := UnitStopped
					if rapid.IntRange(0, 3).Draw(rt, "stop_fails") == 0 {
						k = UnitStopFailed
					}
					e = Event{Kind: k, Killed: k == UnitStopped && rapid.Bool().Draw(rt, "killed")}
				default:
					if rapid.IntRange(0, 7).Draw(rt, "fails") == 0 {
						e = failure(a.Kind)
					} else {
						e = st.apply("a", a)
					}
				}
			case 17: // a peer writes the key, or it goes missing
				switch rapid.IntRange(0, 3).Draw(rt, "peer") {
				case 0:
					st.write("b", "tb", st.rec.Version+1, false)
				case 1:
					st.write("b", "tb", st.rec.Version+1, true)
				case 2:
					st.rec = Absent
				case 3:
					st.rec.Other = &OtherLease{Lease: "other", Unit: "u.service", Released: rapid.Bool().Draw(rt, "other_released")}
				}
				e = Event{Kind: Nudge}
			default: // any event at all, expected or not
				k := EventKind(rapid.IntRange(0, int(numEvents)-1).Draw(rt, "kind"))
				e = Event{Kind: k, Record: st.rec, Killed: rapid.Bool().Draw(rt, "any_killed"),
					Delay: time.Duration(rapid.IntRange(-1000, 5000).Draw(rt, "delay_ms")) * time.Millisecond}
				if k == HandoffRequested && rapid.Bool().Draw(rt, "to") {
					e.To = "b"
				}
			}

			before := m
			next, want := m.Step(now, e)
			if m != before {
				rt.Fatalf("step %d (%v at %v): Step changed its receiver", i, e, now)
			}
			// StepTo into the Output of the last step, as carry does, and
			// into one full of junk.
			inPlace := before
			inPlace.StepTo(now, e, &out)
			junk := Output{actions: [maxActions]Action{{Kind: StopUnit, By: 1}, {Kind: Release}, {Kind: StartUnit, Token: 9}}, n: maxActions, Wake: 1, Journal: JournalReleased}
			again := before
			again.StepTo(now, e, &junk)
			if inPlace != next || again != next {
				rt.Fatalf("step %d (%v at %v): StepTo's machine differs from Step's:\n step   %+v\n stepTo %+v\n junk   %+v", i, e, now, next, inPlace, again)
			}
			if out != want || junk != want {
				rt.Fatalf("step %d (%v at %v): StepTo's output differs from Step's:\n step   %+v\n stepTo %+v\n junk   %+v", i, e, now, want, out, junk)
			}
			m = next
			reached[m.State()]++
			for a := range want.Actions() {
				pending = append(pending, a)
			}
			if want.Wake != Never {
				wake = want.Wake
			}
		}
	})
	if t.Failed() {
		return
	}
	t.Logf("states reached: %v", reached)
	if runs < 100 {
		return // too few sequences to ask for every state (-short runs a fifth of -rapid.checks)
	}
	for st := range State(len(stateNames)) {
		if reached[st] == 0 {
			t.Errorf("no step reached %v: the sequences are too shallow to compare StepTo with Step there", st)
		}
	}
}

// TestStepToDoesNotAllocate: a tick's StepTo allocates nothing (the
// supervisor's reason for it).
func TestStepToDoesNotAllocate(t *testing.T) {
	m, err := New(Config{Timing: DefaultTiming(), Seed: 1, Node: "a"})
	if err != nil {
		t.Fatal(err)
	}
	var o Output
	now := Instant(time.Second)
	allocs := testing.AllocsPerRun(100, func() {
		now += Instant(time.Second)
		m.StepTo(now, Event{Kind: Tick}, &o)
	})
	if allocs != 0 {
		t.Fatalf("StepTo allocates %v times a step", allocs)
	}
}
