package policy

import (
	"testing"
)

// Tests of the released shortcut: a released record is taken at once
// only when the standby witnessed its holder's release (same holder and
// token; `unitlease clear` writes it so). Each failed before clear kept
// the holder's name and token and the shortcut stopped trusting any
// release after a stop_failed record.

// resetRecord is what `unitlease reset` (Store.Overwrite) writes: a
// released record held by the operator's node, with a fresh token, at a
// version of the server's clock in milliseconds, lease_span_ms 0.
func resetRecord(operator string) Record {
	return Record{Present: true, Holder: operator, Token: "0123456789abcdef0123456789abcdef",
		Version: 1796105101042, Released: true, LeaseSpan: 0,
		Raw: `{"holder":"` + operator + `","version":1796105101042,"token":"0123456789abcdef0123456789abcdef","state":"released","lease_span_ms":0}`}
}

// TestBreakRule8AResetAfterAStopFailedRecordIsTakenAtOnce: see() let a
// released record of any holder and token through at once when the
// previous value the standby saw was stop_failed, meant for `unitlease
// clear`. But `unitlease reset` writes a released record
// too, and the supervisor turns an observation of garbage into
// ObserveFailed (internal/supervisor/actions.go observe), so the policy
// never sees the garbage between the stop_failed record and the reset:
// p is still the stop_failed record, and the reset's record passes as a
// witnessed clear.
//
// Two ways this starts a second copy:
//
//  1. Node b's stop failed (its units may still run: the stop_failed
//     record is the only barrier). Something writes garbage over the
//     key; b's renewal gets the garbage reply, which the supervisor maps
//     to RenewLost, so b stops renewing and holds nothing. The operator,
//     seeing garbage, runs `unitlease reset` (which only checks that the
//     value is garbage). Every standby that saw b's stop_failed record
//     acquires at once and starts while b's units still run.
//  2. b's stop failed; the operator clears it (legitimately); node c
//     acquires and starts its unit; the standby y polls nothing in
//     between (or its polls fail); garbage lands on the key; c's renewal
//     gets the garbage and c begins to stop (its unit runs until the stop
//     completes, possibly up to stop_wait and beyond if the stop hangs);
//     the operator resets. y's p is still b's stop_failed record: it
//     acquires the reset's record at once.
func TestBreakRule8AResetAfterAStopFailedRecordIsTakenAtOnce(t *testing.T) {
	tm := DefaultTiming()
	rt, _ := tm.Resolved()
	y := booted(t, tm)
	y.at(0, seen(on(stopFailed("b", 100), "A"))).want(Standby)
	// Garbage lands on the key: the supervisor reports ObserveFailed, not
	// an Observed value.
	y.wake().want(Standby, Observe)
	y.after(0, ev(ObserveFailed)).want(Standby)
	// The operator resets the garbage.
	reset := on(resetRecord("ops"), "A")
	y.wake().want(Standby, Observe)
	y.after(0, seen(reset))
	at := y.now
	if y.m.State() == Acquiring {
		t.Fatalf("at %v: the reset's released record (holder %q, a fresh token, version %d) right after b's stop_failed record "+
			"(version 100) was acquired at once, as if it were `unitlease clear`; a reset must be aged for the lease span %v "+
			"(and b's units may still run: its stop failed)", at, reset.Holder, reset.Version, rt.LeaseSpan)
	}
}

// TestBreakRule8AResetOverAClearedThenReacquiredLease: scenario 2 above,
// with the node that ran in between (c) as a second machine: the standby
// y starts while c's unit is still running.
func TestBreakRule8AResetOverAClearedThenReacquiredLease(t *testing.T) {
	tm := DefaultTiming()
	y := booted(t, tm)
	y.at(0, seen(on(stopFailed("b", 100), "A"))).want(Standby)

	// Unseen by y: clear, then c acquires and starts (c is the `leader`
	// driver: it holds from instant 0 with its unit active).
	c := leader(t, tm)
	// Garbage; y's polls fail.
	for range 3 {
		y.wake().want(Standby, Observe)
		y.after(0, ev(ObserveFailed)).want(Standby)
	}
	// c's next renewal gets the garbage (the supervisor: RenewLost with
	// the raw value): c begins to stop. Its unit is still active until
	// the stop job completes.
	for !c.has(Renew) {
		c.wake()
	}
	c.after(0, with(RenewLost, Record{Present: true, Raw: "junk"})).want(Stopping, StopUnit)

	// The operator resets; y's next poll reads it.
	y.wake().want(Standby, Observe)
	y.after(0, seen(on(resetRecord("ops"), "A")))
	if y.m.State() != Acquiring {
		return
	}
	y.after(0, with(AcquireOK, on(held("y", 1796105101043), "A"))).want(Starting, StartUnit)
	t.Fatalf("y starts its unit (state %v) while c's stop is still outstanding (c %v): y took the reset's record at once because "+
		"the last value it saw was b's stop_failed record", y.m.State(), c.m.State())
}
