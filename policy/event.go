package policy

import "time"

// EventKind names what happened. The daemon reports the result of every
// action it was given as exactly one event: a store request's within
// reply_max of its send (a later reply does not count: report the failure,
// or for an acquire the unknown outcome), a unit job's when systemd ends it.
type EventKind uint8

// The events. Results arrive in the order the daemon learns them; an event
// the machine does not expect in its state (a start result after the stop
// that replaced it, say) changes nothing.
const (
	// Tick: the Wake instant of the last Output came, or any other
	// moment; every step first acts on the timers that ran out.
	Tick EventKind = iota
	// Observed: the store read Record under the lease key.
	Observed
	// ObserveFailed: the read failed or timed out.
	ObserveFailed
	// AcquireOK: the compare-and-set wrote Record, which this node holds.
	AcquireOK
	// AcquireLost: the record was not the one compared against.
	AcquireLost
	// AcquireUnknown: the request failed or timed out; it may have been
	// applied.
	AcquireUnknown
	// RenewOK: the renewal wrote Record.
	RenewOK
	// RenewLost: the key holds Record, which is not this node's: definitive.
	RenewLost
	// RenewMissing: the key is missing: definitive, treated as lost.
	RenewMissing
	// RenewFailed: the renewal failed or timed out; it may have been applied.
	RenewFailed
	// ReleaseOK: the `released` record was written.
	ReleaseOK
	// ReleaseFailed: it was not, or the outcome is unknown.
	ReleaseFailed
	// UnitStarted: the unit is active.
	UnitStarted
	// UnitStartFailed: the start job failed.
	UnitStartFailed
	// UnitFailed: the unit became inactive or failed while this node ran it.
	UnitFailed
	// UnitStopped: the unit is confirmed inactive; Killed if SIGKILL was needed.
	UnitStopped
	// UnitStopFailed: the unit is still not inactive at the end of stop_wait,
	// SIGKILL included.
	UnitStopFailed
	// HandoffRequested: `unitlease handoff`, or a daemon shutting down.
	HandoffRequested
	// Nudge: a release or acquisition of the lease was published; a
	// standby observes now instead of at its next poll. Observing earlier
	// is always safe; nothing depends on nudges arriving.
	Nudge
	// Ineligible: this node must not run the unit (its protections are
	// defeated): a holder hands the lease off as for a handoff, and the
	// node acquires nothing until Eligible. An acquisition already sent
	// is given back without a start.
	Ineligible
	// Eligible: the node may run the unit again.
	Eligible
	// Withdraw: this node stops competing for the lease (it is drained,
	// or the unit failed here too often): it acquires nothing until
	// Compete, and gives back an acquisition already made whose unit has
	// not started; a unit it runs keeps running (the daemon hands it off
	// if it wants it moved).
	Withdraw
	// Compete: the node competes for the lease again.
	Compete
	// Defer: a standby waits Delay longer than it otherwise would before
	// it acquires (after a release as after the lease span): a more
	// preferred node is ready to take the lease. Zero ends the deferral.
	Defer
	// ReleaseLost: the release found the record not this node's (held or
	// released by another, missing, or garbage): definitive. Record, if
	// the store read one, is what the key holds: a later write of this
	// node's own tenure (Record.Extends) is no loss, and is released.
	ReleaseLost
	numEvents
)

var eventNames = []string{
	"tick", "observed", "observe_failed",
	"acquire_ok", "acquire_lost", "acquire_unknown",
	"renew_ok", "renew_lost", "renew_missing", "renew_failed",
	"release_ok", "release_failed",
	"unit_started", "unit_start_failed", "unit_failed", "unit_stopped", "unit_stop_failed",
	"handoff_requested", "nudge", "ineligible", "eligible",
	"withdraw", "compete", "defer", "release_lost",
}

func (k EventKind) String() string { return name(eventNames, "event", uint8(k)) }

// Event is one input to Step. Record is set for Observed, AcquireOK,
// RenewOK, RenewLost and ReleaseLost; Killed only for UnitStopped.
type Event struct {
	Kind   EventKind
	Record Record
	Killed bool
	// Cause of a HandoffRequested other than a planned handoff: only
	// CauseUnmanaged (the daemon stops managing the lease here).
	Cause Cause
	// To, on a planned HandoffRequested, names the node the released
	// record offers the lease to (Record.Next); "" offers it to any.
	To string
	// Delay, on Defer, is how much longer the standby waits.
	Delay time.Duration
	// Token, on UnitStarted and UnitStartFailed, is the Token of the
	// StartUnit it answers: the result of another tenure's start (one
	// that waited its turn while the lease was lost and acquired again)
	// is dropped, not taken for the current start's. 0 says nothing.
	Token uint64
}

func (e Event) String() string {
	switch e.Kind {
	case Observed, AcquireOK, RenewOK, RenewLost, ReleaseLost:
		return e.Kind.String() + " (" + e.Record.String() + ")"
	case UnitStopped:
		if e.Killed {
			return "unit_stopped (killed)"
		}
	}
	return e.Kind.String()
}
