package policy

import (
	"testing"
	"time"
)

// nodeDriver is booted for node, with Config.Node set.
func nodeDriver(t *testing.T, node string, withdrawn bool) *driver {
	t.Helper()
	m, err := New(Config{Timing: DefaultTiming(), Seed: 1, Node: node, Withdrawn: withdrawn})
	if err != nil {
		t.Fatal(err)
	}
	d := &driver{t: t, m: m}
	d.at(0, ev(Tick)).want(Stopping, StopUnit)
	return d.at(0, ev(UnitStopped)).want(Standby, Observe)
}

func offered(holder string, v uint64, next string) Record {
	r := released(holder, v)
	r.Next = next
	r.Raw += " to " + next
	return r
}

// A release that offers the lease to one node (handoff --to) is taken at
// once by that node only: every other node ages it for the lease span,
// as a held record, and then may take it.
func TestReleaseOfferedToANodeIsTakenByThatNodeAtOnce(t *testing.T) {
	for _, tc := range []struct {
		node string
		now  bool
	}{{"b", true}, {"c", false}} {
		d := nodeDriver(t, tc.node, false)
		d.after(0, seen(held("a", 5))).want(Standby)
		d.wake().want(Standby, Observe)
		d.after(0, seen(offered("a", 6, "b")))
		if got := d.m.State() == Acquiring; got != tc.now {
			t.Fatalf("node %s: acquiring at once = %v, want %v", tc.node, got, tc.now)
		}
		if tc.now {
			continue
		}
		span := d.m.Timing().LeaseSpan
		for d.m.State() == Standby && time.Duration(d.now) < span {
			d.wake().after(0, seen(offered("a", 6, "b")))
		}
		if d.m.State() != Standby {
			t.Fatalf("node c acquired the offered record after %v, before the lease span %v", time.Duration(d.now), span)
		}
		for d.m.State() == Standby && time.Duration(d.now) < 2*span {
			d.wake().after(0, seen(offered("a", 6, "b")))
		}
		if d.m.State() != Acquiring {
			t.Fatalf("node c never took the offered record after the lease span")
		}
	}
}

// The leader's release after a handoff to a node names it; the holder
// names no one when told to hand off to itself.
func TestHandoffToANodeNamesItInTheRelease(t *testing.T) {
	for _, to := range []string{"b", ""} {
		d := leader(t, DefaultTiming())
		d.after(s, Event{Kind: HandoffRequested, To: to}).want(Stopping, StopUnit)
		d.after(s, ev(UnitStopped)).want(Releasing, Release)
		if got := d.action(0).Record.Next; got != to {
			t.Fatalf("release names %q, want %q", got, to)
		}
		d.after(0, ev(ReleaseOK)).want(Backoff, Observe)
		// The next tenure's release names no one.
		if d.m.next != "" {
			t.Fatalf("next %q kept after the release", d.m.next)
		}
	}
}

// A withdrawn node (drained) keeps running what it runs, acquires
// nothing, not even a released record, and competes again after Compete.
func TestWithdrawnNodeKeepsItsUnitAndAcquiresNothing(t *testing.T) {
	d := leader(t, DefaultTiming())
	d.after(s, ev(Withdraw)).want(Leader).journal("")
	d.after(s, ev(HandoffRequested)).want(Stopping, StopUnit)
	d.after(s, ev(UnitStopped)).want(Releasing, Release)
	d.after(0, ev(ReleaseOK)).want(Backoff, Observe)
	d.after(10*60*s, seen(released("b", 9))).want(Standby)
	d.wake().want(Standby, Observe)
	d.after(0, seen(released("b", 9))).want(Standby)
	d.after(0, ev(Compete)).want(Standby)
	d.wake().want(Standby, Observe)
	d.after(0, seen(released("b", 9))).want(Acquiring, Acquire)
}

// A node that starts withdrawn (drained before the daemon started)
// acquires nothing.
func TestNodeStartedWithdrawnAcquiresNothing(t *testing.T) {
	d := nodeDriver(t, "a", true)
	d.after(0, Event{Kind: Observed, Record: Absent}).want(Standby)
	for range 100 {
		d.wake().after(0, Event{Kind: Observed, Record: Absent}).want(Standby)
	}
}

// An acquisition in flight, or made and not yet started (Confirming),
// when the node withdraws is given back without a start.
func TestWithdrawWhileAcquiringOrConfirmingNeverStarts(t *testing.T) {
	d := booted(t, DefaultTiming())
	d.at(0, seen(released("b", 1))).want(Acquiring, Acquire)
	d.after(0, ev(Withdraw)).want(Acquiring)
	d.after(s, with(AcquireOK, held("a", 2))).want(Stopping, StopUnit)
	if d.m.Cause() != CauseWithdrawn {
		t.Fatalf("cause %v, want withdrawn", d.m.Cause())
	}
	d.after(s, ev(UnitStopped)).want(Releasing, Release)

	d = booted(t, DefaultTiming())
	d.at(0, seen(Absent)).want(Standby)
	for d.m.State() == Standby {
		d.wake().after(0, seen(Absent))
	}
	d.want(Acquiring, Acquire)
	d.after(s, with(AcquireOK, held("a", 2))).want(Confirming)
	d.after(s, ev(Withdraw)).want(Releasing, Release)
	d.after(0, ev(ReleaseOK)).want(Backoff, Observe)
}

// A deferring standby (a more preferred node is ready) takes a released
// record only after its delay, and a record offered to it by name at
// once.
func TestDeferDelaysTheAcquisition(t *testing.T) {
	const delay = 7 * time.Second
	d := nodeDriver(t, "c", false)
	d.after(0, Event{Kind: Defer, Delay: delay})
	d.after(0, seen(held("a", 5))).want(Standby)
	d.wake().want(Standby, Observe)
	d.after(0, seen(released("a", 6))).want(Standby)
	start := d.now
	for d.m.State() == Standby {
		d.wake().after(0, seen(released("a", 6)))
	}
	if waited := d.now.Sub(start); waited < delay || waited > delay+d.m.Timing().PollMax {
		t.Fatalf("acquired %v after the release, want between %v and %v", waited, delay, delay+d.m.Timing().PollMax)
	}

	d = nodeDriver(t, "c", false)
	d.after(0, Event{Kind: Defer, Delay: delay})
	d.after(0, seen(held("a", 5))).want(Standby)
	d.wake().want(Standby, Observe)
	d.after(0, seen(offered("a", 6, "c"))).want(Acquiring, Acquire)
}

// A node backing off after its own handoff takes a release offered to it
// by name at once (`handoff --to` back to the node that just gave the
// lease up): the operator's choice outranks the backoff, which is there
// to leave an unnamed release to the peers. A release offered to
// another node, or to none, still waits the backoff out.
func TestBackoffTakesAReleaseOfferedByName(t *testing.T) {
	for _, tc := range []struct {
		next string
		now  bool
	}{{"a", true}, {"c", false}, {"", false}} {
		d := nodeDriver(t, "a", false)
		d.at(0, seen(released("b", 1))).want(Acquiring, Acquire)
		d.at(s, with(AcquireOK, held("a", 2))).want(Starting, StartUnit)
		d.at(2*s, ev(UnitStarted)).want(Leader)
		d.after(s, Event{Kind: HandoffRequested, To: "b"}).want(Stopping, StopUnit)
		d.after(s, ev(UnitStopped)).want(Releasing, Release)
		d.after(0, ev(ReleaseOK)).want(Backoff, Observe)
		d.after(0, seen(held("b", 4))).want(Backoff)
		d.wake().want(Backoff, Observe)
		r := released("b", 5)
		if tc.next != "" {
			r = offered("b", 5, tc.next)
		}
		d.after(0, seen(r))
		if got := d.m.State() == Acquiring; got != tc.now {
			t.Fatalf("release offered to %q: acquiring at once = %v (state %v), want %v", tc.next, got, d.m.State(), tc.now)
		}
	}
}
