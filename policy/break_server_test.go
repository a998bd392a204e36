package policy

import (
	"testing"
	"time"
)

// Attacks on rule 8 (the server identity, Record.Server) at the
// policy level. The probes in this file pass; the scenarios that get
// through are in break_server_open_test.go (build tag breaks).

// handoffRace is the common start: x held the lease (version 10) and
// released it (11); standbys y and z both saw the release happen under
// server before, both sent an acquisition, y won (12, y runs its unit),
// z lost and now ages y's record. Both drivers run on one timeline (the
// same seed: the same poll instants). It returns y (Leader) and z
// (Standby, nothing outstanding).
func handoffRace(t *testing.T, tm Timing, before string) (y, z *driver) {
	t.Helper()
	y, z = booted(t, tm), booted(t, tm)
	for _, d := range []*driver{y, z} {
		d.at(0, seen(on(held("x", 10), before))).want(Standby)
		d.wake().want(Standby, Observe)
		d.after(0, seen(on(released("x", 11), before))).want(Acquiring, Acquire)
	}
	y.after(50*time.Millisecond, with(AcquireOK, on(held("y", 12), before))).want(Starting, StartUnit)
	y.after(50*time.Millisecond, ev(UnitStarted)).want(Leader)
	z.after(50*time.Millisecond, ev(AcquireLost)).want(Standby, Observe)
	z.after(50*time.Millisecond, seen(on(held("y", 12), before))).want(Standby)
	return y, z
}

// yRuns reports the instant up to which y's unit certainly still runs
// when nothing tells it otherwise before: its next renewal is sent then,
// and only its answer (a loss) makes it begin to stop.
func yRuns(y *driver) Instant { return y.out.Wake }

// TestProbeRollbackOfAnAcquisitionUnderANewServerIsAged: the store rolls
// back (restart, restore, failover: a new identity) to x's released
// record, losing y's acquisition while y runs. z, nudged by the
// reconnect, reads the released record under the new server: it must not
// take it at once, and it does not. It acquires only after a lease span,
// long after y's next renewal found x's record and y stopped.
func TestProbeRollbackOfAnAcquisitionUnderANewServerIsAged(t *testing.T) {
	tm := DefaultTiming()
	rt, _ := tm.Resolved()
	y, z := handoffRace(t, tm, "A")
	rollback := z.now + Instant(time.Second)
	z.at(time.Duration(rollback), ev(Nudge)).want(Standby, Observe)
	back := on(released("x", 11), "A2")
	z.after(0, seen(back)).want(Standby)
	z.pollUntil(back, rollback+Instant(rt.LeaseSpan+rt.PollMax))
	if !z.has(Acquire) || z.now < rollback.Add(rt.LeaseSpan) {
		t.Fatalf("z: %v at %v; want an acquisition no sooner than a lease span after %v", z.m.State(), z.now, rollback)
	}
	if z.now <= yRuns(y) {
		t.Fatalf("z acquires at %v, before y's renewal at %v", z.now, yRuns(y))
	}
}

// TestProbeAcquisitionLandingOnAnOlderServerConfirms: z witnessed the
// release under A; its compare-and-set lands on A2 (A restarted with an
// older state holding the same released value, y's acquisition lost):
// z holds and confirms a lease span before it starts, by which time y's
// unit is dead (y's renewal is a loss: A2 holds z's record).
func TestProbeAcquisitionLandingOnAnOlderServerConfirms(t *testing.T) {
	tm := DefaultTiming()
	rt, _ := tm.Resolved()
	z := booted(t, tm)
	z.at(0, seen(on(held("x", 10), "A"))).want(Standby)
	z.wake().want(Standby, Observe)
	z.after(0, seen(on(released("x", 11), "A"))).want(Acquiring, Acquire)
	acquired := z.now
	z.after(50*time.Millisecond, with(AcquireOK, on(held("z", 13), "A2"))).want(Confirming)
	for z.m.State() == Confirming {
		z.wake()
		if z.has(Renew) {
			z.after(10*time.Millisecond, with(RenewOK, on(held("z", z.action(0).Record.Version+1), "A2")))
		}
		if z.now > acquired.Add(3*rt.LeaseSpan) {
			t.Fatal("never starts")
		}
	}
	if z.now.Sub(acquired) < rt.LeaseSpan {
		t.Fatalf("started %v after an acquisition another server answered", z.now.Sub(acquired))
	}
}

// TestProbeLeaderRidesThroughWhileAStandbyAges: the leader's own earlier
// record (its last renewals lost) comes back under a new server; a
// standby ages it from the change, and the leader's renewal over it
// changes it again before the standby could acquire: no takeover while
// the leader is alive and renewing.
func TestProbeLeaderRidesThroughWhileAStandbyAges(t *testing.T) {
	tm := DefaultTiming()
	rt, _ := tm.Resolved()
	z := booted(t, tm)
	v := uint64(10)
	z.at(0, seen(on(held("x", v), "A"))).want(Standby)
	// x renews every retry; the store rolls back to x's version 8 under
	// A2 at 20 s; x's renewal rides through (writes 11 over 8).
	for z.now < Instant(3*rt.LeaseSpan) {
		z.wake()
		if !z.has(Observe) {
			t.Fatalf("z %v at %v", z.m.State(), z.now)
		}
		srv, cur := "A", v+uint64(z.now/Instant(rt.Retry))
		if z.now >= Instant(20*time.Second) {
			srv = "A2"
			cur = 8
			if z.now >= Instant(20*time.Second+rt.Retry) {
				cur = 11 + uint64((z.now-Instant(20*time.Second))/Instant(rt.Retry))
			}
		}
		z.after(0, seen(on(held("x", cur), srv)))
		if z.has(Acquire) {
			t.Fatalf("z acquires x's live record at %v", z.now)
		}
	}
}

// TestProbeStallsAfterRollback quantifies the takeover delays rule 8
// adds (false stalls, no strand): a released record first seen under a
// new server, or by a daemon that just started, is taken a lease span
// later instead of at once; an acquisition a new server answered starts a
// lease span after it; and a holder confirming while the server changes
// at least every lease span never starts (its renewals keep the lease, so
// no other node takes it either: a stall for as long as Redis flaps).
func TestProbeStallsAfterRollback(t *testing.T) {
	tm := DefaultTiming()
	rt, _ := tm.Resolved()
	z := booted(t, tm)
	z.at(0, seen(on(held("x", 10), "A"))).want(Standby)
	z.wake().want(Standby, Observe)
	z.after(0, seen(on(released("x", 11), "A"))).want(Acquiring, Acquire)
	acquired := z.now
	z.after(50*time.Millisecond, with(AcquireOK, on(held("z", 13), "A2"))).want(Confirming)
	flap := rt.LeaseSpan / 2
	for z.now < acquired.Add(10*rt.LeaseSpan) {
		z.wake()
		if z.has(Renew) {
			id := "A" + string(rune('a'+int(z.now.Sub(acquired)/flap)))
			z.after(10*time.Millisecond, with(RenewOK, on(held("z", z.action(0).Record.Version+1), id)))
		}
		if z.m.State() != Confirming {
			t.Logf("started %v after acquiring under a Redis restarting every %v", z.now.Sub(acquired), flap)
			return
		}
	}
	t.Logf("still confirming %v after acquiring, with a Redis that restarts every %v (lease span %v): the unit runs nowhere", z.now.Sub(acquired), flap, rt.LeaseSpan)
}
