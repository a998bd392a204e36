package unitctl

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// TestNodeStartFailureReturnsError: a unit that fails to start returns a
// *JobError with systemd's job result and the service's Result=.
func TestNodeStartFailureReturnsError(t *testing.T) {
	t.Parallel()
	s := dialNode(t, Options{})
	cases := []struct {
		name, service     string
		jobResult, result string
	}{
		{"ExecStart fails", "Type=oneshot\nRemainAfterExit=yes\nExecStart=/bin/false\n", "failed", "exit-code"},
		{"ExecStartPre fails", "ExecStartPre=/bin/sh -c 'exit 3'\nExecStart=/bin/sleep infinity\n", "failed", "exit-code"},
		{"executable missing", "Type=exec\nExecStart=/nonexistent/daemon\n", "failed", "exit-code"},
		{"start times out", "Type=notify\nExecStart=/bin/sleep infinity\nTimeoutStartSec=300ms\n", "failed", "timeout"},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			unit := fmt.Sprintf("ul-start-fail-%d.service", i)
			installUnits(t, map[string]string{unit: "[Service]\n" + c.service})
			err := s.Start(ctxFor(t, 10*time.Second), unit)
			var je *JobError
			if !errors.Is(err, ErrStartFailed) || !errors.As(err, &je) {
				t.Fatalf("Start = %v, want ErrStartFailed", err)
			}
			t.Logf("Start: %v", err)
			if je.JobResult != c.jobResult || je.Result != c.result || je.State.ActiveState != "failed" {
				t.Errorf("job %q, result %q, state %s; want job %q, result %q, failed", je.JobResult, je.Result, je.State, c.jobResult, c.result)
			}
		})
	}
}
