package policy

import "iter"

// ActionKind names what the daemon must do. Each action is answered by the
// events listed beside it; at most one store request (Observe, Acquire,
// Renew, Release) and one unit job (StartUnit, StopUnit) are outstanding at
// a time, except that StopUnit may be given while a start is outstanding:
// it replaces it (systemd's "replace" mode), and only its own result ends it.
type ActionKind uint8

// The actions.
const (
	Observe   ActionKind = iota + 1 // read the key: Observed, ObserveFailed
	Acquire                         // compare-and-set over exactly Record: AcquireOK, AcquireLost, AcquireUnknown
	Renew                           // renew Record, this node's: RenewOK, RenewLost, RenewMissing, RenewFailed
	Release                         // write Record as released: ReleaseOK, ReleaseFailed
	StartUnit                       // start and wait for active: UnitStarted, UnitStartFailed
	StopUnit                        // stop, SIGKILL inside stop_wait, confirm inactive: UnitStopped, UnitStopFailed
)

var actionNames = []string{"none", "observe", "acquire", "renew", "release", "start_unit", "stop_unit"}

func (k ActionKind) String() string { return name(actionNames, "action", uint8(k)) }

// Action is one thing to do. Record is the record to compare against:
// the one observed for Acquire, this node's own for Renew and Release.
//
// By, for a StopUnit, is the instant by which systemd must have the stop
// job: the renew deadline of the lease the node holds or held. The lease
// span counts the stop_wait from then (give or take the allowance for a
// daemon that acts late), so a stop that systemd has not taken by then is
// a daemon that did not act in time, like a step that did not run: the
// watchdog's to find. It is zero for a stop that no deadline bounds: the
// first stop of a new daemon, and a stop tried again after a failed one.
type Action struct {
	Kind   ActionKind
	Record Record
	By     Instant
	// Token, on StartUnit, is the fencing token of the tenure: the
	// version the node acquired the lease at. It is fixed while the node
	// holds the lease, and every later acquisition, by any node, writes a
	// larger version (at least the Redis server's clock in milliseconds,
	// and above the record it replaces).
	Token uint64
}

func (a Action) String() string {
	switch a.Kind {
	case Acquire, Renew, Release:
		return a.Kind.String() + " (" + a.Record.String() + ")"
	}
	return a.Kind.String()
}

// Journal is the journal event (UNITLEASE_EVENT) a step stands
// for, or "" for a step that is not one.
type Journal string

// The journal events a step may report.
const (
	JournalAcquired    Journal = "acquired"     // this node holds the lease
	JournalStarted     Journal = "started"      // the unit is active here
	JournalRenewFailed Journal = "renew_failed" // the renew deadline passed: stopping
	JournalLost        Journal = "lost"         // the lease is held elsewhere, or the key is missing
	JournalStopping    Journal = "stopping"     // stopping for another reason: Cause says which
	JournalStopped     Journal = "stopped"      // the unit is confirmed inactive
	JournalKilled      Journal = "killed"       // ...and SIGKILL was needed
	JournalStopFailed  Journal = "stop_failed"  // not inactive even after SIGKILL: never released
	JournalReleased    Journal = "released"     // the `released` record is written
	JournalRefused     Journal = "refused"      // a handoff on a node that does not run the unit
	JournalUnitFailed  Journal = "unit_failed"  // the unit failed while this node held the lease
)

// maxActions bounds the actions of one step: it starts at most one unit
// job and one store request. The third slot is spare; filling past it
// panics, which the refinement test would report.
const maxActions = 3

// Output is what one step asks of the daemon.
type Output struct {
	actions [maxActions]Action
	n       uint8
	// Wake is when the machine next wants a Tick (Never: not until an
	// event). Calling Step earlier or later is safe; later only delays.
	Wake Instant
	// Journal is the journal event this step stands for, if any.
	Journal Journal
}

// Actions yields the actions in the order the daemon should start them.
func (o *Output) Actions() iter.Seq[Action] {
	return func(yield func(Action) bool) {
		for _, a := range o.actions[:o.n] {
			if !yield(a) {
				return
			}
		}
	}
}

// Len is the number of actions.
func (o *Output) Len() int { return int(o.n) }

// At returns action i, 0 <= i < Len.
func (o *Output) At(i int) Action { return o.actions[:o.n][i] }

func (o *Output) do(k ActionKind, r Record) {
	o.actions[o.n] = Action{Kind: k, Record: r} // panics past maxActions: a bug
	o.n++
}

// note keeps the first journal event of a step: the one that caused the rest.
func (o *Output) note(j Journal) {
	if o.Journal == "" {
		o.Journal = j
	}
}
