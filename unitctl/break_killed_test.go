package unitctl

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
)

// TestBreakKillTimeSIGKILLHitsAProcessStartedAfterTheList: a Stop of a
// unit that is inactive, with a systemd slow to answer (the commit's own
// case: a daemon's startup stop while systemd is busy). Its check whether
// the unit is stopped already gives up at the kill time; the kill time
// lists the cgroup: systemd computes the list (empty) at once, its answer
// arrives late. Meanwhile the unit is started by someone else (an
// operator, a timer, a dependency: unitctl's StartedBehind). The SIGKILL
// that follows the late answer reaches a cgroup that is no longer empty
// and kills the new main process: the unit fails (Result=signal). Stop's
// next read shows it failed (stopped), its list of the cgroup is empty,
// and it returns nil. SIGKILL ended a running process of the unit: OnKilled
// must be called. Before 8777c44 it was (st.killed); at 8777c44 it was
// not (a helper's attempt to break it): st.hit was false because the list
// taken "just before" was empty. Fixed: the SIGKILL goes out with the
// target all-fail, and systemd's answer says whether it reached a process.
func TestBreakKillTimeSIGKILLHitsAProcessStartedAfterTheList(t *testing.T) {
	f := newFakeSystemd(t)
	const unit = "late.service"
	f.set(unit, "inactive", 0, "")

	var (
		mu      sync.Mutex
		running bool // the unit's main process is in its cgroup
	)
	gate := make(chan struct{})
	open := sync.OnceFunc(func() { close(gate) })
	t.Cleanup(open)
	var listsIn atomic.Int64
	var hits atomic.Int64
	m := f.manager()
	// systemd computes the list when the call arrives; the answer is
	// late (held until gate opens).
	m["GetUnitProcesses"] = func(name string) ([]fakeProcess, *dbus.Error) {
		mu.Lock()
		procs := []fakeProcess{}
		if running {
			procs = append(procs, fakeProcess{Cgroup: "/system.slice/" + unit, PID: 4242, Command: "/bin/sleep 86416"})
		}
		mu.Unlock()
		listsIn.Add(1)
		<-gate
		return procs, nil
	}
	// The SIGKILL ends whatever runs in the cgroup when it arrives.
	m["KillUnit"] = func(name, who string, sig int32) *dbus.Error {
		mu.Lock()
		defer mu.Unlock()
		if running && sig == 9 {
			running = false
			hits.Add(1)
			f.set(unit, "failed", 0, "") // main process killed by signal: Result=signal
			return nil
		}
		if who == "all-fail" { // as systemd (252: unit_kill) answers a kill that reached nothing
			return dbus.NewError("org.freedesktop.systemd1.NoSuchProcess", []any{"No matching processes to kill"})
		}
		return nil
	}
	f.export(t, m)

	s := dialFake(t, nil)
	var killed atomic.Bool
	const stopWait = time.Second // kill time 500ms after Stop begins
	errs := make(chan error, 1)
	go func() {
		errs <- s.Stop(OnKilled(ctxFor(t, 30*time.Second), func() { killed.Store(true) }), unit, stopWait)
	}()
	// Two lists in the fake: stoppedAlready's (given up at the kill
	// time) and the kill time's, whose answer (empty) is computed.
	if !until(10*time.Second, func() bool { return listsIn.Load() >= 2 }) {
		t.Fatalf("%d GetUnitProcesses calls reached the fake; want the kill time's", listsIn.Load())
	}
	// Someone starts the unit while the answer is on its way.
	mu.Lock()
	running = true
	f.set(unit, "active", 0, "")
	mu.Unlock()
	open()
	if err := <-errs; err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if hits.Load() == 0 {
		t.Fatal("the SIGKILL hit nothing: the scenario did not happen")
	}
	if !killed.Load() {
		t.Errorf("Stop's SIGKILL killed the unit's running main process (%d hit), yet OnKilled was not called: the stop is not journalled \"killed\"", hits.Load())
	}
}

// TestBreakKillTimeSIGKILLToNothingIsNotKilled: 8777c44's own case
// against the fake: an inactive unit, every list answered late; the
// SIGKILL at the kill time reaches nothing (systemd answers all-fail with
// NoSuchProcess); OnKilled must not be called.
func TestBreakKillTimeSIGKILLToNothingIsNotKilled(t *testing.T) {
	f := newFakeSystemd(t)
	const unit = "idle.service"
	f.set(unit, "inactive", 0, "")
	gate := make(chan struct{})
	open := sync.OnceFunc(func() { close(gate) })
	t.Cleanup(open)
	var listsIn atomic.Int64
	m := f.manager()
	m["GetUnitProcesses"] = func(name string) ([]fakeProcess, *dbus.Error) {
		listsIn.Add(1)
		<-gate
		return []fakeProcess{}, nil
	}
	m["KillUnit"] = func(name, who string, sig int32) *dbus.Error {
		if who == "all-fail" {
			return dbus.NewError("org.freedesktop.systemd1.NoSuchProcess", []any{"No matching processes to kill"})
		}
		return nil
	}
	f.export(t, m)
	s := dialFake(t, nil)
	var killed atomic.Bool
	errs := make(chan error, 1)
	go func() {
		errs <- s.Stop(OnKilled(ctxFor(t, 30*time.Second), func() { killed.Store(true) }), unit, time.Second)
	}()
	if !until(10*time.Second, func() bool { return listsIn.Load() >= 2 }) {
		t.Fatalf("%d GetUnitProcesses calls reached the fake; want the kill time's", listsIn.Load())
	}
	open()
	if err := <-errs; err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if killed.Load() {
		t.Errorf("a SIGKILL that reached no process was reported as needed (OnKilled)")
	}
}

// TestKillWithoutAllFailStillKills: a systemd older than 252 refuses the
// target all-fail (InvalidArgs). The SIGKILL must still go out, with
// all, at once, and later kills go out with all only. The scenario of
// the first test: the process started behind the stop is killed (by the
// plain kill); with no answer to say so, the empty list taken before
// decides, and OnKilled is not called: what a systemd without all-fail
// cannot tell.
func TestKillWithoutAllFailStillKills(t *testing.T) {
	f := newFakeSystemd(t)
	const unit = "old.service"
	f.set(unit, "inactive", 0, "")
	var (
		mu      sync.Mutex
		running bool
		whos    []string
	)
	gate := make(chan struct{})
	open := sync.OnceFunc(func() { close(gate) })
	t.Cleanup(open)
	var listsIn, hits atomic.Int64
	m := f.manager()
	m["GetUnitProcesses"] = func(name string) ([]fakeProcess, *dbus.Error) {
		mu.Lock()
		procs := []fakeProcess{}
		if running {
			procs = append(procs, fakeProcess{Cgroup: "/system.slice/" + unit, PID: 4243, Command: "/bin/sleep 86417"})
		}
		mu.Unlock()
		listsIn.Add(1)
		<-gate
		return procs, nil
	}
	m["KillUnit"] = func(name, who string, sig int32) *dbus.Error {
		mu.Lock()
		defer mu.Unlock()
		whos = append(whos, who)
		if who != "all" && who != "main" && who != "control" {
			return dbus.NewError("org.freedesktop.DBus.Error.InvalidArgs", []any{"Invalid who argument " + who})
		}
		if running && sig == 9 {
			running = false
			hits.Add(1)
			f.set(unit, "failed", 0, "")
		}
		return nil
	}
	f.export(t, m)
	s := dialFake(t, nil)
	var killed atomic.Bool
	errs := make(chan error, 1)
	go func() {
		errs <- s.Stop(OnKilled(ctxFor(t, 30*time.Second), func() { killed.Store(true) }), unit, time.Second)
	}()
	if !until(10*time.Second, func() bool { return listsIn.Load() >= 2 }) {
		t.Fatalf("%d GetUnitProcesses calls reached the fake; want the kill time's", listsIn.Load())
	}
	mu.Lock()
	running = true
	f.set(unit, "active", 0, "")
	mu.Unlock()
	open()
	if err := <-errs; err != nil {
		t.Fatalf("Stop: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if hits.Load() != 1 || len(whos) < 2 || whos[0] != "all-fail" || whos[1] != "all" {
		t.Fatalf("kills sent %v, %d hit the running process; want all-fail refused, then all, which kills it", whos, hits.Load())
	}
	for _, w := range whos[1:] {
		if w != "all" {
			t.Fatalf("kills sent %v: all-fail tried again after systemd refused it", whos)
		}
	}
	if !s.noAllFail.Load() {
		t.Fatal("systemd refused all-fail, and the refusal was not kept")
	}
	if killed.Load() {
		t.Errorf("OnKilled called with nothing to say the plain kill reached a process, after a list taken empty")
	}
}
