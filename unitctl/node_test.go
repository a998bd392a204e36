package unitctl

// Helpers of the tests named TestNode* and BenchmarkNode*, which need
// systemd as PID 1. They run only inside a vm-tests node (a booted
// systemd-nspawn container) with UNITLEASE_IN_NODE=1; elsewhere they are
// skipped, and vm-tests/unitctl_test.go (TestUnitctlInNode) runs them in a
// node and fails if any is skipped or fails.

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// InNodeEnv names the variable that enables the in-node tests.
const InNodeEnv = "UNITLEASE_IN_NODE"

// requireNode skips tb outside a node and fails it if the variable is set
// somewhere that is not a systemd-nspawn container with systemd as PID 1,
// so that these tests never write units into a real machine.
func requireNode(tb testing.TB) {
	tb.Helper()
	if os.Getenv(InNodeEnv) != "1" {
		tb.Skipf("needs systemd as PID 1 in a vm-tests node: go test ./vm-tests -run TestUnitctlInNode runs it there (%s=1)", InNodeEnv)
	}
	comm, _ := os.ReadFile("/proc/1/comm")
	container, _ := os.ReadFile("/run/systemd/container")
	if strings.TrimSpace(string(comm)) != "systemd" || strings.TrimSpace(string(container)) != "systemd-nspawn" {
		tb.Fatalf("%s=1 but this is not a systemd-nspawn container with systemd as PID 1 (PID 1 %q, container %q)", InNodeEnv, comm, container)
	}
}

// dialNode returns a Systemd for the node's systemd, closed when tb ends.
func dialNode(tb testing.TB, opts Options) *Systemd {
	tb.Helper()
	requireNode(tb)
	if opts.Logf == nil {
		opts.Logf = tb.Logf
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := Dial(ctx, opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

// unitDir is where test units are written.
const unitDir = "/etc/systemd/system"

// installUnits writes files (a name relative to unitDir, or an absolute
// path, to its text) and reloads systemd once; when tb ends it stops the
// services among them, removes the files and reloads again.
func installUnits(tb testing.TB, files map[string]string) {
	tb.Helper()
	services := writeUnitFiles(tb, files)
	tb.Cleanup(func() {
		if len(services) > 0 {
			systemctlQuiet(append([]string{"stop"}, services...)...)
			systemctlQuiet(append([]string{"reset-failed"}, services...)...)
		}
	})
	systemctl(tb, "daemon-reload")
}

// writeUnitFiles writes files as installUnits does, and removes them (and
// reloads) when tb ends. It returns the names of the services written.
func writeUnitFiles(tb testing.TB, files map[string]string) (services []string) {
	tb.Helper()
	var paths []string
	tb.Cleanup(func() {
		for _, p := range paths {
			os.Remove(p)
			if dir := filepath.Dir(p); strings.HasSuffix(dir, ".d") {
				os.Remove(dir) // a drop-in directory, if empty
			}
		}
		systemctlQuiet("daemon-reload")
	})
	for name, text := range files {
		path := name
		if !filepath.IsAbs(path) {
			path = filepath.Join(unitDir, name)
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			tb.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			tb.Fatal(err)
		}
		paths = append(paths, path)
		if base := filepath.Base(path); strings.HasSuffix(base, ".service") && !strings.Contains(base, "@.") {
			services = append(services, base)
		}
	}
	return services
}

// managedUnit installs unit, with text, beside a stand-in for the
// daemon's unit (NAME-daemon.service for unit NAME.service), validates it
// with a stop_wait of 4 s and a stand-in guard, and installs its drop-in,
// which is removed when tb ends.
func managedUnit(tb testing.TB, unit, text string) (*Systemd, Config, *Plan) {
	tb.Helper()
	s := dialNode(tb, Options{})
	daemon := strings.TrimSuffix(unit, ".service") + "-daemon.service"
	cfg := Config{StopWait: 4 * time.Second, Guard: []string{"/run/ul-test/guard"}, DaemonUnit: daemon}
	installUnits(tb, map[string]string{daemon: plainService, unit: text})
	ctx := ctxFor(tb, time.Minute)
	p, err := s.Validate(ctx, unit, cfg, nil)
	if err != nil {
		tb.Fatal(err)
	}
	if failed, err := s.Install(ctx, []*Plan{p}); err != nil || len(failed) > 0 {
		tb.Fatalf("Install: %v %v", failed, err)
	}
	tb.Cleanup(func() {
		if err := s.Uninstall(ctxFor(tb, 30*time.Second), cfg, []string{unit}); err != nil {
			tb.Error(err)
		}
	})
	return s, cfg, p
}

// systemctl runs systemctl in the node and fails tb on error.
func systemctl(tb testing.TB, args ...string) string {
	tb.Helper()
	out, err := exec.Command("systemctl", args...).CombinedOutput()
	if err != nil {
		tb.Fatalf("systemctl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// systemctlQuiet runs systemctl and ignores the outcome (cleanup).
func systemctlQuiet(args ...string) {
	_ = exec.Command("systemctl", args...).Run()
}

// show reads one property with systemctl show, as a cross-check of what
// unitctl reports.
func show(tb testing.TB, unit, prop string) string {
	tb.Helper()
	return systemctl(tb, "show", "--value", "-p", prop, unit)
}

// waitFor polls cond every 20ms until it holds or d passes; only for
// conditions no event announces (a process gone, a file written).
func waitFor(tb testing.TB, d time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("after %v: %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// processesWith lists the PIDs whose command line is cmdline (its words
// joined by spaces).
func processesWith(cmdline string) []string {
	var pids []string
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "cmdline"))
		if err == nil && strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " ")) == cmdline {
			pids = append(pids, filepath.Base(d))
		}
	}
	return pids
}

// ctxFor is a context bounded by d and by the test.
func ctxFor(tb testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	tb.Cleanup(cancel)
	return ctx
}

// waitState waits on unitctl's own Watch until unit is in one of states.
func waitState(tb testing.TB, s *Systemd, unit string, d time.Duration, states ...string) UnitState {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var last UnitState
	for ev := range s.Watch(ctx, []string{unit}, 200*time.Millisecond) {
		last = ev.State
		for _, st := range states {
			if ev.State.ActiveState == st {
				return ev.State
			}
		}
	}
	tb.Fatalf("%s: still %s after %v, want %v", unit, last, d, states)
	return last
}
