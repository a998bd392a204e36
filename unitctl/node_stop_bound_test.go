package unitctl

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestNodeStopBoundWithoutDaemon: once the daemon is gone, systemd alone
// stops a managed unit (BindsTo= in the drop-in), and it must do so
// within stop_wait whatever the unit's stop phases are, for a peer may
// start its copy once stop_wait has passed. systemd bounds each phase by
// TimeoutStopSec= on its own: every ExecStop= command, the SIGTERM phase,
// every ExecStopPost= command, the final SIGTERM phase. Two units here
// have an ExecStop= (and an ExecStopPost=) that never returns and a main
// process that ignores SIGTERM, so every phase runs to its timeout; the
// third has only a main process that exits late and a child that ignores
// SIGTERM, which the final SIGTERM phase waits for. The
// daemon's stand-in unit is killed (as a crashed daemon would be), and the
// time is systemd's own: from the unit's ActiveExitTimestampMonotonic
// (systemd began the stop) to its InactiveEnterTimestampMonotonic.
// Not parallel: it reloads systemd (Install), which TestNodeInstall counts.
func TestNodeStopBoundWithoutDaemon(t *testing.T) {
	s := dialNode(t, Options{})
	writeStandInGuard(t)
	cfg := Config{StopWait: testStopWait, Guard: []string{"/run/ul-test/guard"}, DaemonUnit: "ul-bound-daemon.service"}
	const ignoreTERM = "[Service]\nExecStart=/bin/sh -c \"trap '' TERM; exec sleep %d\"\n"
	cases := []struct {
		unit, text string
		markers    []string // the processes of the unit
	}{
		{"ul-bound-stop.service", fmt.Sprintf(ignoreTERM, 86420) + "ExecStop=/bin/sleep 86421\n",
			[]string{"sleep 86420", "sleep 86421"}},
		{"ul-bound-stop-post.service", fmt.Sprintf(ignoreTERM, 86422) + "ExecStop=/bin/sleep 86423\nExecStopPost=/bin/sleep 86424\n",
			[]string{"sleep 86422", "sleep 86423", "sleep 86424"}},
		// KillMode=control-group (the default), no ExecStop=: the main
		// process exits just inside its timeout, a child ignores SIGTERM;
		// systemd sends the child SIGTERM again in the final SIGTERM phase
		// with a timeout of its own.
		{"ul-bound-late-main.service", "[Service]\nExecStart=/bin/sh -c \"(trap '' TERM; exec sleep 86425) & " +
			"trap 'sleep 1.2; exit 0' TERM; while :; do sleep 0.1; done\"\n",
			[]string{"sleep 86425"}},
	}
	// And one whose stop systemd would not bound: refused, read from systemd.
	weak := "ul-bound-weak.service"
	files := map[string]string{cfg.DaemonUnit: plainService, weak: plainService + "FinalKillSignal=SIGQUIT\nTimeoutStopFailureMode=abort\n"}
	for _, c := range cases {
		files[c.unit] = c.text
	}
	installUnits(t, files)
	ctx := ctxFor(t, time.Minute)
	if _, err := s.Validate(ctx, weak, cfg, nil); !errors.Is(err, ErrRefused) ||
		!strings.Contains(err.Error(), "FinalKillSignal=SIGQUIT") || !strings.Contains(err.Error(), "TimeoutStopFailureMode=abort") {
		t.Errorf("Validate(%s) = %v, want a refusal naming FinalKillSignal=SIGQUIT and TimeoutStopFailureMode=abort", weak, err)
	}
	var plans []*Plan
	var units []string
	for _, c := range cases {
		p, err := s.Validate(ctx, c.unit, cfg, nil)
		if err != nil {
			t.Fatalf("Validate(%s): %v", c.unit, err)
		}
		t.Logf("%s: warnings %q", c.unit, p.Warnings)
		plans = append(plans, p)
		units = append(units, c.unit)
	}
	if failed, err := s.Install(ctx, plans); err != nil || len(failed) > 0 {
		t.Fatalf("Install: %v %v", failed, err)
	}
	t.Cleanup(func() {
		if err := s.Uninstall(ctxFor(t, 30*time.Second), cfg, units); err != nil {
			t.Error(err)
		}
	})
	for _, c := range cases {
		holdUnitLoaded(t, c.unit) // its timestamps stay readable
		if err := os.WriteFile("/run/ul-test/hold/"+c.unit, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := s.Start(ctx, c.unit); err != nil {
			t.Fatalf("Start(%s): %v", c.unit, err)
		}
		waitFor(t, 5*time.Second, c.markers[0]+" running", func() bool { return len(processesWith(c.markers[0])) == 1 })
	}

	systemctl(t, "kill", "-s", "KILL", cfg.DaemonUnit) // the daemon dies; nobody calls Stop
	for _, c := range cases {
		st := waitState(t, s, c.unit, 30*time.Second, "inactive", "failed")
		exit := showUint(t, c.unit, "ActiveExitTimestampMonotonic")
		inactive := showUint(t, c.unit, "InactiveEnterTimestampMonotonic")
		took := time.Duration(inactive-exit) * time.Microsecond
		t.Logf("%s: %s (Result=%s) %v after systemd began its stop; TimeoutStopSec=%s per phase; stop_wait %v",
			c.unit, st, show(t, c.unit, "Result"), took, show(t, c.unit, "TimeoutStopUSec"), cfg.StopWait)
		if exit == 0 || inactive < exit {
			t.Errorf("%s: ActiveExitTimestampMonotonic %d, InactiveEnterTimestampMonotonic %d: no stop measured", c.unit, exit, inactive)
		}
		if took > cfg.StopWait {
			t.Errorf("%s: systemd alone took %v to stop it, more than stop_wait %v", c.unit, took, cfg.StopWait)
		}
		left, err := s.unitProcesses(ctx, c.unit)
		if err != nil || len(left) > 0 {
			t.Errorf("%s: processes left once %s: %v %v", c.unit, st, left, err)
		}
		for _, m := range c.markers {
			if pids := processesWith(m); len(pids) > 0 {
				t.Errorf("%s: %s still running: %v", c.unit, m, pids)
			}
		}
	}
}

// showUint reads a numeric property with systemctl show.
func showUint(t *testing.T, unit, prop string) uint64 {
	t.Helper()
	v, err := strconv.ParseUint(show(t, unit, prop), 10, 64)
	if err != nil {
		t.Fatalf("%s of %s: %v", prop, unit, err)
	}
	return v
}
