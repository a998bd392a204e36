package unitctl

import (
	"errors"
	"fmt"
	"io"
	"syscall"
	"testing"

	sd "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
)

func TestClassify(t *testing.T) {
	tests := []struct {
		i      intent
		active string
		sub    string
		want   Kind
	}{
		{intentStopped, "inactive", "dead", Settled},
		{intentStopped, "deactivating", "stop-sigterm", Settled},
		{intentStopped, "activating", "start-pre", StartedBehind},
		{intentStopped, "active", "running", StartedBehind},
		{intentStopped, "reloading", "reload", StartedBehind},
		{intentStopped, "failed", "failed", Failed},
		{intentStarting, "inactive", "dead", Settled}, // its start job still queued
		{intentStarting, "activating", "start-pre", Settled},
		{intentStarting, "failed", "failed", Failed},
		{intentRunning, "activating", "start", Settled},
		{intentRunning, "active", "running", Settled},
		{intentRunning, "activating", "auto-restart", Failed},
		{intentRunning, "failed", "failed", Failed},
		{intentRunning, "deactivating", "stop-sigterm", StoppedBehind},
		{intentRunning, "inactive", "dead", StoppedBehind},
	}
	for _, tt := range tests {
		got := classify(tt.i, UnitState{ActiveState: tt.active, SubState: tt.sub})
		if got != tt.want {
			t.Errorf("classify(%v, %s/%s) = %v, want %v", tt.i, tt.active, tt.sub, got, tt.want)
		}
	}
}

func TestTransient(t *testing.T) {
	tests := []struct {
		err  error
		want bool
	}{
		{dbus.Error{Name: "org.freedesktop.DBus.Error.NoReply"}, true},
		{&dbus.Error{Name: "org.freedesktop.DBus.Error.Disconnected"}, true},
		{fmt.Errorf("wrapped: %w", dbus.Error{Name: "org.freedesktop.DBus.Error.ServiceUnknown"}), true},
		{dbus.ErrClosed, true},
		{io.EOF, true},
		{&netError{syscall.ECONNRESET}, true},
		{dbus.Error{Name: "org.freedesktop.systemd1.NoSuchUnit"}, false},
		{dbus.Error{Name: "org.freedesktop.DBus.Error.AccessDenied"}, false},
		{errors.New("other"), false},
	}
	for _, tt := range tests {
		if got := transient(tt.err); got != tt.want {
			t.Errorf("transient(%v) = %t, want %t", tt.err, got, tt.want)
		}
	}
}

type netError struct{ err error }

func (e *netError) Error() string { return "read: " + e.err.Error() }
func (e *netError) Unwrap() error { return e.err }

func TestUnitChange(t *testing.T) {
	for _, unit := range []string{"vpn.service", "vpn@eu-west_1.service", "a\\x2db.service", "0x.service"} {
		sig := &dbus.Signal{
			Path: dbus.ObjectPath("/org/freedesktop/systemd1/unit/" + sd.PathBusEscape(unit)),
			Name: "org.freedesktop.DBus.Properties.PropertiesChanged",
			Body: []any{"org.freedesktop.systemd1.Unit", map[string]dbus.Variant{"ActiveState": dbus.MakeVariant("active")}, []string{}},
		}
		got, props, ok := unitChange(sig)
		if !ok || got != unit || props["ActiveState"].Value() != "active" {
			t.Errorf("%s: got %q %v %t", unit, got, props, ok)
		}
		sig.Body[0] = "org.freedesktop.systemd1.Service"
		if _, _, ok := unitChange(sig); ok {
			t.Errorf("%s: a Service interface change was taken for a Unit change", unit)
		}
	}
}

// TestStaleStateIsNotClassified: a state read before the unit's last
// Start is not reported against it (it would read as stopped behind the
// daemon's back); one read after is.
func TestStaleStateIsNotClassified(t *testing.T) {
	s := &Systemd{intents: map[string]intentAt{}, life: t.Context()}
	out := make(chan Event, 4)
	wt := watching{s: s, units: []string{"u.service"}, out: out, last: map[string]UnitState{}}
	before := s.generation()
	s.setIntent("u.service", intentRunning)
	inactive := UnitState{ActiveState: "inactive", SubState: "dead"}
	if !wt.emit(t.Context(), "u.service", inactive, before) || len(out) != 0 {
		t.Fatalf("a state from before the Start was reported: %v", <-out)
	}
	if !wt.emit(t.Context(), "u.service", inactive, s.generation()) || len(out) != 1 {
		t.Fatal("a state from after the Start was not reported")
	}
	if ev := <-out; ev.Kind != StoppedBehind {
		t.Fatalf("kind %v, want stopped-behind", ev.Kind)
	}
}
