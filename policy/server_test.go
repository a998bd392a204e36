package policy

import "testing"

// on is r as answered by the server with identity id.
func on(r Record, id string) Record {
	r.Server = id
	return r
}

// pollUntil answers every observation with r until the machine asks for
// something else than an observation or limit passes; it returns the
// instant of the step that did.
func (d *driver) pollUntil(r Record, limit Instant) {
	d.t.Helper()
	for d.now <= limit {
		d.wake()
		if d.has(Observe) {
			d.after(0, seen(r))
		}
		if d.has(Acquire) {
			return
		}
	}
}

// TestAWitnessedReleaseIsTakenAtOnce: a standby that saw the record held,
// then released, from the same server, acquires at once (a planned
// handoff stays quick).
func TestAWitnessedReleaseIsTakenAtOnce(t *testing.T) {
	d := booted(t, DefaultTiming())
	d.at(0, seen(on(held("b", 4), "A"))).want(Standby)
	d.wake().want(Standby, Observe)
	d.after(0, seen(on(released("b", 5), "A"))).want(Acquiring, Acquire)
}

// TestAFirstReleaseIsAged: the first value a standby reads may be an older
// state a restored or restarted Redis brought back (the holder's
// successor's acquisition lost, the successor still running until its
// next renewal finds out): a released record it did not see being
// released is aged for the lease span like any other value.
func TestAFirstReleaseIsAged(t *testing.T) {
	tm := DefaultTiming()
	rt, _ := tm.Resolved()
	d := booted(t, tm)
	r := on(released("b", 5), "A")
	d.at(0, seen(r)).want(Standby)
	d.pollUntil(r, Instant(rt.LeaseSpan)+Instant(rt.PollMax))
	if !d.has(Acquire) {
		t.Fatalf("at %v: a released record aged past the lease span %v is not acquired", d.now, rt.LeaseSpan)
	}
	if d.now < Instant(rt.LeaseSpan) {
		t.Fatalf("acquired a released record first seen at 0 at %v, before the lease span %v", d.now, rt.LeaseSpan)
	}
}

// TestAnotherServerRestartsTheAge: the same record from another server
// (a restart, a restore, a failover) starts its age again, and a release
// it then shows is not taken at once; a change under the new server is
// witnessed again.
func TestAnotherServerRestartsTheAge(t *testing.T) {
	tm := DefaultTiming()
	rt, _ := tm.Resolved()
	d := booted(t, tm)
	h := on(held("b", 4), "A")
	d.at(0, seen(h)).want(Standby)
	// Almost a lease span under A, then B answers with the same value.
	moveAt := Instant(rt.LeaseSpan) - Instant(rt.PollMax)
	d.pollUntil(h, moveAt)
	if d.has(Acquire) {
		t.Fatalf("acquired at %v, before the lease span", d.now)
	}
	hb := on(held("b", 4), "B")
	d.pollUntil(hb, d.now) // one observation answered by B
	moved := d.now
	d.pollUntil(hb, moved+Instant(rt.LeaseSpan)+Instant(rt.PollMax))
	if d.now.Sub(moved) < rt.LeaseSpan {
		t.Fatalf("the value seen from server A since 0 and from B since %v was acquired at %v: its age did not start again", moved, d.now)
	}

	// A release shown first by a new server is aged, a change under it
	// is witnessed.
	d = booted(t, tm)
	d.at(0, seen(on(held("b", 4), "A"))).want(Standby)
	d.wake().want(Standby, Observe)
	d.after(0, seen(on(released("b", 5), "B"))).want(Standby)
	d.wake().want(Standby, Observe)
	d.after(0, seen(on(held("c", 6), "B"))).want(Standby)
	d.wake().want(Standby, Observe)
	d.after(0, seen(on(released("c", 7), "B"))).want(Acquiring, Acquire)
}

// TestAnAcquisitionFromAnotherServerWaitsALeaseSpan: the node aged a
// record under one server, and another server took its compare-and-set
// (the older state it holds had the same value): the node holds the
// lease, renews, and starts only after a lease span of renewals.
func TestAnAcquisitionFromAnotherServerWaitsALeaseSpan(t *testing.T) {
	tm := DefaultTiming()
	rt, _ := tm.Resolved()
	d := booted(t, tm)
	d.at(0, seen(on(held("b", 4), "A"))).want(Standby)
	d.wake().want(Standby, Observe)
	d.after(0, seen(on(released("b", 5), "A"))).want(Acquiring, Acquire)
	acquired := d.now
	d.after(0, with(AcquireOK, on(held("a", 6), "B"))).want(Confirming).journal(JournalAcquired)
	for d.m.State() == Confirming {
		d.wake()
		if d.has(Renew) {
			d.after(0, with(RenewOK, on(held("a", d.action(0).Record.Version+1), "B")))
		}
		if d.now.Sub(acquired) > 2*rt.LeaseSpan {
			t.Fatalf("still confirming at %v", d.now)
		}
	}
	if d.m.State() != Starting || d.now.Sub(acquired) < rt.LeaseSpan {
		t.Fatalf("%v at %v, %v after an acquisition another server answered: want Starting, no sooner than the lease span %v",
			d.m.State(), d.now, d.now.Sub(acquired), rt.LeaseSpan)
	}
}

// TestAnIdentifiedStoresUnnamedAnswerIsUntrusted: with a store that names
// the server of every answer (Config.Identified), an answer without a
// name could come from any server, each time another: a release it shows
// is not witnessed, its value never ages (redislease reports such an
// answer as an error instead), and an acquisition it answers waits a
// lease span before starting. A store that never names one (a test's
// fake) keeps the shortcut.
func TestAnIdentifiedStoresUnnamedAnswerIsUntrusted(t *testing.T) {
	tm := DefaultTiming()
	rt, _ := tm.Resolved()
	d := &driver{t: t}
	var err error
	if d.m, err = New(Config{Timing: tm, Seed: 1, Identified: true}); err != nil {
		t.Fatal(err)
	}
	d.at(0, ev(Tick)).want(Stopping, StopUnit)
	d.at(0, ev(UnitStopped)).want(Standby, Observe)
	d.at(0, seen(on(held("b", 4), "A"))).want(Standby)
	d.wake().want(Standby, Observe)
	d.after(0, seen(released("b", 5))).want(Standby)
	d.pollUntil(released("b", 5), Instant(3*rt.LeaseSpan))
	if d.has(Acquire) {
		t.Fatalf("at %v: acquired over a value only unnamed answers showed", d.now)
	}
	// Named again, it ages; the unnamed answer to the acquisition waits.
	d.pollUntil(on(released("b", 5), "A"), d.now+Instant(2*rt.LeaseSpan))
	if !d.has(Acquire) {
		t.Fatalf("at %v: never acquired", d.now)
	}
	d.after(0, with(AcquireOK, held("a", 6))).want(Confirming).journal(JournalAcquired)

	legacy := booted(t, tm)
	legacy.at(0, seen(held("b", 4))).want(Standby)
	legacy.wake().want(Standby, Observe)
	legacy.after(0, seen(released("b", 5))).want(Acquiring, Acquire)
}

// TestAResetIsNotARelease: `unitlease reset` replaces garbage (or a
// missing key) with a released record. Nobody released a lease there:
// the holder whose renewals failed on the garbage may run its unit until
// its own deadline. A standby that saw the garbage (or the holder's
// record before it: the garbage may come and go between two polls),
// then the released record, from the same server, ages the record for a
// lease span.
func TestAResetIsNotARelease(t *testing.T) {
	tm := DefaultTiming()
	rt, _ := tm.Resolved()
	for _, before := range []Record{on(Record{Present: true, Raw: "junk"}, "A"), on(Absent, "A"), on(held("a", 4), "A")} {
		d := booted(t, tm)
		d.at(0, seen(before)).want(Standby)
		d.wake().want(Standby, Observe)
		reset := on(released("ops", 1796105101042), "A")
		d.after(0, seen(reset)).want(Standby)
		at := d.now
		d.pollUntil(reset, at+Instant(rt.LeaseSpan)+Instant(rt.PollMax))
		if !d.has(Acquire) || d.now.Sub(at) < rt.LeaseSpan {
			t.Fatalf("after %q: the reset's released record first seen at %v acquired at %v (has acquire %t), before a lease span %v",
				before.Raw, at, d.now, d.has(Acquire), rt.LeaseSpan)
		}
	}
}
