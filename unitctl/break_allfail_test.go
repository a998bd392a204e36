package unitctl

// A helper's attempts to break 9d15a63 (the SIGKILL sent with the
// target all-fail).

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sd "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
)

// killFake is a unit whose cgroup holds one process (while alive) and a
// KillUnit that follows each test's script (serve).
type killFake struct {
	mu    sync.Mutex
	alive bool
	whos  []string
	hits  int
}

func (k *killFake) snapshot() ([]string, int, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]string(nil), k.whos...), k.hits, k.alive
}

// serve exports on f a GetUnitProcesses that lists the process while it
// is alive, and a KillUnit that records each target asked, answers
// refuse's error (the signal not sent) if it gives one, else delivers
// the signal (a SIGKILL ends the process) and answers after's.
// call counts the KillUnit calls from 1.
func (k *killFake) serve(t *testing.T, f *fakeSystemd, unit string, pid uint32,
	refuse func(call int, who string) *dbus.Error, after func(call int, who string, reached bool) *dbus.Error) {
	m := f.manager()
	m["GetUnitProcesses"] = func(name string) ([]fakeProcess, *dbus.Error) {
		k.mu.Lock()
		defer k.mu.Unlock()
		if k.alive {
			return []fakeProcess{{Cgroup: "/system.slice/" + unit, PID: pid, Command: "/bin/sleep 86420"}}, nil
		}
		return []fakeProcess{}, nil
	}
	m["KillUnit"] = func(name, who string, sig int32) *dbus.Error {
		k.mu.Lock()
		defer k.mu.Unlock()
		k.whos = append(k.whos, who)
		if refuse != nil {
			if err := refuse(len(k.whos), who); err != nil {
				return err
			}
		}
		reached := k.alive && sig == 9
		if reached {
			k.alive = false
			k.hits++
		}
		if after != nil {
			return after(len(k.whos), who, reached)
		}
		return nil
	}
	f.export(t, m)
}

// TestBreakAllFailRetriedAfterALostAnswerSaysMissed: a stopped unit with
// a process left in its cgroup (listed: empty=false) gets emptied's
// SIGKILL. systemd takes all-fail and kills the process, then re-executes
// before it answers: the call gets NoReply, the plain kill that killAll
// sends at once gets ServiceUnknown (the name has no owner while systemd
// re-executes), both transient, so with runs op again; the new systemd
// answers all-fail with NoSuchProcess: the process is already dead, killed
// by the first call. kill takes errKillMissed and leaves st.hit false,
// though the cgroup was listed non-empty and the SIGKILL reached it.
// Before 9d15a63 (hit = !empty) OnKilled was called; at 9d15a63 it was
// not (a helper's attempt to break it). Fixed: errKillMissed is taken as
// "reached nothing" only from the first try; after a retry, as unsure.
func TestBreakAllFailRetriedAfterALostAnswerSaysMissed(t *testing.T) {
	f := newFakeSystemd(t)
	const unit = "reexec.service"
	f.set(unit, "failed", 0, "")
	k := &killFake{alive: true}
	k.serve(t, f, unit, 4250, nil, func(call int, who string, reached bool) *dbus.Error {
		switch call {
		case 1: // delivered; systemd re-executes before answering
			return dbus.NewError("org.freedesktop.DBus.Error.NoReply", []any{"Message recipient disconnected from message bus without replying"})
		case 2: // systemd not on the bus yet
			return dbus.NewError("org.freedesktop.DBus.Error.ServiceUnknown", []any{"The name is not activatable"})
		}
		if !reached && who == "all-fail" {
			return dbus.NewError(noSuchProcess, []any{"No matching processes to kill"})
		}
		return nil
	})
	lg := &logs{}
	s := dialFake(t, lg)
	var killed atomic.Bool
	if err := s.Stop(OnKilled(ctxFor(t, 30*time.Second), func() { killed.Store(true) }), unit, 10*time.Second); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	whos, hits, alive := k.snapshot()
	if hits != 1 || alive || len(whos) < 3 {
		t.Fatalf("kills %v, %d hit; the scenario did not happen", whos, hits)
	}
	if !killed.Load() {
		t.Errorf("Stop's SIGKILL (kills sent %v) killed the process left in the stopped unit's cgroup, listed just before, yet OnKilled was not called: a retry's NoSuchProcess, answered after the first call's SIGKILL had done its work, was taken as \"reached nothing\"", whos)
	}
}

// TestBreakAllFailTransientFallsThroughToAll: all-fail refused with a
// transient name (LimitsExceeded) is followed by the plain kill at once,
// which kills; nothing is skipped.
func TestBreakAllFailTransientFallsThroughToAll(t *testing.T) {
	f := newFakeSystemd(t)
	const unit = "limits.service"
	f.set(unit, "failed", 0, "")
	k := &killFake{alive: true}
	k.serve(t, f, unit, 4251, func(_ int, who string) *dbus.Error {
		if who == "all-fail" {
			return dbus.NewError("org.freedesktop.DBus.Error.LimitsExceeded", []any{"too many replies"})
		}
		return nil
	}, nil)
	s := dialFake(t, nil)
	var killed atomic.Bool
	if err := s.Stop(OnKilled(ctxFor(t, 30*time.Second), func() { killed.Store(true) }), unit, 10*time.Second); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	whos, hits, _ := k.snapshot()
	if hits != 1 || len(whos) != 2 || whos[0] != "all-fail" || whos[1] != "all" {
		t.Fatalf("kills %v, %d hit; want all-fail then all, which kills", whos, hits)
	}
	if !killed.Load() {
		t.Error("OnKilled not called after a SIGKILL to a cgroup listed non-empty")
	}
	if s.noAllFail.Load() {
		t.Error("a transient refusal was kept as systemd not knowing all-fail")
	}
}

// TestBreakAllFailRefusedThenTransientRetriesWithAll: all-fail refused
// (InvalidArgs), the plain kill then fails transiently: the retry sends
// all (not all-fail again) and kills.
func TestBreakAllFailRefusedThenTransientRetriesWithAll(t *testing.T) {
	f := newFakeSystemd(t)
	const unit = "old2.service"
	k := &killFake{alive: true}
	k.serve(t, f, unit, 4252, func(call int, who string) *dbus.Error {
		if who == "all-fail" {
			return dbus.NewError(invalidArgs, []any{"Invalid who argument " + who})
		}
		if call == 2 {
			return dbus.NewError("org.freedesktop.DBus.Error.NoReply", []any{"no reply"})
		}
		return nil
	}, nil)
	s := dialFake(t, nil)
	ctx := ctxFor(t, 10*time.Second)
	err := s.with(ctx, func(c *sd.Conn) error { return s.killAll(ctx, c, unit) })
	if !errors.Is(err, errKillUnsure) {
		t.Fatalf("killAll: %v; want errKillUnsure", err)
	}
	whos, hits, _ := k.snapshot()
	if hits != 1 || fmt.Sprint(whos) != "[all-fail all all]" {
		t.Fatalf("kills %v, %d hit; want [all-fail all all], the last killing", whos, hits)
	}
}

// TestBreakKillSentinelsAreNotTransient: with must not retry (and so
// re-send the SIGKILL) on the sentinels.
func TestBreakKillSentinelsAreNotTransient(t *testing.T) {
	for _, err := range []error{errKillMissed, errKillUnsure, fmt.Errorf("x: %w", errKillMissed)} {
		if transient(err) {
			t.Errorf("transient(%v) = true", err)
		}
	}
}

// TestBreakAllFailAskedOfASystemdKnownTooOld: Dial reads systemd's
// Version (checkVersion); a systemd of 251 cannot take all-fail, yet the
// first SIGKILL of a Systemd still goes out as all-fail, and the plain
// kill waits for its refusal: one round trip to a systemd that may be
// busy, before every SIGKILL sent until the first refusal is answered.
// Failed at 9d15a63. Fixed: checkVersion sets noAllFail below 252.
func TestBreakAllFailAskedOfASystemdKnownTooOld(t *testing.T) {
	f := newFakeSystemd(t)
	props := map[string]any{
		"Get": func(iface, prop string) (dbus.Variant, *dbus.Error) {
			if iface == "org.freedesktop.systemd1.Manager" && prop == "Version" {
				return dbus.MakeVariant("251"), nil
			}
			return dbus.Variant{}, dbus.NewError("org.freedesktop.DBus.Error.UnknownProperty", []any{prop})
		},
	}
	if err := f.conn.ExportMethodTable(props, "/org/freedesktop/systemd1", "org.freedesktop.DBus.Properties"); err != nil {
		t.Fatal(err)
	}
	k := &killFake{alive: true}
	m := f.manager()
	m["KillUnit"] = func(name, who string, sig int32) *dbus.Error {
		k.mu.Lock()
		defer k.mu.Unlock()
		k.whos = append(k.whos, who)
		if who == "all-fail" {
			return dbus.NewError(invalidArgs, []any{"Invalid who argument " + who})
		}
		return nil
	}
	f.export(t, m)
	s := dialFake(t, nil)
	ctx := ctxFor(t, 10*time.Second)
	if err := s.with(ctx, func(c *sd.Conn) error { return s.killAll(ctx, c, "x.service") }); !errors.Is(err, errKillUnsure) {
		t.Fatalf("killAll: %v", err)
	}
	if whos, _, _ := k.snapshot(); len(whos) != 1 {
		t.Errorf("systemd 251 (read at Dial) sent kills %v: the SIGKILL waited for a refusal the version already told", whos)
	}
}
