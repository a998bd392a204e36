//go:build breaks

package policy

import (
	"testing"
)

// Adversarial tests of the released shortcut that still fail: holes left
// open, documented in the README.

// TestBreakRule8ARestoredReleaseAfterAMissedTenure: the `older` check in
// see() compares a released record's version with the highest version
// THIS standby has seen (top). A standby that did not poll during a whole
// tenure (polls are poll_min..poll_max apart; its observations may also
// fail for a while) cannot know the tenure's versions. Sequence, all
// under one server identity (see()'s own comment: "a backup written into
// the running server keeps its identity"): y sees b's held record; b
// releases; c acquires and starts; a backup of the key taken just after
// b's release is written back (RESTORE / SET of a dump). y reads b's
// released record, same holder, same token, version above its top: a
// witnessed release by every rule, taken at once while c runs until its
// next renewal finds the loss and its stop completes.
func TestBreakRule8ARestoredReleaseAfterAMissedTenure(t *testing.T) {
	tm := DefaultTiming()
	y := booted(t, tm)
	y.at(0, seen(on(held("b", 100), "A"))).want(Standby)
	y.wake().want(Standby, Observe)
	y.after(0, ev(ObserveFailed)).want(Standby) // y misses c's tenure

	c := leader(t, tm) // c acquired over b's release and runs

	y.wake().want(Standby, Observe)
	y.after(0, seen(on(released("b", 101), "A"))) // the restored value
	if y.m.State() != Acquiring {
		return
	}
	y.after(0, with(AcquireOK, on(held("y", 1796105101043), "A"))).want(Starting, StartUnit)
	if c.m.State() == Leader {
		t.Fatalf("y starts (%v) over a released record restored after c's acquisition while c is %v: the release "+
			"was witnessed only in y's eyes (version 101 >= top 100)", y.m.State(), c.m.State())
	}
}

// TestBreakRule8AFailedStopsBarrierIsLostWithTheKey: the stop_failed
// record is the only thing that keeps standbys out while a node's units
// may still run ("a failed stop never leads to a start elsewhere"). A
// holder in StopFailed whose renewal finds the key missing (a Redis data
// loss: restart without AOF, FLUSHALL, a failover to a replica that never
// got the key) or garbage (RenewLost) drops holding and writes nothing
// ever again while its stop keeps failing: a standby ages the missing key
// for a lease span, acquires and starts, while the failed node's units
// still run. The node should write its stop_failed record back (an
// acquisition over the missing key in state stop_failed) while its stop
// has not succeeded.
func TestBreakRule8AFailedStopsBarrierIsLostWithTheKey(t *testing.T) {
	tm := DefaultTiming()
	rt, _ := tm.Resolved()
	d := leader(t, tm)
	d.at(3*s, ev(HandoffRequested)).want(Stopping, StopUnit)
	d.at(4*s, ev(UnitStopFailed)).want(StopFailed, Renew)
	d.after(s/10, ev(RenewMissing))
	end := d.now.Add(3 * rt.LeaseSpan)
	for d.now < end {
		d.wake()
		for i := range d.out.Len() {
			switch a := d.action(i); a.Kind {
			case Renew, Acquire:
				return // the barrier is written back
			case StopUnit:
				d.after(s, ev(UnitStopFailed))
			}
		}
	}
	t.Fatalf("at %v (%v): the stop has failed since +4s and the key went missing at %v; the node wrote nothing since, "+
		"so every standby took the missing key after a lease span %v while its units may run", d.now, d.m.State(), Instant(4*s+s/10), rt.LeaseSpan)
}
