package policy

// Review of `unitlease disable` (HandoffRequested with CauseDisabled),
// the exclusions (Withdraw/Compete) and the preference's deferral
// (Defer), as the daemon feeds them: attempts to release a lease whose
// stop failed, to start a unit after a disable, or to lose a named
// handoff's safety, written as single-machine scenarios.

import (
	"testing"
	"time"
)

// driveNoRelease wakes d for span and fails the test if it releases or
// starts the unit meanwhile; every step it also feeds one of evs in turn
// (the daemon's steer rounds repeat Disable, SetWithdrawn, SetDelay and a
// failback's HandoffTo while the stop fails).
func driveNoRelease(t *testing.T, d *driver, span time.Duration, evs ...Event) {
	t.Helper()
	end := d.now.Add(span)
	for i := 0; d.now < end; i++ {
		if len(evs) > 0 {
			d.after(time.Millisecond, evs[i%len(evs)])
		}
		if d.has(Release) || d.has(StartUnit) {
			t.Fatalf("at %v in %v: %v while the stop failed", d.now, d.m.State(), d.out)
		}
		for a := range d.out.Actions() {
			if a.Kind == Renew {
				d.after(time.Millisecond, with(RenewOK, stopFailed("a", a.Record.Version+1)))
			}
			if a.Kind == StopUnit {
				d.after(time.Millisecond, ev(UnitStopFailed))
			}
		}
		if d.has(Release) || d.has(StartUnit) {
			t.Fatalf("at %v in %v: %v while the stop failed", d.now, d.m.State(), d.out)
		}
		d.wake()
		if d.has(Release) || d.has(StartUnit) {
			t.Fatalf("at %v in %v: %v while the stop failed", d.now, d.m.State(), d.out)
		}
		for a := range d.out.Actions() {
			if a.Kind == Renew {
				d.after(time.Millisecond, with(RenewOK, stopFailed("a", a.Record.Version+1)))
			}
			if a.Kind == StopUnit {
				d.after(time.Millisecond, ev(UnitStopFailed))
			}
		}
	}
	if d.m.State() != StopFailed && d.m.State() != Stopping {
		t.Fatalf("after %v of failed stops: %v, want stop_failed or stopping", span, d.m.State())
	}
	if _, holding := d.m.Held(); !holding {
		t.Fatalf("after %v of failed stops the node no longer holds the lease", span)
	}
}

// TestBreakDisableStopFailedEnableNeverReleases: a disable whose stop
// fails keeps the lease held (stop_failed) through every later word the
// daemon sends: the disable again each round, an enable (Compete), an
// exclusion (Withdraw), a failback's HandoffTo and a deferral; once the
// stop succeeds it releases, offered to no node (the disable's cause
// wins over a later named handoff's Next only if it came last).
func TestBreakDisableStopFailedEnableNeverReleases(t *testing.T) {
	tm := DefaultTiming()
	d := leader(t, tm)
	d.at(3*s, Event{Kind: HandoffRequested, Cause: CauseDisabled}).want(Stopping, StopUnit).journal(JournalStopping)
	if d.m.Cause() != CauseDisabled {
		t.Fatalf("cause %v, want disabled", d.m.Cause())
	}
	d.at(4*s, ev(UnitStopFailed)).want(StopFailed, Renew).journal(JournalStopFailed)
	d.after(time.Millisecond, with(RenewOK, stopFailed("a", 3)))
	driveNoRelease(t, d, 10*tm.LeaseSpan,
		Event{Kind: HandoffRequested, Cause: CauseDisabled},
		ev(Compete),
		ev(Withdraw),
		Event{Kind: HandoffRequested, To: "b"},
		Event{Kind: Defer, Delay: time.Minute},
		Event{Kind: HandoffRequested, Cause: CauseDisabled},
		ev(Compete),
	)
	// The stop now succeeds: released, offered to nobody (the last word
	// was the disable's).
	for !d.has(StopUnit) {
		for a := range d.out.Actions() {
			if a.Kind == Renew {
				d.after(time.Millisecond, with(RenewOK, stopFailed("a", a.Record.Version+1)))
			}
		}
		if d.has(StopUnit) {
			break
		}
		d.wake()
	}
	d.after(time.Millisecond, ev(UnitStopped))
	for d.m.State() == Releasing && !d.has(Release) {
		d.after(time.Millisecond, with(RenewOK, stopFailed("a", 1000)))
	}
	if !d.has(Release) {
		t.Fatalf("after the stop succeeded: %v %v, want a release", d.m.State(), d.out)
	}
	var rel Record
	for a := range d.out.Actions() {
		if a.Kind == Release {
			rel = a.Record
		}
	}
	if rel.Next != "" {
		t.Errorf("the release after the disable offers the lease to %q", rel.Next)
	}
	d.after(time.Millisecond, ev(ReleaseOK))
	if d.m.State() != Backoff {
		t.Errorf("after the release: %v, want backoff", d.m.State())
	}
}

// TestBreakDisableWhileConfirmingNeverStarts: a lease disabled while the
// node confirms an acquisition over a missing key releases it without
// ever starting the unit.
func TestBreakDisableWhileConfirmingNeverStarts(t *testing.T) {
	tm := DefaultTiming()
	d := booted(t, tm)
	d.at(0, seen(Absent))
	for d.m.State() == Standby {
		d.wake()
		if d.has(Observe) {
			d.after(time.Millisecond, seen(Absent))
		}
	}
	if d.m.State() != Acquiring {
		t.Fatalf("%v, want acquiring", d.m.State())
	}
	d.after(time.Millisecond, with(AcquireOK, held("a", 1)))
	if d.m.State() != Confirming {
		t.Fatalf("acquired over a missing key: %v, want confirming", d.m.State())
	}
	d.after(time.Second, Event{Kind: HandoffRequested, Cause: CauseDisabled})
	for i := 0; !d.has(Release); i++ {
		if d.has(StartUnit) || i > 100 {
			t.Fatalf("a disabled, confirming lease: %v %v, want a release and no start", d.m.State(), d.out)
		}
		if d.has(Renew) {
			d.after(time.Millisecond, with(RenewOK, held("a", uint64(2+i))))
			continue
		}
		d.wake()
	}
	d.after(time.Millisecond, ev(ReleaseOK))
	for range 10 {
		if d.has(Observe) {
			d.after(time.Millisecond, seen(released("a", 3)))
		} else if d.has(Acquire) {
			// the daemon's store refuses it: the lease is disabled
			d.after(time.Millisecond, ev(AcquireLost))
		} else {
			d.wake()
		}
		if d.has(StartUnit) {
			t.Fatalf("a disabled lease started after its release")
		}
	}
}

// TestBreakWithdrawBeforeAcquireOKGivesItBack: the disable's Withdraw
// that reaches the machine while its acquisition is out gives the
// acquisition back without a start; one that comes only after the
// acquire's answer (the daemon's round read Holding() false a moment
// before) leaves the unit starting: the daemon must send the disable's
// handoff in the next round (the daemon test covers that).
func TestBreakWithdrawBeforeAcquireOKGivesItBack(t *testing.T) {
	tm := DefaultTiming()
	d := booted(t, tm)
	d.at(0, seen(released("b", 1))).want(Acquiring, Acquire)
	d.after(time.Millisecond, ev(Withdraw))
	d.after(time.Millisecond, with(AcquireOK, held("a", 2)))
	if d.has(StartUnit) {
		t.Fatalf("withdrawn before the answer: the unit starts")
	}
	if d.m.State() != Stopping {
		t.Fatalf("withdrawn before the answer: %v, want stopping (give back)", d.m.State())
	}
}
