package supervisor

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// nudgePending reports whether a nudge is on its way to a step.
func (s *Supervisor) nudgePending() bool { return s.nudges.Load() != 0 }

// ineligibleStandby launches, in a synctest bubble, a supervisor of
// demo.service that may not lead, and returns it a standby once its
// startup stop went through.
func ineligibleStandby(t *testing.T) (*Supervisor, func()) {
	t.Helper()
	u := &bsqUnits{}
	s := demoSupervisor(t, []string{"demo.service"}, &fakeStore{t: t, noRelease: true}, u, bsqQuiet())
	s.SetEligibleSoon(false)
	end := s.Launch(context.WithoutCancel(t.Context()))
	synctest.Wait()
	u.next(t, nil)
	time.Sleep(30 * time.Second)
	synctest.Wait()
	if st := s.Status(); st.Holding || st.Role != "standby" {
		t.Fatalf("an ineligible supervisor after its startup stop: %+v; want a standby", st)
	}
	return s, end
}

// TestNudgeViaPutsAStandbysStepWhereTheCallerSays: a standby's nudged
// step runs where the caller puts it (the daemon's line of nudges), and
// nudges until it ran are that one; a holder takes none; a holder whose
// wake-up is overdue (a resume not yet noticed) steps at once on its own
// goroutine, not in the line, and stops its unit.
func TestNudgeViaPutsAStandbysStepWhereTheCallerSays(t *testing.T) {
	var lined []func()
	line := func(step func()) { lined = append(lined, step) }
	synctest.Test(t, func(t *testing.T) {
		s, end := ineligibleStandby(t)
		defer end()
		lined = nil
		s.NudgeVia(line)
		s.NudgeVia(line)
		if len(lined) != 1 {
			t.Fatalf("two nudges of a standby put %d steps in the line; want one", len(lined))
		}
		lined[0]()
		if s.nudgePending() {
			t.Fatal("the nudge's step ran and a nudge is still on its way")
		}
		s.NudgeVia(line)
		if len(lined) != 2 {
			t.Fatal("a nudge after the last one's step put none in the line")
		}
		lined[1]()
	})
	synctest.Test(t, func(t *testing.T) {
		lined = nil
		s, end := bsqLeading(t, &fakeStore{t: t, noRelease: true}, &bsqUnits{})
		defer end()
		s.NudgeVia(line)
		if len(lined) != 0 || s.nudgePending() {
			t.Fatalf("a nudge of a holder: %d steps lined, nudged %t; want none", len(lined), s.nudgePending())
		}
	})
	synctest.Test(t, func(t *testing.T) {
		lined = nil
		s, units, logs := suspendedLeader(t)
		s.NudgeVia(line)
		synctest.Wait()
		if len(lined) != 0 {
			t.Fatal("a holder overdue after a suspend waited in the line of nudges")
		}
		if running, _, _ := units.state(); running {
			t.Fatalf("the overdue holder's nudge did not stop its unit:\n%s", logs)
		}
	})
}
