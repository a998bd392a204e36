package main

import (
	"bufio"
	"bytes"
	"context"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/unitlease/unitlease/internal/config"
)

// TestCheckWithTheDaemonStoppedRefusesWhatRunRefuses: with
// unitlease.service stopped (systemd then reports WatchdogUSec=infinity)
// check still reads what does not depend on the service running and
// refuses what run refuses: `systemctl service-watchdogs no`, and
// TimeoutAbortSec=infinity. It once returned at once on that path and
// passed both.
//
// The test runs a private dbus-daemon with a fake org.freedesktop.systemd1
// (the Manager's Version, ServiceWatchdogs, Subscribe, ListUnitsByNames;
// the Service's WatchdogUSec and TimeoutAbortUSec) and calls check's
// watchdog step.
func TestCheckWithTheDaemonStoppedRefusesWhatRunRefuses(t *testing.T) {
	if _, err := exec.LookPath("dbus-daemon"); err != nil {
		t.Skip("no dbus-daemon")
	}
	for _, c := range []struct {
		name      string
		watchdogs bool
		abort     uint64
	}{
		{"service-watchdogs no", false, 1_000_000},
		{"TimeoutAbortSec=infinity", true, math.MaxUint64},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, state := range []string{"active", "inactive"} {
				fakeSystemdBus(t, c.watchdogs, math.MaxUint64, c.abort, state)
				cfg, err := config.Parse("u.toml", []byte("node = \"n1\"\n"))
				if err != nil {
					t.Fatal(err)
				}
				var out bytes.Buffer
				ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
				ok := (&checker{out: &out}).watchdog(ctx, cfg)
				cancel()
				if ok {
					t.Errorf("with %s and unitlease.service %s, check's watchdog step passes; run refuses to start:\n%s", c.name, state, out.String())
				}
			}
		})
	}
}

type fakeProps map[string]map[string]dbus.Variant

func (p fakeProps) Get(iface, name string) (dbus.Variant, *dbus.Error) {
	if v, ok := p[iface][name]; ok {
		return v, nil
	}
	return dbus.Variant{}, dbus.MakeFailedError(os.ErrNotExist)
}

type fakeUnitStatus struct {
	Name, Description, LoadState, ActiveState, SubState, Followed string
	Path                                                          dbus.ObjectPath
	JobID                                                         uint32
	JobType                                                       string
	JobPath                                                       dbus.ObjectPath
}

type fakeManager struct{ state string }

func (fakeManager) Subscribe() *dbus.Error { return nil }

func (m fakeManager) ListUnitsByNames(names []string) ([]fakeUnitStatus, *dbus.Error) {
	var out []fakeUnitStatus
	for _, n := range names {
		out = append(out, fakeUnitStatus{Name: n, LoadState: "loaded", ActiveState: m.state, SubState: "dead",
			Path: "/org/freedesktop/systemd1/unit/x", JobPath: "/"})
	}
	return out, nil
}

// fakeSystemdBus starts a dbus-daemon on a socket of its own, serves a
// fake systemd on it and points DBUS_SYSTEM_BUS_ADDRESS there.
func fakeSystemdBus(t *testing.T, watchdogs bool, watchdogUS, abortUS uint64, state string) {
	t.Helper()
	dir := t.TempDir()
	sock := filepath.Join(dir, "bus")
	conf := filepath.Join(dir, "bus.conf")
	if err := os.WriteFile(conf, []byte(`<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN" "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig><type>system</type><listen>unix:path=`+sock+`</listen><auth>EXTERNAL</auth>
<policy context="default"><allow user="*"/><allow own="*"/><allow send_destination="*"/><allow receive_sender="*"/><allow eavesdrop="true"/></policy>
</busconfig>`), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("dbus-daemon", "--config-file="+conf, "--nofork", "--nopidfile", "--print-address=1")
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if _, err := bufio.NewReader(stdout).ReadString('\n'); err != nil { // the address: listening
		t.Fatal(err)
	}
	addr := "unix:path=" + sock
	t.Setenv("DBUS_SYSTEM_BUS_ADDRESS", addr)
	conn, err := dbus.Connect(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	mgr := fakeProps{"org.freedesktop.systemd1.Manager": {
		"Version": dbus.MakeVariant("255"), "ServiceWatchdogs": dbus.MakeVariant(watchdogs)}}
	unit := fakeProps{"org.freedesktop.systemd1.Service": {
		"WatchdogUSec": dbus.MakeVariant(watchdogUS), "TimeoutAbortUSec": dbus.MakeVariant(abortUS)},
		"org.freedesktop.systemd1.Unit": {"ActiveState": dbus.MakeVariant(state)}}
	for path, v := range map[dbus.ObjectPath]any{"/org/freedesktop/systemd1": mgr, "/org/freedesktop/systemd1/unit/unitlease_2eservice": unit} {
		if err := conn.Export(v, path, "org.freedesktop.DBus.Properties"); err != nil {
			t.Fatal(err)
		}
	}
	if err := conn.Export(fakeManager{state}, "/org/freedesktop/systemd1", "org.freedesktop.systemd1.Manager"); err != nil {
		t.Fatal(err)
	}
	if reply, err := conn.RequestName("org.freedesktop.systemd1", dbus.NameFlagDoNotQueue); err != nil || reply != dbus.RequestNameReplyPrimaryOwner {
		t.Fatalf("own org.freedesktop.systemd1: %v %v", reply, err)
	}
}
