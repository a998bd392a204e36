package policy

import "testing"

// TestAnotherTenuresStartResultIsDropped: a start that waited its turn
// while the lease was lost, stopped and acquired again answers after the
// new tenure's start was asked: its failure (the guard refused it) is not
// taken for the new start's (no unit_failed, no stop, no release), nor is
// its success; the new start's own result is.
func TestAnotherTenuresStartResultIsDropped(t *testing.T) {
	for _, stale := range []EventKind{UnitStartFailed, UnitStarted} {
		d := booted(t, DefaultTiming())
		d.at(0, seen(released("b", 1))).want(Acquiring, Acquire)
		d.at(s, with(AcquireOK, held("a", 2))).want(Starting, StartUnit).journal(JournalAcquired)
		first := d.action(0).Token
		d.wake().want(Starting, Renew)
		d.after(s/10, with(RenewLost, held("b", 3))).want(Stopping, StopUnit).journal(JournalLost)
		d.after(s, ev(UnitStopped)).want(Standby, Observe).journal(JournalStopped)
		d.after(0, seen(released("b", 4))).want(Acquiring, Acquire)
		d.after(s, with(AcquireOK, held("a", 5))).want(Starting, StartUnit).journal(JournalAcquired)
		second := d.action(0).Token
		if first == second || first == 0 || second == 0 {
			t.Fatalf("tokens %d and %d: want two tenures' own", first, second)
		}
		d.after(s, Event{Kind: stale, Token: first}).want(Starting).journal("")
		d.after(s, Event{Kind: UnitStarted, Token: second}).want(Leader).journal(JournalStarted)
	}
}
