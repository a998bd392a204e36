package policy

import "testing"

// stopBy returns the By of the step's StopUnit, failing if there is none.
func (d *driver) stopBy() Instant {
	d.t.Helper()
	for a := range d.out.Actions() {
		if a.Kind == StopUnit {
			return a.By
		}
	}
	d.t.Fatalf("at %v: no StopUnit among %v", d.now, d.out)
	return 0
}

// TestAStopCarriesTheDeadlineItIsDueBy: a stop of a unit that ran under
// the lease is due by the lease's renew deadline, whatever stopped it (the
// deadline itself, a handoff, a loss); the watchdog holds systemd's taking
// of it to that instant. The startup stop and a stop tried again after a
// failed one carry none: no deadline bounds them.
func TestAStopCarriesTheDeadlineItIsDueBy(t *testing.T) {
	tm := DefaultTiming()
	rt, _ := tm.Resolved()
	d := newDriver(t, tm)
	d.at(0, ev(Tick)).want(Stopping, StopUnit)
	if by := d.stopBy(); by != 0 {
		t.Fatalf("the startup stop is due by %v, want no deadline", by)
	}

	// The deadline passes with every renewal failing.
	d = leader(t, tm)
	deadline := d.m.LastRenewal().Add(rt.Retry + rt.RenewDeadline)
	for !d.has(StopUnit) {
		if d.now > deadline {
			t.Fatalf("at %v: no stop past the deadline %v", d.now, deadline)
		}
		if d.wake(); d.has(Renew) && !d.has(StopUnit) {
			d.after(0, ev(RenewFailed))
		}
	}
	if by := d.stopBy(); by != deadline {
		t.Fatalf("the stop at the deadline is due by %v, want the deadline %v", by, deadline)
	}
	// It fails; the stop tried again has no deadline.
	d.after(0, ev(UnitStopFailed)).want(StopFailed)
	for !d.has(StopUnit) {
		d.wake()
	}
	if by := d.stopBy(); by != 0 {
		t.Fatalf("the stop tried again after a failed one is due by %v, want no deadline", by)
	}

	// A handoff: due by the deadline of the last renewal.
	d = leader(t, tm)
	d.at(3*s, ev(HandoffRequested)).want(Stopping, StopUnit)
	if by, want := d.stopBy(), d.m.LastRenewal().Add(rt.Retry+rt.RenewDeadline); by != want {
		t.Fatalf("the handoff's stop is due by %v, want the deadline %v", by, want)
	}

	// A loss seen at a renewal.
	d = leader(t, tm)
	for !d.has(Renew) {
		d.wake()
	}
	want := d.m.LastRenewal().Add(rt.Retry + rt.RenewDeadline)
	d.after(0, with(RenewLost, held("b", 9))).want(Stopping, StopUnit).journal(JournalLost)
	if by := d.stopBy(); by != want {
		t.Fatalf("the stop after a loss is due by %v, want the deadline of the last renewal %v", by, want)
	}
}
