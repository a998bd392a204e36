package unitctl

import (
	"context"
	"os/exec"
	"testing"
	"time"
)

// TestNodeServiceWatchdogs: the manager's ServiceWatchdogs property, as
// `systemctl service-watchdogs` sets it.
func TestNodeServiceWatchdogs(t *testing.T) {
	s := dialNode(t, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	set := func(v string) {
		t.Helper()
		if out, err := exec.CommandContext(ctx, "systemctl", "service-watchdogs", v).CombinedOutput(); err != nil {
			t.Fatalf("systemctl service-watchdogs %s: %v: %s", v, err, out)
		}
	}
	t.Cleanup(func() { _ = exec.Command("systemctl", "service-watchdogs", "yes").Run() })
	for _, c := range []struct {
		set  string
		want bool
	}{{"yes", true}, {"no", false}, {"yes", true}} {
		set(c.set)
		on, err := s.ServiceWatchdogs(ctx)
		if err != nil || on != c.want {
			t.Fatalf("after service-watchdogs %s: %t, %v; want %t", c.set, on, err, c.want)
		}
	}
}
