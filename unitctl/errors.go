package unitctl

import (
	"errors"
	"fmt"
	"strings"
)

var (
	// ErrStopFailed means stop_wait ran out and the unit is not stopped:
	// after a SIGKILL systemd answered, a listing of its cgroup still
	// shows processes (or systemd refused the stop outright). A systemd
	// slow to answer is waited for, never taken for a failed stop. The
	// caller must not release the lease.
	ErrStopFailed = errors.New("unitctl: unit did not stop even after SIGKILL")

	// ErrStartFailed means the start job did not leave the unit active.
	ErrStartFailed = errors.New("unitctl: unit did not start")

	// ErrRefused means a unit's settings do not let unitlease stop it
	// within its bound; the unit is not managed.
	ErrRefused = errors.New("unitctl: unit refused for management")

	// ErrDropIn means the runtime drop-in did not take effect as written
	// (a later drop-in overrides it, or systemd did not load it).
	ErrDropIn = errors.New("unitctl: drop-in not in effect")

	// ErrClosed is returned by a Systemd that has been closed.
	ErrClosed = errors.New("unitctl: closed")
)

// UnitState is what systemd reports about a unit at one moment.
type UnitState struct {
	ActiveState string // active, reloading, inactive, failed, activating, deactivating
	SubState    string // type specific, e.g. running, stop-sigterm, auto-restart
	JobID       uint32 // the queued job, 0 if none
	JobType     string
}

// Stopped reports whether systemd reports the unit stopped: inactive or
// failed. Processes may still be left in its cgroup: systemd enters failed
// when one survives its final SIGKILL (a task in uninterruptible sleep),
// and a reset-failed turns that into inactive. Stop confirms the cgroup
// empty too.
func (s UnitState) Stopped() bool {
	return s.ActiveState == "inactive" || s.ActiveState == "failed"
}

// Running reports whether the unit is active (or reloading, which is
// active too).
func (s UnitState) Running() bool {
	return s.ActiveState == "active" || s.ActiveState == "reloading"
}

func (s UnitState) String() string {
	if s.ActiveState == "" {
		return "unknown"
	}
	return s.ActiveState + "/" + s.SubState
}

// JobError is a start or stop that did not end in the wanted state. It
// wraps ErrStartFailed or ErrStopFailed, and the cause (a context or D-Bus
// error) if there was one.
type JobError struct {
	Unit      string
	Op        string        // "start" or "stop"
	JobResult string        // systemd's job result (done, canceled, timeout, failed, dependency, skipped), "" if none arrived
	State     UnitState     // the last state seen
	Result    string        // the service's Result= (exit-code, signal, timeout, ...), when known
	Killed    bool          // stop only: SIGKILL was sent to the whole cgroup
	Left      []UnitProcess // stop only: the processes last seen in the unit's cgroup
	Err       error         // ErrStartFailed or ErrStopFailed
	Cause     error
}

func (e *JobError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%v: %s %s: unit %s", e.Err, e.Op, e.Unit, e.State)
	if e.Result != "" {
		fmt.Fprintf(&b, " (result %s)", e.Result)
	}
	if e.JobResult != "" {
		fmt.Fprintf(&b, ", job %s", e.JobResult)
	}
	if e.Op == "stop" {
		fmt.Fprintf(&b, ", SIGKILL sent: %t", e.Killed)
	}
	if len(e.Left) > 0 {
		fmt.Fprintf(&b, ", %d process(es) left in its cgroup: %v", len(e.Left), e.Left)
	}
	if e.Cause != nil {
		fmt.Fprintf(&b, ": %v", e.Cause)
	}
	return b.String()
}

func (e *JobError) Unwrap() []error {
	if e.Cause == nil {
		return []error{e.Err}
	}
	return []error{e.Err, e.Cause}
}

// DropInError says how a unit's drop-in is not in effect as written: one
// problem for each protection that is defeated, naming the file and line
// that set the value systemd applies where a file does. It wraps
// ErrDropIn.
type DropInError struct {
	Unit     string
	Path     string // the drop-in's file
	Applied  bool   // systemd lists Path among the unit's drop-ins
	OnDisk   bool   // Path exists
	Problems []string
}

func (e *DropInError) Error() string {
	return fmt.Sprintf("%v: %s: %s", ErrDropIn, e.Unit, strings.Join(e.Problems, "; "))
}

func (e *DropInError) Unwrap() error { return ErrDropIn }

// RefusedError lists why a unit cannot be managed. It wraps ErrRefused.
type RefusedError struct {
	Unit    string
	Reasons []string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("%v: %s: %s", ErrRefused, e.Unit, strings.Join(e.Reasons, "; "))
}

func (e *RefusedError) Unwrap() error { return ErrRefused }
