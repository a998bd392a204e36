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
	k := newLateList(t, "late.service", false)
	killed := k.stop(t, true)
	whos, hits := k.result()
	if hits != 1 {
		t.Fatalf("kills sent %v, %d hit the running process: the scenario did not happen", whos, hits)
	}
	if !killed {
		t.Errorf("Stop's SIGKILL killed the unit's running main process, yet OnKilled was not called: the stop is not journalled \"killed\"")
	}
}

// TestBreakKillTimeSIGKILLToNothingIsNotKilled: 8777c44's own case
// against the fake: an inactive unit, every list answered late; the
// SIGKILL at the kill time reaches nothing (systemd answers all-fail with
// NoSuchProcess); OnKilled must not be called.
func TestBreakKillTimeSIGKILLToNothingIsNotKilled(t *testing.T) {
	k := newLateList(t, "idle.service", false)
	if k.stop(t, false) {
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
	k := newLateList(t, "old.service", true)
	killed := k.stop(t, true)
	whos, hits := k.result()
	if hits != 1 || len(whos) < 2 || whos[0] != "all-fail" || whos[1] != "all" {
		t.Fatalf("kills sent %v, %d hit the running process; want all-fail refused, then all, which kills it", whos, hits)
	}
	for _, w := range whos[1:] {
		if w != "all" {
			t.Fatalf("kills sent %v: all-fail tried again after systemd refused it", whos)
		}
	}
	if !k.s.noAllFail.Load() {
		t.Fatal("systemd refused all-fail, and the refusal was not kept")
	}
	if killed {
		t.Errorf("OnKilled called with nothing to say the plain kill reached a process, after a list taken empty")
	}
}

// lateList is a fake systemd with one unit, inactive, whose lists of
// the cgroup are computed when asked and answered only once the test
// opens the gate; its SIGKILL ends whatever runs in the cgroup when it
// arrives, and answers all-fail as systemd 252 does (NoSuchProcess when
// it reached nothing), or refuses it as an older systemd (oldSystemd).
type lateList struct {
	f       *fakeSystemd
	s       *Systemd
	unit    string
	gate    chan struct{}
	open    func()
	listsIn atomic.Int64

	mu      sync.Mutex
	running bool     // the unit's main process is in its cgroup
	whos    []string // the kill targets asked, in order
	hits    int      // SIGKILLs that ended the running process
}

func newLateList(t *testing.T, unit string, oldSystemd bool) *lateList {
	k := &lateList{f: newFakeSystemd(t), unit: unit, gate: make(chan struct{})}
	k.open = sync.OnceFunc(func() { close(k.gate) })
	t.Cleanup(k.open)
	k.f.set(unit, "inactive", 0, "")
	m := k.f.manager()
	m["GetUnitProcesses"] = func(name string) ([]fakeProcess, *dbus.Error) {
		k.mu.Lock()
		procs := []fakeProcess{}
		if k.running {
			procs = append(procs, fakeProcess{Cgroup: "/system.slice/" + unit, PID: 4242, Command: "/bin/sleep 86416"})
		}
		k.mu.Unlock()
		k.listsIn.Add(1)
		<-k.gate
		return procs, nil
	}
	m["KillUnit"] = func(name, who string, sig int32) *dbus.Error {
		k.mu.Lock()
		defer k.mu.Unlock()
		k.whos = append(k.whos, who)
		if oldSystemd && who != "all" && who != "main" && who != "control" {
			return dbus.NewError("org.freedesktop.DBus.Error.InvalidArgs", []any{"Invalid who argument " + who})
		}
		if k.running && sig == 9 {
			k.running = false
			k.hits++
			k.f.set(unit, "failed", 0, "") // main process killed by signal: Result=signal
			return nil
		}
		if who == "all-fail" {
			return dbus.NewError("org.freedesktop.systemd1.NoSuchProcess", []any{"No matching processes to kill"})
		}
		return nil
	}
	k.f.export(t, m)
	k.s = dialFake(t, nil)
	return k
}

// stop stops the unit with a stop_wait of 1 s, and reports whether
// OnKilled was called. Two lists reach the fake (the check whether the
// unit is stopped already, given up at the kill time, and the kill
// time's, computed empty); then, if startBehind, the unit is started
// behind the stop while the answer is on its way; then the answers go.
func (k *lateList) stop(t *testing.T, startBehind bool) bool {
	t.Helper()
	var killed atomic.Bool
	errs := make(chan error, 1)
	go func() {
		errs <- k.s.Stop(OnKilled(ctxFor(t, 30*time.Second), func() { killed.Store(true) }), k.unit, time.Second)
	}()
	if !until(10*time.Second, func() bool { return k.listsIn.Load() >= 2 }) {
		t.Fatalf("%d GetUnitProcesses calls reached the fake; want the kill time's", k.listsIn.Load())
	}
	if startBehind {
		k.mu.Lock()
		k.running = true
		k.f.set(k.unit, "active", 0, "")
		k.mu.Unlock()
	}
	k.open()
	if err := <-errs; err != nil {
		t.Fatalf("Stop: %v", err)
	}
	return killed.Load()
}

// result is the kill targets asked and the SIGKILLs that hit.
func (k *lateList) result() ([]string, int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]string(nil), k.whos...), k.hits
}
