package unitctl

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
)

// standInGuard plays `unitlease guard UNIT` (which arrives with the
// daemon): it logs its call and admits UNIT only if a hold file exists.
const standInGuard = `#!/bin/sh
echo "guard $1" >> /run/ul-test/start.log
test -e "/run/ul-test/hold/$1"
`

// TestNodeInstall: validation refuses what cannot be stopped in time, the
// drop-ins of a batch cost one daemon-reload, the guard runs before the
// unit's own ExecStartPre= and refuses a start without the lease, the
// stop timeout is pinned within stop_wait, killing the daemon's unit stops
// the managed units (rule 6), and uninstalling restores the units with
// one more reload.
func TestNodeInstall(t *testing.T) {
	s := dialNode(t, Options{})
	writeStandInGuard(t)
	cfg := Config{StopWait: 4 * time.Second, Guard: []string{"/run/ul-test/guard"}, DaemonUnit: "ul-inst-daemon.service"}
	installUnits(t, map[string]string{
		"ul-inst-daemon.service": plainService,
		"ul-inst-a.service": "[Service]\nExecStartPre=-/bin/sh -c 'echo own %n >> /run/ul-test/start.log'\n" +
			"ExecStartPre=/bin/true \"50%% done\"\nExecStart=/bin/sleep infinity\n",
		"ul-inst-b.service":       plainService + "TimeoutStopSec=90\n",
		"ul-inst-c.service":       plainService + "KillMode=mixed\n",
		"ul-inst-process.service": plainService + "KillMode=process\n",
	})
	managed := []string{"ul-inst-a.service", "ul-inst-b.service", "ul-inst-c.service"}
	ctx := ctxFor(t, time.Minute)

	_, err := s.Validate(ctx, "ul-inst-process.service", cfg, nil)
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "KillMode=process") {
		t.Errorf("Validate(KillMode=process) = %v, want a refusal naming KillMode=process", err)
	}
	var plans []*Plan
	for _, u := range managed {
		p, err := s.Validate(ctx, u, cfg, nil)
		if err != nil {
			t.Fatalf("Validate(%s): %v", u, err)
		}
		t.Logf("%s: warnings %q", u, p.Warnings)
		plans = append(plans, p)
	}
	if w := plans[1].Warnings; len(w) != 1 || !strings.Contains(w[0], "TimeoutStopSec=1m30s exceeds 1.625s: systemd applies it to each of the 2 phases") {
		t.Errorf("warnings for TimeoutStopSec=90: %q", w)
	}

	reloads := countReloads(t)
	var inEffect atomic.Int32
	for _, p := range plans {
		p.InEffect = func() { inEffect.Add(1) }
	}
	failed, err := s.Install(ctx, plans)
	if err != nil || len(failed) > 0 {
		t.Fatalf("Install: %v %v", failed, err)
	}
	if n := inEffect.Load(); n != int32(len(plans)) {
		t.Errorf("Install of %d units checked in effect: InEffect called %d times, want once each", len(plans), n)
	}
	if n := reloads(); n != 1 {
		t.Errorf("Install of %d units: %d daemon-reloads, want 1", len(plans), n)
	}
	t.Logf("drop-in of ul-inst-a.service:\n%s", plans[0].DropIn)
	// Two phases (KillMode=control-group: the SIGTERM and the final
	// SIGTERM phase) of the 3.5 s budget.
	if got := show(t, "ul-inst-b.service", "TimeoutStopUSec"); got != "1.625000s" && got != "1.625s" {
		t.Errorf("TimeoutStopUSec of ul-inst-b.service with the drop-in: %s", got)
	}

	checkGuard(t, s)
	checkBoundToDaemon(t, s, cfg.DaemonUnit)

	reloads = countReloads(t)
	if err := s.Uninstall(ctx, cfg, managed); err != nil {
		t.Fatal(err)
	}
	if n := reloads(); n != 1 {
		t.Errorf("Uninstall of %d units: %d daemon-reloads, want 1", len(managed), n)
	}
	if got := show(t, "ul-inst-b.service", "TimeoutStopUSec"); got != "1min 30s" {
		t.Errorf("TimeoutStopUSec of ul-inst-b.service after Uninstall: %s", got)
	}
	if _, err := os.Stat(cfg.DropInPath("ul-inst-a.service")); !os.IsNotExist(err) {
		t.Errorf("drop-in still there: %v", err)
	}
	if pre := show(t, "ul-inst-a.service", "ExecStartPre"); strings.Contains(pre, "/run/ul-test/guard") {
		t.Errorf("guard still in ExecStartPre after Uninstall: %s", pre)
	}
}

// TestNodeInstallOverride: an administrator's `systemctl edit UNIT` of a
// managed unit writes /etc/systemd/system/UNIT.d/override.conf, which may
// empty ExecStartPre= and set KillMode=process. systemd applies drop-ins
// in file-name order across directories, so unitlease's drop-in must sort
// after it: the guard stays first and KillMode= and TimeoutStopSec= stay
// pinned, and Install's verification still passes.
func TestNodeInstallOverride(t *testing.T) {
	unit := "ul-ovr.service"
	s, cfg, p := managedUnit(t, unit, "[Service]\nExecStartPre=/bin/true own\nExecStart=/bin/sleep infinity\n")
	ctx := ctxFor(t, time.Minute)

	override := unitDir + "/" + unit + ".d/override.conf"
	writeUnitFiles(t, map[string]string{override: "[Service]\nExecStartPre=\nKillMode=process\nTimeoutStopSec=5min\n"})
	systemctl(t, "daemon-reload") // as systemctl edit does

	st, err := s.readSettings(ctx, unit)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("drop-ins in the order systemd applies them: %q", st.DropInPaths)
	if i, j := slices.Index(st.DropInPaths, override), slices.Index(st.DropInPaths, cfg.DropInPath(unit)); i < 0 || j < i {
		t.Errorf("DropInPaths %q: want %s, then %s", st.DropInPaths, override, cfg.DropInPath(unit))
	}
	if len(st.ExecStartPre) == 0 || !sameExec(st.ExecStartPre[0], p.guardCommand()) {
		t.Errorf("ExecStartPre with override.conf is %s, want the guard first", describeExecs(st.ExecStartPre))
	}
	if st.KillMode != "control-group" {
		t.Errorf("KillMode with override.conf is %s, want the pinned control-group", st.KillMode)
	}
	if limit := uint64(cfg.StopTimeout() / time.Microsecond); st.TimeoutStopUSec > limit {
		t.Errorf("TimeoutStopUSec with override.conf is %d, want at most %d", st.TimeoutStopUSec, limit)
	}
	if failed, err := s.Install(ctx, []*Plan{p}); err != nil || len(failed) > 0 {
		t.Errorf("Install again with override.conf: %v %v", failed, err)
	}
}

// TestNodeInstallOldDropIn: after an upgrade the drop-in an earlier version
// wrote under an old name is still in /run. Validate sees through it,
// Install replaces it with one reload, and Uninstall removes it too when
// it is all that is left.
func TestNodeInstallOldDropIn(t *testing.T) {
	s := dialNode(t, Options{})
	cfg := Config{StopWait: 4 * time.Second, Guard: []string{"/run/ul-test/guard"}, DaemonUnit: "ul-old-daemon.service"}
	unit := "ul-old.service"
	installUnits(t, map[string]string{
		"ul-old-daemon.service": plainService,
		unit:                    "[Service]\nExecStartPre=/bin/true own\nExecStart=/bin/sleep infinity\n",
	})
	ctx := ctxFor(t, time.Minute)
	old := cfg.oldDropInPaths(unit)[0]
	t.Cleanup(func() {
		os.Remove(old)
		os.Remove(cfg.DropInPath(unit))
		os.Remove(filepath.Dir(old))
		systemctlQuiet("daemon-reload")
	})
	p, err := s.Validate(ctx, unit, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	plantOld := func() {
		t.Helper()
		if err := writeAtomic(old, p.DropIn); err != nil {
			t.Fatal(err)
		}
		systemctl(t, "daemon-reload")
	}
	plantOld()

	p, err = s.Validate(ctx, unit, cfg, nil)
	if err != nil {
		t.Fatalf("Validate with the old drop-in: %v", err)
	}
	if len(p.ownPre) != 1 || p.ownPre[0].Path != "/bin/true" {
		t.Errorf("own ExecStartPre= with the old drop-in: %s, want only /bin/true", describeExecs(p.ownPre))
	}
	reloads := countReloads(t)
	if failed, err := s.Install(ctx, []*Plan{p}); err != nil || len(failed) > 0 {
		t.Fatalf("Install: %v %v", failed, err)
	}
	if n := reloads(); n != 1 {
		t.Errorf("Install replacing the old drop-in: %d daemon-reloads, want 1", n)
	}
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Errorf("old drop-in still there after Install: %v", err)
	}
	st, err := s.readSettings(ctx, unit)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(st.DropInPaths, []string{cfg.DropInPath(unit)}) {
		t.Errorf("DropInPaths after Install: %q, want only %s", st.DropInPaths, cfg.DropInPath(unit))
	}

	// A unit unmanaged while only the old drop-in is there.
	if err := os.Remove(cfg.DropInPath(unit)); err != nil {
		t.Fatal(err)
	}
	plantOld()
	if err := s.Uninstall(ctx, cfg, []string{unit}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Dir(old)); !os.IsNotExist(err) {
		t.Errorf("drop-in directory still there after Uninstall: %v", err)
	}
	if pre := show(t, unit, "ExecStartPre"); strings.Contains(pre, "/run/ul-test/guard") {
		t.Errorf("guard still in ExecStartPre after Uninstall: %s", pre)
	}
}

func writeStandInGuard(t *testing.T) {
	if err := os.MkdirAll("/run/ul-test/hold", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile("/run/ul-test/guard", []byte(standInGuard), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll("/run/ul-test") })
}

// checkGuard: without the hold file the start fails in the guard, before
// the unit's own ExecStartPre= runs; with it the unit starts, guard first.
func checkGuard(t *testing.T, s *Systemd) {
	unit := "ul-inst-a.service"
	ctx := ctxFor(t, 30*time.Second)
	err := s.Start(ctx, unit)
	if !errors.Is(err, ErrStartFailed) {
		t.Fatalf("Start without the lease = %v, want ErrStartFailed", err)
	}
	if got := readLog(t); got != "guard "+unit {
		t.Errorf("start log without the lease: %q, want only the guard", got)
	}
	os.Remove("/run/ul-test/start.log")
	if err := os.WriteFile("/run/ul-test/hold/"+unit, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx, unit); err != nil {
		t.Fatalf("Start with the lease: %v", err)
	}
	if got := readLog(t); got != "guard "+unit+"\nown "+unit {
		t.Errorf("start log with the lease: %q, want the guard, then the unit's own ExecStartPre=", got)
	}
}

// checkBoundToDaemon: SIGKILL to the daemon's unit stops the managed unit.
func checkBoundToDaemon(t *testing.T, s *Systemd, daemon string) {
	unit := "ul-inst-a.service"
	if st := show(t, daemon, "ActiveState"); st != "active" {
		t.Fatalf("%s is %s: starting %s should have started it (BindsTo=)", daemon, st, unit)
	}
	systemctl(t, "kill", "-s", "KILL", daemon)
	st := waitState(t, s, unit, 5*time.Second, "inactive", "failed")
	t.Logf("%s after SIGKILL to %s: %s", unit, daemon, st)
}

func readLog(t *testing.T) string {
	b, err := os.ReadFile("/run/ul-test/start.log")
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// countReloads counts systemd's Reloading(true) signals from now on. The
// returned function first makes a call to systemd on the same connection:
// its reply comes after every signal systemd sent before it, and godbus
// puts a signal into a channel with room before it reads on.
func countReloads(t *testing.T) func() int {
	conn, err := dbus.ConnectSystemBus()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if err := conn.AddMatchSignal(dbus.WithMatchInterface("org.freedesktop.systemd1.Manager"), dbus.WithMatchMember("Reloading")); err != nil {
		t.Fatal(err)
	}
	ch := make(chan *dbus.Signal, 64)
	conn.Signal(ch)
	return func() int {
		systemd := conn.Object("org.freedesktop.systemd1", "/org/freedesktop/systemd1")
		if _, err := systemd.GetProperty("org.freedesktop.systemd1.Manager.Version"); err != nil {
			t.Fatal(err)
		}
		n := 0
		for {
			select {
			case sig := <-ch:
				if on, _ := sig.Body[0].(bool); on {
					n++
				}
			default:
				return n
			}
		}
	}
}
