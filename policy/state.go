package policy

// State is the machine's control state.
type State uint8

// The states. A node starts in Stopping (it does not hold the lease, so the
// unit must be confirmed inactive before anything else) and from then on
// moves standby → acquiring → [confirming →] starting → leader →
// stopping → [releasing →] backoff or standby.
const (
	Standby    State = iota // observing the record; may acquire
	Backoff                 // observing, but leaving the lease to a peer for a while
	Acquiring               // the compare-and-set is outstanding
	Confirming              // holds a record written over a missing key; waits before starting
	Starting                // holds the lease; the start job is outstanding
	Leader                  // holds the lease; the unit is active
	Stopping                // the stop job is outstanding
	Releasing               // the unit is inactive; the release is outstanding
	StopFailed              // the unit did not stop even after SIGKILL; never released
)

var stateNames = []string{
	"standby", "backoff", "acquiring", "confirming", "starting", "leader", "stopping", "releasing", "stop_failed",
}

func (s State) String() string { return name(stateNames, "state", uint8(s)) }

// Cause says why the node last began to stop.
type Cause uint8

// The causes.
const (
	CauseNone        Cause = iota
	CauseStartup           // the daemon started: a unit it does not hold is stopped (rule 6)
	CauseRenewFailed       // the renew deadline passed
	CauseLost              // a renewal found the record held elsewhere
	CauseMissing           // a renewal found the key missing
	CauseUnitFailed        // the unit failed while held
	CauseStartFailed       // the start job failed
	CauseHandoff           // a planned handoff
	CauseIneligible        // this node must not run the unit
	CauseUnmanaged         // the lease is no longer annotated on this node (removed, or refused)
	CauseWithdrawn         // the node withdrew (drained, or failed the unit too often) before the unit started
	CauseDisabled          // an operator disabled the lease cluster-wide
)

var causeNames = []string{"none", "startup", "renew_failed", "lost", "missing", "unit_failed", "start_failed", "handoff", "ineligible", "unmanaged", "withdrawn", "disabled"}

func (c Cause) String() string { return name(causeNames, "cause", uint8(c)) }

// backsOff reports whether a node that stopped for c leaves the lease to a
// peer for a while afterwards: when it gave the lease up itself.
func (c Cause) backsOff() bool {
	return c == CauseRenewFailed || c == CauseUnitFailed || c == CauseStartFailed || c == CauseHandoff || c == CauseIneligible || c == CauseUnmanaged || c == CauseWithdrawn || c == CauseDisabled
}
