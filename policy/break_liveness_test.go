package policy

import "testing"

// TestAReleaseFindsItsOwnStopFailedRenewal: a holder whose stop failed
// sends a renewal that writes its record stop_failed; the store commits
// it (version 3) but the reply is lost. The stop, tried again, succeeds
// before the renewal times out, so the release that follows compares
// against version 2 and finds version 3: this node's own record (same
// holder and token, a later version: Record.Extends), not a loss. If the
// node takes that as definitive and leaves, the stop_failed record stays
// behind, which no standby ever acquires over (nor this node): the lease
// is blocked for good (in Redis, for the key's TTL, a day), though the
// units are confirmed inactive. The refinement test's replay
// (TestRefinement-20261206164407-3679.fail) is this sequence.
func TestAReleaseFindsItsOwnStopFailedRenewal(t *testing.T) {
	// specTimings[4], the failing run's: stop_wait below reply_max.
	tm := Timing{Retry: 7 * s, RenewDeadline: 14 * s, StopWait: 1 * s, ReplyMax: 3 * s, PollMin: 1 * s, PollMax: 1 * s, Allowance: s}
	d := leader(t, tm) // holds held("a", 2)
	d.at(3*s, ev(UnitFailed)).want(Stopping, StopUnit)
	d.at(4*s, ev(UnitStopFailed)).want(StopFailed, Renew).journal(JournalStopFailed)
	if r := d.action(0).Record; !r.StopFailed || r.Version != 2 {
		t.Fatalf("renewal %+v, want version 2 written stop_failed", r)
	}
	store := stopFailed("a", 3)                   // committed; the reply is lost
	d.wake().want(Stopping, StopUnit)             // 5s: stop_wait over, the stop tried again
	d.after(s/2, ev(UnitStopped)).want(Releasing) // the renewal is still outstanding
	d.at(7*s, ev(RenewFailed)).want(Releasing, Release)

	// From here a tiny store answers: the node must either release the
	// record it left stop_failed or, failing that, acquire it back.
	for range 1000 {
		switch {
		case d.has(Acquire):
			return
		case d.has(Release):
			if r := d.action(0).Record; r.Holder != store.Holder || r.Token != store.Token || r.Version != store.Version {
				d.after(s/10, with(ReleaseLost, store)) // what a Redis "lost" reply carries
				continue
			}
			d.after(s/10, ev(ReleaseOK)).want(Backoff, Observe).journal(JournalReleased)
			return
		case d.has(Observe):
			d.after(s/10, seen(store))
		default:
			d.wake()
		}
	}
	t.Fatalf("at %v (%v, holding %v): the record %v this node wrote stop_failed is never released, though its unit stopped at 5.5s; no node ever acquires over it",
		d.now, d.m.State(), d.m.holding, store)
}
