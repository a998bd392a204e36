package policy

import "testing"

// TestIneligibleLeaderHandsOffAndNeverAcquires: a leader told that this
// node must not run the unit (its protections are defeated, say) stops it,
// confirms it inactive, releases and backs off; while ineligible it never
// acquires, not even a released record; once eligible again it does.
func TestIneligibleLeaderHandsOffAndNeverAcquires(t *testing.T) {
	d := leader(t, DefaultTiming())
	d.after(s, ev(Ineligible)).want(Stopping, StopUnit).journal(JournalStopping)
	if d.m.Cause() != CauseIneligible {
		t.Fatalf("cause %v, want ineligible", d.m.Cause())
	}
	d.after(s, ev(UnitStopped)).want(Releasing, Release).journal(JournalStopped)
	d.after(0, ev(ReleaseOK)).want(Backoff, Observe).journal(JournalReleased)
	// Long past the backoff, a released record is there for the taking.
	d.after(10*60*s, seen(released("b", 9))).want(Standby)
	d.wake().want(Standby, Observe)
	d.after(0, seen(released("b", 9))).want(Standby)
	d.after(0, ev(Eligible)).want(Standby)
	d.wake().want(Standby, Observe)
	d.after(0, seen(released("b", 9))).want(Acquiring, Acquire)
}

// TestIneligibleWhileAcquiringNeverStarts: an acquisition already sent
// when the node became ineligible succeeds; the unit is not started, and
// the lease goes back at once.
func TestIneligibleWhileAcquiringNeverStarts(t *testing.T) {
	d := booted(t, DefaultTiming())
	d.at(0, seen(released("b", 1))).want(Acquiring, Acquire)
	d.after(0, ev(Ineligible)).want(Acquiring)
	d.after(s, with(AcquireOK, held("a", 2))).want(Stopping, StopUnit)
	d.after(s, ev(UnitStopped)).want(Releasing, Release)
	d.after(0, ev(ReleaseOK)).want(Backoff, Observe)
}

// TestIneligibleStandbyIsQuiet: a standby that becomes ineligible does not
// refuse anything and asks for nothing; eligibility twice is once.
func TestIneligibleStandbyIsQuiet(t *testing.T) {
	d := booted(t, DefaultTiming())
	d.after(0, ev(Ineligible)).want(Standby).journal("")
	d.after(0, ev(Ineligible)).want(Standby).journal("")
	d.after(0, ev(Eligible)).want(Standby).journal("")
}

// TestStartsIneligibleAgesTheSpanButAcquiresOnlyOnceEligible: a machine
// made with Config.Ineligible (its drop-in not yet checked) stops the
// unit and observes the record like any other; long past the lease span
// over an unchanged record, and over a released one, it acquires
// nothing; once eligible, the span it already aged counts, and it
// acquires at its next observation.
func TestStartsIneligibleAgesTheSpanButAcquiresOnlyOnceEligible(t *testing.T) {
	tm := DefaultTiming()
	m, err := New(Config{Timing: tm, Seed: 1, Ineligible: true})
	if err != nil {
		t.Fatal(err)
	}
	if !m.Ineligible() {
		t.Fatal("Config.Ineligible: Ineligible() is false")
	}
	d := &driver{t: t, m: m}
	d.at(0, ev(Tick)).want(Stopping, StopUnit)
	d.at(0, ev(UnitStopped)).want(Standby, Observe).journal(JournalStopped)
	d.at(0, seen(held("b", 1))).want(Standby)
	for d.m.Age(d.now) < 3*tm.SafeMinimum() {
		d.wake().want(Standby, Observe)
		d.after(0, seen(held("b", 1))).want(Standby)
	}
	d.after(0, seen(released("b", 2))).want(Standby)
	d.after(0, seen(held("b", 1))).want(Standby)
	for d.m.Age(d.now) < tm.SafeMinimum() {
		d.wake().want(Standby, Observe)
		d.after(0, seen(held("b", 1))).want(Standby)
	}
	d.after(0, ev(Eligible)).want(Standby)
	if d.m.Ineligible() {
		t.Fatal("Eligible: Ineligible() is still true")
	}
	d.wake().want(Standby, Observe)
	d.after(0, seen(held("b", 1))).want(Acquiring, Acquire)
}
