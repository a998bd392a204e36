package policy

import "testing"

// Attacks on releaseDone's adoption of a ReleaseLost record that Extends
// the held one (a renewal whose reply was lost). Each test says what it
// shows; all of them hold.

// releasing is a leader (held("a", 2)) whose unit failed and stopped: it
// has sent its release of version 2, and nothing else is outstanding.
func releasing(t *testing.T) *driver {
	t.Helper()
	d := leader(t, DefaultTiming())
	d.at(3*s, ev(UnitFailed)).want(Stopping, StopUnit)
	d.after(s, ev(UnitStopped)).want(Releasing, Release)
	if r := d.action(0).Record; r.Version != 2 || r.Token != "a" {
		t.Fatalf("release of %+v, want version 2", r)
	}
	return d
}

func withToken(r Record, token string) Record { r.Token = token; return r }

// TestBreakReleaseLostOnlyOwnLaterRecordsAreAdopted: every record a
// refused release may find other than this tenure's own later write (an
// own release already written, another holder, the same holder with
// another token — its previous or next tenure —, the same or an older
// version, another lease's record, a missing key, a stop_failed record of
// another token) ends the tenure as before: no release is sent over it,
// and the node backs off holding nothing.
func TestBreakReleaseLostOnlyOwnLaterRecordsAreAdopted(t *testing.T) {
	other := held("a", 3)
	other.Other = &OtherLease{Lease: "x", Unit: "u.service"}
	for name, r := range map[string]Record{
		"own release written":       released("a", 3),
		"own release written, next": func() Record { r := released("a", 3); r.Next = "b"; return r }(),
		"another holder":            held("b", 3),
		"another token":             withToken(held("a", 3), "a-previous"),
		"another token stop_failed": withToken(stopFailed("a", 9), "a-previous"),
		"same version":              held("a", 2),
		"older version":             held("a", 1),
		"another lease's record":    other,
		"missing":                   Absent,
		"no token":                  withToken(held("a", 3), ""),
	} {
		t.Run(name, func(t *testing.T) {
			d := releasing(t)
			d.after(s/10, with(ReleaseLost, r)).want(Backoff, Observe)
			if _, holding := d.m.Held(); holding {
				t.Fatalf("still holding after a release lost to %v", r)
			}
		})
	}
}

// TestBreakReleaseLostKeepsThePlannedHandoff: a planned handoff to "b"
// whose release is refused by this node's own later record sends the
// release again over that record and still names "b" (Next), so the
// named node takes it at once and the others age it.
func TestBreakReleaseLostKeepsThePlannedHandoff(t *testing.T) {
	d := leader(t, DefaultTiming())
	d.at(3*s, Event{Kind: HandoffRequested, To: "b"}).want(Stopping, StopUnit)
	d.after(s, ev(UnitStopped)).want(Releasing, Release)
	if r := d.action(0).Record; r.Next != "b" || r.Version != 2 {
		t.Fatalf("first release %+v, want version 2 to b", r)
	}
	later := stopFailed("a", 3)
	d.after(s/10, with(ReleaseLost, later)).want(Releasing, Release)
	if r := d.action(0).Record; r.Next != "b" || r.Version != 3 || r.Token != "a" || r.Holder != "a" {
		t.Fatalf("release sent again as %+v, want version 3 to b", r)
	}
	d.after(s/10, ev(ReleaseOK)).want(Backoff, Observe).journal(JournalReleased)
}

// TestBreakReleaseLostAnswersOnlyAnOutstandingRelease: a ReleaseLost
// carrying an extending record changes nothing when no release is
// outstanding: in Leader with a renewal out, in Standby, and in Releasing
// while the renewal sent before the stop is still out (the release waits
// for it). Once that renewal fails, the release over version 2 goes out,
// and the later record is adopted only as its answer.
func TestBreakReleaseLostAnswersOnlyAnOutstandingRelease(t *testing.T) {
	later := stopFailed("a", 3)

	t.Run("standby", func(t *testing.T) {
		d := booted(t, DefaultTiming())
		before := d.m
		d.at(s, with(ReleaseLost, held("x", 5))).want(Standby)
		if h, _ := d.m.Held(); h != (Record{}) || d.m.req != before.req {
			t.Fatalf("a standby took a stray ReleaseLost: held %+v", h)
		}
	})

	d := leader(t, DefaultTiming())
	for !d.has(Renew) {
		d.wake()
	}
	d.want(Leader, Renew)
	d.after(s/10, with(ReleaseLost, later)).want(Leader)
	if h, holding := d.m.Held(); h.Version != 2 || !holding {
		t.Fatalf("a leader with a renewal out took a stray ReleaseLost: held %+v", h)
	}
	// The unit fails with the renewal (which did commit version 3) out.
	d.after(s/10, ev(UnitFailed)).want(Stopping, StopUnit)
	d.after(s/10, ev(UnitStopped)).want(Releasing)
	d.after(s/10, with(ReleaseLost, later)).want(Releasing)
	if h, _ := d.m.Held(); h.Version != 2 {
		t.Fatalf("a stray ReleaseLost while the renewal is out was adopted: held %+v", h)
	}
	d.after(s/10, ev(RenewFailed)).want(Releasing, Release)
	if r := d.action(0).Record; r.Version != 2 {
		t.Fatalf("release %+v, want version 2", r)
	}
	d.after(s/10, with(ReleaseLost, later)).want(Releasing, Release)
	if r := d.action(0).Record; r.Version != 3 {
		t.Fatalf("release sent again as %+v, want version 3", r)
	}
	// A duplicate of the first answer, after the second release went out,
	// is taken as the second's: harmless, it extends nothing now.
	d.after(s/10, with(ReleaseLost, later)).want(Backoff, Observe)
}

// TestBreakReleaseLostAdoptedStopFailedIsRetried: after adopting its own
// stop_failed record, a release that then fails (unknown outcome) is
// tried again every reply_max over the adopted record (marked still
// holds), never given up, until written.
func TestBreakReleaseLostAdoptedStopFailedIsRetried(t *testing.T) {
	tm := DefaultTiming()
	d := leader(t, tm)
	d.at(3*s, ev(UnitFailed)).want(Stopping, StopUnit)
	d.at(4*s, ev(UnitStopFailed)).want(StopFailed, Renew)
	// Committed as version 3, its reply lost; every renewal after fails.
	d.after(s/10, ev(RenewFailed)).want(StopFailed)
	for d.m.State() != Stopping {
		d.wake()
		if d.has(Renew) {
			d.after(s/10, ev(RenewFailed))
		}
	}
	d.after(s/10, ev(UnitStopped))
	for !d.has(Release) {
		if d.m.req != Renew {
			t.Fatalf("at %v: %v with %v outstanding", d.now, d.m.State(), d.m.req)
		}
		d.after(s/10, ev(RenewFailed))
	}
	if r := d.action(0).Record; r.Version != 2 {
		t.Fatalf("release %+v, want version 2", r)
	}
	d.after(s/10, with(ReleaseLost, stopFailed("a", 3))).want(Releasing, Release)
	for range 5 {
		d.after(s/10, ev(ReleaseFailed)).want(Releasing)
		d.wake().want(Releasing, Release)
		if r := d.action(0).Record; r.Version != 3 {
			t.Fatalf("retry of the release over %+v, want the adopted version 3", r)
		}
	}
	d.after(s/10, ev(ReleaseOK)).want(Backoff, Observe).journal(JournalReleased)
}

// TestBreakReleaseLostChainEndsOnTheFirstRealLoss: adoption needs a
// strictly higher version each time, so only a store that writes this
// tenure's record again between two releases keeps it going (none does:
// no renewal is out while releasing); the first record that does not
// extend ends it. An equal version is no adoption (no livelock on a store
// that keeps answering the same record).
func TestBreakReleaseLostChainEndsOnTheFirstRealLoss(t *testing.T) {
	d := releasing(t)
	for v := uint64(3); v < 40; v++ {
		d.after(s/100, with(ReleaseLost, held("a", v))).want(Releasing, Release)
		if r := d.action(0).Record; r.Version != v {
			t.Fatalf("release sent again as %+v, want version %d", r, v)
		}
	}
	d.after(s/100, with(ReleaseLost, held("a", 39))).want(Backoff, Observe)
}
