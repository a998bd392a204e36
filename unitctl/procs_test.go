package unitctl

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// TestJobErrorLeftProcesses: a stop that gave up with processes left in
// the cgroup of a unit systemd reports failed says so, and still wraps
// ErrStopFailed.
func TestJobErrorLeftProcesses(t *testing.T) {
	err := error(&JobError{
		Unit: "vpn.service", Op: "stop", JobResult: "done",
		State:  UnitState{ActiveState: "failed", SubState: "failed"},
		Killed: true, Left: []UnitProcess{{Cgroup: "/system.slice/vpn.service", PID: 631, Command: "sleep 86405"}},
		Err: ErrStopFailed, Cause: context.DeadlineExceeded,
	})
	if !errors.Is(err, ErrStopFailed) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("%v does not wrap ErrStopFailed and the cause", err)
	}
	want := "unit failed/failed, job done, SIGKILL sent: true, 1 process(es) left in its cgroup: [631 (sleep 86405)]: context deadline exceeded"
	if !strings.Contains(err.Error(), want) {
		t.Errorf("error %q, want it to contain %q", err, want)
	}
}
