package unitctl

import (
	"errors"
	"fmt"
	"slices"
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

// TestNodeStartOrder: a group's units come in systemd's order (After=,
// and Before= seen from the other side), not their names'.
func TestNodeStartOrder(t *testing.T) {
	t.Parallel()
	s := dialNode(t, Options{})
	installUnits(t, map[string]string{
		"ul-order-a.service": "[Unit]\nAfter=ul-order-c.service\n[Service]\nExecStart=/bin/sleep infinity\n",
		"ul-order-b.service": "[Unit]\nBefore=ul-order-c.service\n[Service]\nExecStart=/bin/sleep infinity\n",
		"ul-order-c.service": "[Service]\nExecStart=/bin/sleep infinity\n",
	})
	got, err := s.StartOrder(ctxFor(t, 10*time.Second), []string{"ul-order-a.service", "ul-order-b.service", "ul-order-c.service"})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"ul-order-b.service", "ul-order-c.service", "ul-order-a.service"}; !slices.Equal(got, want) {
		t.Fatalf("StartOrder = %v, want %v", got, want)
	}
}
