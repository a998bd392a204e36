package policy

import "testing"

func stopFailed(node string, v uint64) Record {
	r := held(node, v)
	r.Raw += " stop_failed"
	r.StopFailed = true
	return r
}

// TestAFailedStopIsWrittenAtOnce: a holder whose stop failed writes its
// record stop_failed with its very next request, not a retry later, and
// keeps writing it until a stop succeeds; then it releases.
func TestAFailedStopIsWrittenAtOnce(t *testing.T) {
	d := leader(t, DefaultTiming())
	d.at(3*s, ev(HandoffRequested)).want(Stopping, StopUnit)
	d.at(4*s, ev(UnitStopFailed)).want(StopFailed, Renew).journal(JournalStopFailed)
	if r := d.action(0).Record; !r.StopFailed || r.Token != "a" {
		t.Fatalf("the renewal after a failed stop writes %+v, want this node's record as stop_failed", r)
	}
	d.after(s/10, with(RenewOK, stopFailed("a", 3))).want(StopFailed)
	for range 20 {
		d.wake()
		if d.has(Release) {
			t.Fatalf("at %v: released while the stop has not succeeded", d.now)
		}
		if d.has(StopUnit) {
			break
		}
		if d.has(Renew) {
			if r := d.action(0).Record; !r.StopFailed {
				t.Fatalf("at %v: a renewal while the stop fails writes %+v, not stop_failed", d.now, r)
			}
			d.after(s/10, with(RenewOK, stopFailed("a", d.action(0).Record.Version+1)))
		}
	}
	if d.m.State() != Stopping {
		t.Fatalf("at %v: %v, want the stop tried again", d.now, d.m.State())
	}
	for i := range d.out.Len() {
		if a := d.action(i); a.Kind == Renew {
			if !a.Record.StopFailed {
				t.Fatalf("at %v: the renewal with the second stop writes %+v, not stop_failed", d.now, a.Record)
			}
			d.after(s/10, with(RenewOK, stopFailed("a", a.Record.Version+1)))
		}
	}
	d.after(s, ev(UnitStopped)).want(Releasing, Release)
	d.after(0, ev(ReleaseOK)).want(Backoff, Observe)
}

// TestStandbyNeverAcquiresOverAFailedStop: a stop_failed record is never
// acquired over, however long it stays the same (its holder may have died
// with its unit still running); once released in its holder's name (by
// the holder, or cleared by an operator) it is taken at once.
func TestStandbyNeverAcquiresOverAFailedStop(t *testing.T) {
	tm := DefaultTiming()
	d := booted(t, tm)
	r := stopFailed("b", 7)
	d.at(0, seen(r)).want(Standby)
	for i := 0; i < 1000; i++ {
		d.wake()
		if d.has(Acquire) {
			t.Fatalf("at %v: acquiring over a stop_failed record seen unchanged since 0", d.now)
		}
		if d.has(Observe) {
			d.after(0, seen(r))
		}
	}
	if d.now.Sub(0) < 10*tm.SafeMinimum() {
		t.Fatalf("only %v simulated", d.now)
	}
	// Released in b's name and token (by b, or cleared by an operator):
	// taken at once.
	d.wake().want(Standby, Observe)
	d.after(0, seen(released("b", 8))).want(Acquiring, Acquire)

	// A released record in another name after it (a reset, over garbage
	// the standby never read) released nothing: aged.
	d2 := booted(t, tm)
	d2.at(0, seen(r)).want(Standby)
	d2.wake().want(Standby, Observe)
	d2.after(0, seen(released("ops", 9))).want(Standby)
}

// TestAStopFailedWithoutTheLeaseWritesNothing: a node that does not hold
// the lease (its startup stop failed) has nothing to write.
func TestAStopFailedWithoutTheLeaseWritesNothing(t *testing.T) {
	d := newDriver(t, DefaultTiming())
	d.at(0, ev(Tick)).want(Stopping, StopUnit)
	d.at(s, ev(UnitStopFailed)).want(StopFailed).journal(JournalStopFailed)
	if d.has(Renew) {
		t.Fatal("renewing a lease this node does not hold")
	}
}

// TestAStopFailedRecordIsReleasedEvenIfTheFirstReleaseFails: once the
// units stop, a record that says stop_failed must be released: left
// behind, no node would ever take the lease (until the key's TTL), though
// the units are confirmed inactive. A release that fails is tried again
// every reply_max, and a definitive loss ends it. A record that never
// said stop_failed is left to age after one failed release, as before.
func TestAStopFailedRecordIsReleasedEvenIfTheFirstReleaseFails(t *testing.T) {
	tm := DefaultTiming()
	d := leader(t, tm)
	d.at(3*s, ev(HandoffRequested)).want(Stopping, StopUnit)
	d.at(4*s, ev(UnitStopFailed)).want(StopFailed, Renew)
	d.after(s/10, with(RenewOK, stopFailed("a", 3))).want(StopFailed)
	for d.m.State() == StopFailed {
		d.wake()
		if d.has(Renew) {
			d.after(s/10, with(RenewOK, stopFailed("a", d.action(0).Record.Version+1)))
		}
	}
	d.after(s, ev(UnitStopped)).want(Releasing, Release)
	for range 3 {
		d.after(tm.ReplyMax, ev(ReleaseFailed)).want(Releasing)
		if _, holding := d.m.Held(); !holding {
			t.Fatal("a failed release of a stop_failed record gave the lease up")
		}
		d.wake().want(Releasing, Release)
	}
	d.after(s/10, ev(ReleaseOK)).want(Backoff, Observe).journal(JournalReleased)

	// A definitive loss (an operator cleared it, say) ends the retries.
	d = leader(t, tm)
	d.at(3*s, ev(HandoffRequested)).want(Stopping, StopUnit)
	d.at(4*s, ev(UnitStopFailed)).want(StopFailed, Renew)
	d.after(s/10, with(RenewOK, stopFailed("a", 3))).want(StopFailed)
	for d.m.State() == StopFailed {
		d.wake()
		if d.has(Renew) {
			d.after(s/10, with(RenewOK, stopFailed("a", d.action(0).Record.Version+1)))
		}
	}
	d.after(s, ev(UnitStopped)).want(Releasing, Release)
	d.after(s/10, ev(ReleaseLost)).want(Backoff, Observe)

	// A record that never said stop_failed ages like any other.
	d = leader(t, tm)
	d.at(3*s, ev(HandoffRequested)).want(Stopping, StopUnit)
	d.after(s, ev(UnitStopped)).want(Releasing, Release)
	d.after(s/10, ev(ReleaseFailed)).want(Backoff, Observe)
}
