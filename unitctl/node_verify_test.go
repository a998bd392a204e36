package unitctl

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"
)

// TestNodeRefusedStartPaths: each way systemd could start a unit at boot
// without the guard, and each stop setting systemd would not bound, is
// refused on its own, as systemd reports it: BindsTo=, OnFailure= and
// OnSuccess= in another loaded unit, D-Bus activation (Type=dbus with
// BusName=), FinalKillSignal= other than SIGKILL and
// TimeoutStopFailureMode=abort. A refusal for a setting of the unit's
// own files names the file and line.
// Not parallel: it reloads systemd, which TestNodeInstall counts.
func TestNodeRefusedStartPaths(t *testing.T) {
	s := dialNode(t, Options{})
	cfg := Config{StopWait: 4 * time.Second, Guard: []string{"/run/ul-test/guard"}, DaemonUnit: "ul-refs-daemon.service"}
	installUnits(t, map[string]string{
		"ul-refs-daemon.service":    plainService,
		"ul-refs-bound.service":     plainService,
		"ul-refs-binder.service":    "[Unit]\nBindsTo=ul-refs-bound.service\n" + plainService,
		"ul-refs-onfail.service":    plainService,
		"ul-refs-failing.service":   "[Unit]\nOnFailure=ul-refs-onfail.service\n" + plainService,
		"ul-refs-onsuccess.service": plainService,
		"ul-refs-succeed.service":   "[Unit]\nOnSuccess=ul-refs-onsuccess.service\n" + plainService,
		"ul-refs-dbus.service":      "[Service]\nType=dbus\nBusName=org.unitlease.RefsTest\nExecStart=/bin/sleep infinity\n",
		"ul-refs-final.service":     plainService + "FinalKillSignal=SIGQUIT\n",
		"ul-refs-abort.service":     plainService + "TimeoutStopFailureMode=abort\n",
	})
	// The units that name another are loaded, as they would be at boot.
	for _, u := range []string{"ul-refs-binder.service", "ul-refs-failing.service", "ul-refs-succeed.service"} {
		holdUnitLoaded(t, u)
	}
	ctx := ctxFor(t, time.Minute)
	for _, tc := range []struct{ unit, want string }{
		{"ul-refs-bound.service", "pulled in by ul-refs-binder.service (BindsTo=)"},
		{"ul-refs-onfail.service", "pulled in by ul-refs-failing.service (OnFailure=)"},
		{"ul-refs-onsuccess.service", "pulled in by ul-refs-succeed.service (OnSuccess=)"},
		{"ul-refs-dbus.service", "BusName=org.unitlease.RefsTest (set in " + unitDir + "/ul-refs-dbus.service:3)"},
		{"ul-refs-final.service", "FinalKillSignal=SIGQUIT (set in " + unitDir + "/ul-refs-final.service:3)"},
		{"ul-refs-abort.service", "TimeoutStopFailureMode=abort (set in " + unitDir + "/ul-refs-abort.service:3)"},
	} {
		_, err := s.Validate(ctx, tc.unit, cfg, nil)
		var re *RefusedError
		if !errors.As(err, &re) || len(re.Reasons) != 1 || !strings.Contains(re.Reasons[0], tc.want) {
			t.Errorf("Validate(%s) = %v, want one refusal containing %q", tc.unit, err, tc.want)
		}
	}
	// Their counterparts without the other unit's dependency are accepted.
	if _, err := s.Validate(ctx, "ul-refs-daemon.service", cfg, nil); err != nil {
		t.Errorf("Validate(ul-refs-daemon.service), a plain service: %v", err)
	}
}

// TestNodeVerifyNamesTheFile: `systemctl edit` writes override.conf,
// which sorts before unitlease's drop-in and cannot beat it while
// systemd applies it; once that drop-in is gone (a reboot empties /run,
// or a file removed by hand, and systemd reloaded), override.conf's
// KillMode=process and empty ExecStartPre= are in effect, and
// verification reports both, naming override.conf and its lines. A
// drop-in that sorts after unitlease's beats it outright: verification
// (Recheck, as the daemon runs it after every reload) and validation
// name that file.
func TestNodeVerifyNamesTheFile(t *testing.T) {
	unit := "ul-vfy.service"
	s, cfg, p := managedUnit(t, unit, "[Service]\nExecStartPre=/bin/true own\nExecStart=/bin/sleep infinity\n")
	ctx := ctxFor(t, time.Minute)
	ours := cfg.DropInPath(unit)
	verify := func() error {
		t.Helper()
		return s.verify(ctx, []*Plan{p}, nil)[unit]
	}
	wantAll := func(what string, err error, wants ...string) {
		t.Helper()
		if !errors.Is(err, ErrDropIn) {
			t.Errorf("%s: %v, want ErrDropIn", what, err)
			return
		}
		for _, w := range wants {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s:\n%v\nwant it to contain %q", what, err, w)
			}
		}
	}

	// override.conf, while unitlease's drop-in is in effect: beaten.
	override := unitDir + "/" + unit + ".d/override.conf"
	writeUnitFiles(t, map[string]string{override: "[Service]\nExecStartPre=\nKillMode=process\n"})
	systemctl(t, "daemon-reload")
	if err := verify(); err != nil {
		t.Errorf("verify with override.conf before the drop-in: %v", err)
	}

	// The drop-in gone, systemd reloaded: override.conf is in effect.
	if err := os.Remove(ours); err != nil {
		t.Fatal(err)
	}
	systemctl(t, "daemon-reload")
	wantAll("verify with override.conf and no drop-in", verify(),
		"systemd does not list "+ours+" among its drop-ins",
		"(emptied in "+override+":2)",
		"KillMode=process (set in "+override+":3), want control-group")
	if _, err := s.Validate(ctx, unit, cfg, nil); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "KillMode=process (set in "+override+":3)") {
		t.Errorf("Validate with override.conf and no drop-in = %v, want a refusal naming %s:3", err, override)
	}
	// Recheck, as the daemon runs it after a reload, writes it again.
	if failed, err := s.Recheck(ctx, []*Plan{p}); err != nil || len(failed) > 0 {
		t.Errorf("Recheck with override.conf: %v %v", failed, err)
	}

	// A drop-in that sorts after unitlease's.
	later := unitDir + "/" + unit + ".d/zzz-local.conf"
	writeUnitFiles(t, map[string]string{later: "[Service]\nExecStartPre=\nExecStartPre=/bin/true early\nFinalKillSignal=SIGQUIT\n"})
	systemctl(t, "daemon-reload")
	failed, err := s.Recheck(ctx, []*Plan{p})
	if err != nil {
		t.Fatal(err)
	}
	wantAll("Recheck with "+later, failed[unit],
		"(emptied in "+later+":2, then set in "+later+":3)",
		"FinalKillSignal=SIGQUIT (set in "+later+":4), want SIGKILL")
	if _, err := s.Validate(ctx, unit, cfg, nil); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "FinalKillSignal=SIGQUIT (set in "+later+":4)") {
		t.Errorf("Validate with %s = %v, want a refusal naming it", later, err)
	}
}
