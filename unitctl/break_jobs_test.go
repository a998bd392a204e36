package unitctl

// Review tests of the job results routed by jobResults and of the slots of
// queueJob. Most run against a fake systemd on a dbus-daemon of their own
// (fakeSystemd): a method of the fake may hold its answer for as long as a
// test wants, and the fake sends JobRemoved when a test says so. They are
// skipped where dbus-daemon is not installed.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
)

// startBound and stopBound are the bounds on starts and StopUnit calls.
const (
	startBound = maxStarts
	stopBound  = maxStopCalls
)

// ---- pure jobResults properties ----

// Two calls that systemd answers with the same job (a StartUnit or
// StopUnit while an equal job is queued is merged into it and answered
// with its path) both get its result. go-systemd v22.7.0, which unitctl
// used before, appended every channel of a job path
// (jobListener.jobs[p] = append(...)).
func TestBreakMergedJobResultReachesEveryCaller(t *testing.T) {
	var j jobResults
	a, b := make(chan string, 1), make(chan string, 1)
	j.expect(5, a)
	j.expect(5, b)
	j.removed(5, "failed")
	if len(a) != 1 || len(b) != 1 {
		t.Fatalf("merged job 5: first caller got a result: %v, second: %v; want both", len(a) == 1, len(b) == 1)
	}
}

// The same, with the JobRemoved read before either call looked (it comes
// on the events connection, the answers on the other).
func TestBreakMergedEarlyJobResultReachesEveryCaller(t *testing.T) {
	var j jobResults
	j.removed(6, "failed")
	a, b := make(chan string, 1), make(chan string, 1)
	j.expect(6, a)
	j.expect(6, b)
	if len(a) != 1 || len(b) != 1 {
		t.Fatalf("merged job 6 removed early: first caller got a result: %v, second: %v; want both", len(a) == 1, len(b) == 1)
	}
}

// One caller of a merged job that is done with it (its Start returned on
// a state read) must not drop the other caller's wait.
func TestBreakForgetDropsOnlyItsOwnWait(t *testing.T) {
	var j jobResults
	a, b := make(chan string, 1), make(chan string, 1)
	j.expect(7, a)
	j.expect(7, b)
	j.forget(7, a) // a's caller is done
	j.removed(7, "done")
	if len(b) != 1 {
		t.Fatal("the second caller of merged job 7 lost its result when the first forgot its wait")
	}
}

// Under -race: results removed before, after and while calls look are
// each delivered once to the one caller of that job, and forget racing
// removed neither blocks nor delivers twice.
func TestBreakJobResultsConcurrent(t *testing.T) {
	var j jobResults
	const n = 2000
	chans := make([]chan string, n)
	for i := range chans {
		chans[i] = make(chan string, 1)
	}
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(2)
		go func() { defer wg.Done(); j.removed(uint32(i), fmt.Sprint(i)) }()
		go func() {
			defer wg.Done()
			j.expect(uint32(i), chans[i])
			if i%3 == 0 {
				j.forget(uint32(i), chans[i])
			}
		}()
	}
	wg.Wait()
	for i, ch := range chans {
		select {
		case r := <-ch:
			if r != fmt.Sprint(i) {
				t.Fatalf("job %d got %q", i, r)
			}
		default:
			if i%3 != 0 {
				t.Fatalf("job %d: no result, and its wait was not forgotten", i)
			}
		}
	}
	if len(j.waiting) != 0 {
		t.Fatalf("%d waits left after every job was removed", len(j.waiting))
	}
}

// ---- a fake systemd on a dbus-daemon of its own ----

// fakeUnit is what the fake's ListUnitsByNames reports of a unit.
type fakeUnit struct {
	Name, Description, LoadState, ActiveState, SubState, Followed string
	Path                                                          dbus.ObjectPath
	JobId                                                         uint32
	JobType                                                       string
	JobPath                                                       dbus.ObjectPath
}

type fakeProcess struct {
	Cgroup  string
	PID     uint32
	Command string
}

// fakeSystemd answers the Manager calls unitctl makes. onStart and onStop
// set what each job call does (it may block); units is the state.
type fakeSystemd struct {
	conn *dbus.Conn

	mu     sync.Mutex
	units  map[string]fakeUnit
	nextID uint32

	startFn, stopFn atomic.Pointer[jobFunc] // see onStart, onStop

	startsIn, stopsIn       atomic.Int64 // calls in the fake's handlers
	maxStartsIn, maxStopsIn atomic.Int64
	startCalls, stopCalls   atomic.Int64

	procsGate atomic.Pointer[chan struct{}] // if set, GetUnitProcesses waits until it is closed
	procsIn   atomic.Int64                  // GetUnitProcesses calls in the fake's handler
}

const fakeConf = `<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-BUS Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <listen>unix:path=%s</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_destination="*" eavesdrop="true"/>
    <allow receive_sender="*"/>
    <allow send_type="signal"/>
    <allow receive_type="signal"/>
  </policy>
  <!-- dbus-daemon's default for the system bus (system.conf leaves it commented) -->
  <limit name="max_replies_per_connection">128</limit>
</busconfig>
`

// jobFunc decides a StartUnit or StopUnit call of the fake: the job's id
// (0: none) or an error. It may block.
type jobFunc func(name string) (uint32, *dbus.Error)

func (f *fakeSystemd) onStart(fn jobFunc) { f.startFn.Store(&fn) }
func (f *fakeSystemd) onStop(fn jobFunc)  { f.stopFn.Store(&fn) }

// newFakeSystemd starts a dbus-daemon, registers the fake as
// org.freedesktop.systemd1 on it and points DBUS_SYSTEM_BUS_ADDRESS at
// it. Not parallel: it sets the environment.
func newFakeSystemd(t *testing.T) *fakeSystemd {
	t.Helper()
	daemon, err := exec.LookPath("dbus-daemon")
	if err != nil {
		t.Skip("needs dbus-daemon")
	}
	dir := t.TempDir()
	sock := filepath.Join(dir, "bus")
	conf := filepath.Join(dir, "bus.conf")
	if err := os.WriteFile(conf, fmt.Appendf(nil, fakeConf, sock), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(daemon, "--config-file="+conf, "--nofork", "--nopidfile", "--nosyslog")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	addr := "unix:path=" + sock
	var conn *dbus.Conn
	deadline := time.Now().Add(10 * time.Second)
	for {
		conn, err = dbus.Connect(addr)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("connect to the test's dbus-daemon: %v", err)
		}
		time.Sleep(10 * time.Millisecond) // polls for the daemon's socket; no event says it listens
	}
	t.Cleanup(func() { conn.Close() })
	f := &fakeSystemd{conn: conn, units: map[string]fakeUnit{}, nextID: 1000}
	f.onStart(func(name string) (uint32, *dbus.Error) { return f.finish(name, "active", "done"), nil })
	f.onStop(func(name string) (uint32, *dbus.Error) { return f.finish(name, "inactive", "done"), nil })
	props := map[string]any{
		"Get": func(iface, prop string) (dbus.Variant, *dbus.Error) {
			if iface == "org.freedesktop.systemd1.Manager" && prop == "Version" {
				return dbus.MakeVariant("257"), nil
			}
			return dbus.Variant{}, dbus.NewError("org.freedesktop.DBus.Error.UnknownProperty", []any{prop})
		},
	}
	f.export(t, f.manager())
	if err := conn.ExportMethodTable(props, "/org/freedesktop/systemd1", "org.freedesktop.DBus.Properties"); err != nil {
		t.Fatal(err)
	}
	if r, err := conn.RequestName("org.freedesktop.systemd1", dbus.NameFlagDoNotQueue); err != nil || r != dbus.RequestNameReplyPrimaryOwner {
		t.Fatalf("own org.freedesktop.systemd1: %v %v", r, err)
	}
	t.Setenv("DBUS_SYSTEM_BUS_ADDRESS", addr)
	return f
}

// manager is the fake's table of Manager methods; a test that needs
// some of them to act otherwise replaces them and exports it again
// (export).
func (f *fakeSystemd) manager() map[string]any {
	return map[string]any{
		"StartUnit": func(name, mode string) (dbus.ObjectPath, *dbus.Error) {
			f.startCalls.Add(1)
			defer trackIn(&f.startsIn, &f.maxStartsIn)()
			id, derr := (*f.startFn.Load())(name)
			return jobPath(id), derr
		},
		"StopUnit": func(name, mode string) (dbus.ObjectPath, *dbus.Error) {
			f.stopCalls.Add(1)
			defer trackIn(&f.stopsIn, &f.maxStopsIn)()
			id, derr := (*f.stopFn.Load())(name)
			return jobPath(id), derr
		},
		"ListUnitsByNames": func(names []string) ([]fakeUnit, *dbus.Error) { return f.list(names), nil },
		"GetUnitProcesses": func(name string) ([]fakeProcess, *dbus.Error) {
			f.procsIn.Add(1)
			defer f.procsIn.Add(-1)
			if g := f.procsGate.Load(); g != nil {
				<-*g
			}
			return []fakeProcess{}, nil
		},
		"KillUnit":        func(name, who string, sig int32) *dbus.Error { return nil },
		"ResetFailedUnit": func(name string) *dbus.Error { return nil },
		"Subscribe":       func() *dbus.Error { return nil },
	}
}

// export exports manager as the fake's Manager methods, in place of the
// ones before (ExportMethodTable replaces an interface's methods).
func (f *fakeSystemd) export(t *testing.T, manager map[string]any) {
	t.Helper()
	if err := f.conn.ExportMethodTable(manager, "/org/freedesktop/systemd1", "org.freedesktop.systemd1.Manager"); err != nil {
		t.Fatal(err)
	}
}

// list is the fake's ListUnitsByNames: a unit it does not know is
// not-found.
func (f *fakeSystemd) list(names []string) []fakeUnit {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []fakeUnit
	for _, n := range names {
		u, ok := f.units[n]
		if !ok {
			u = fakeUnit{Name: n, LoadState: "not-found", ActiveState: "inactive", SubState: "dead", Path: "/", JobPath: "/"}
		}
		out = append(out, u)
	}
	return out
}

func jobPath(id uint32) dbus.ObjectPath {
	if id == 0 {
		return "/"
	}
	return dbus.ObjectPath(fmt.Sprintf("/org/freedesktop/systemd1/job/%d", id))
}

// set sets a unit's state (jobID 0: none).
func (f *fakeSystemd) set(unit, active string, jobID uint32, jobType string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	sub := map[string]string{"active": "running", "inactive": "dead", "failed": "failed", "activating": "start", "deactivating": "stop-sigterm"}[active]
	f.units[unit] = fakeUnit{Name: unit, LoadState: "loaded", ActiveState: active, SubState: sub,
		Path: "/org/freedesktop/systemd1/unit/x", JobId: jobID, JobType: jobType, JobPath: jobPath(jobID)}
}

// job allocates a job id.
func (f *fakeSystemd) job() uint32 {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nextID++
	return f.nextID
}

// finish runs a job to its end at once: the unit goes to state, then
// JobRemoved(result) is sent (before the call's answer, as systemd may).
func (f *fakeSystemd) finish(unit, state, result string) uint32 {
	id := f.job()
	f.set(unit, state, 0, "")
	f.removed(id, unit, result)
	return id
}

func (f *fakeSystemd) removed(id uint32, unit, result string) {
	f.conn.Emit("/org/freedesktop/systemd1", "org.freedesktop.systemd1.Manager.JobRemoved", id, jobPath(id), unit, result)
}

// ended ends start job id with result, the unit going to state: the state
// shows the job until s has taken its JobRemoved, so a Start that reads
// the job gone from the state finds its result, where under load it
// could read the state first and wait out jobResultGrace for a signal
// still on its way. s has taken the JobRemoved once it has taken a
// second one sent after it on the same connection, for a job of no
// call's (kept in s.jobs.early).
func (f *fakeSystemd) ended(t *testing.T, s *Systemd, id uint32, unit, state, result string) {
	t.Helper()
	f.set(unit, state, id, "start")
	f.removed(id, unit, result)
	marker := f.job() | 1<<31
	f.removed(marker, "marker.service", "done")
	seen := func() bool {
		s.jobs.mu.Lock()
		defer s.jobs.mu.Unlock()
		_, ok := s.jobs.early[marker]
		return ok
	}
	if !until(10*time.Second, seen) {
		t.Fatalf("job %d's JobRemoved not taken", id)
	}
	f.set(unit, state, 0, "")
}

// logs collects a Systemd's log lines.
type logs struct {
	mu    sync.Mutex
	lines []string
}

func (l *logs) logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
}

func (l *logs) with(s string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range l.lines {
		if strings.Contains(line, s) {
			out = append(out, line)
		}
	}
	return out
}

func dialFake(t *testing.T, lg *logs) *Systemd {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	opts := Options{PollInterval: 100 * time.Millisecond}
	if lg != nil {
		opts.Logf = lg.logf
	}
	s, err := Dial(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// until polls cond every 5ms for at most d; only for conditions no event
// announces (calls arriving at the fake).
func until(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}

// Sanity check of the fake: a start and a stop go through.
func TestBreakFakeSystemd(t *testing.T) {
	f := newFakeSystemd(t)
	s := dialFake(t, nil)
	ctx := ctxFor(t, 10*time.Second)
	if err := s.Start(ctx, "a.service"); err != nil {
		t.Fatal(err)
	}
	if err := s.Stop(ctx, "a.service", time.Minute); err != nil {
		t.Fatal(err)
	}
	if f.startCalls.Load() != 1 || f.stopCalls.Load() != 1 {
		t.Fatalf("%d StartUnit, %d StopUnit calls; want 1, 1", f.startCalls.Load(), f.stopCalls.Load())
	}
}

// holdStops makes StopUnit hold its answer until the returned release.
func holdStops(t *testing.T, f *fakeSystemd) (release func()) {
	gate := make(chan struct{})
	f.onStop(func(name string) (uint32, *dbus.Error) {
		<-gate
		return f.finish(name, "inactive", "done"), nil
	})
	var once sync.Once
	release = func() { once.Do(func() { close(gate) }) }
	t.Cleanup(release)
	return release
}

// At most stopBound StopUnit calls wait for systemd's answer at once
// (the commit's "48 StopUnit calls"). The fake holds every answer; 60
// units are stopped.
func TestBreakStopCallsAreBounded(t *testing.T) {
	f := newFakeSystemd(t)
	s := dialFake(t, nil)
	release := holdStops(t, f)
	const n = stopBound + 12
	errs := make(chan error, n)
	for i := range n {
		u := fmt.Sprintf("s%d.service", i)
		f.set(u, "active", 0, "")
		go func() { errs <- s.Stop(ctxFor(t, 30*time.Second), u, time.Minute) }()
	}
	if !until(10*time.Second, func() bool { return f.stopsIn.Load() >= stopBound }) {
		t.Fatalf("only %d StopUnit calls reached systemd", f.stopsIn.Load())
	}
	if until(2*time.Second, func() bool { return f.stopsIn.Load() > stopBound }) {
		t.Errorf("%d StopUnit calls waiting for systemd's answer at once, want at most %d", f.stopsIn.Load(), stopBound)
	}
	release()
	for range n {
		if err := <-errs; err != nil {
			t.Errorf("Stop: %v", err)
		}
	}
}

// The point of the bound: with every stop of a daemon that lost many
// leases pending in a busy systemd, the connection stays under
// dbus-daemon's 128 pending replies, so a read of a unit's state (the
// guard's, a watch's) still gets through. 140 stops are held.
func TestBreakStateReadsDuringManyPendingStops(t *testing.T) {
	f := newFakeSystemd(t)
	var lg logs
	s := dialFake(t, &lg)
	release := holdStops(t, f)
	const n = 140
	errs := make(chan error, n)
	for i := range n {
		u := fmt.Sprintf("s%d.service", i)
		f.set(u, "active", 0, "")
		go func() { errs <- s.Stop(ctxFor(t, time.Minute), u, 2*time.Minute) }()
	}
	if !until(10*time.Second, func() bool { return f.stopsIn.Load() >= stopBound }) {
		t.Fatalf("only %d StopUnit calls reached systemd", f.stopsIn.Load())
	}
	// Let the other Stops get as far as they go (to a stop slot, or to
	// dbus-daemon's limit).
	until(2*time.Second, func() bool { return f.stopsIn.Load() >= 128 })
	f.set("other.service", "active", 0, "")
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	st, err := s.State(ctx, "other.service")
	cancel()
	if err != nil || st.ActiveState != "active" {
		t.Errorf("a state read with %d StopUnit calls pending: %v, %v", f.stopsIn.Load(), st, err)
	}
	if l := lg.with("maximum number of pending replies"); len(l) > 0 {
		t.Errorf("%d calls refused by dbus-daemon's pending-replies limit, first: %s", len(l), l[0])
	}
	release()
	for range n {
		if err := <-errs; err != nil {
			t.Errorf("Stop: %v", err)
		}
	}
}

// Starts never hold up a stop: with startBound StartUnit calls that
// systemd does not answer (and more waiting for a slot), a stop is
// queued and confirmed.
func TestBreakStopNotHeldUpByHungStarts(t *testing.T) {
	f := newFakeSystemd(t)
	s := dialFake(t, nil)
	gate := make(chan struct{})
	var once sync.Once
	answer := func() { once.Do(func() { close(gate) }) }
	t.Cleanup(answer)
	f.onStart(func(name string) (uint32, *dbus.Error) { <-gate; return f.finish(name, "active", "done"), nil })
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	const n = startBound + 8
	errs := make(chan error, n)
	for i := range n {
		go func() { errs <- s.Start(ctx, fmt.Sprintf("h%d.service", i)) }()
	}
	if !until(10*time.Second, func() bool { return f.startsIn.Load() >= startBound }) {
		t.Fatalf("only %d StartUnit calls reached systemd", f.startsIn.Load())
	}
	if until(500*time.Millisecond, func() bool { return f.startsIn.Load() > startBound }) {
		t.Errorf("%d StartUnit calls at once, want at most %d", f.startsIn.Load(), startBound)
	}
	f.set("victim.service", "active", 0, "")
	if err := s.Stop(ctxFor(t, 10*time.Second), "victim.service", time.Minute); err != nil {
		t.Fatalf("Stop behind %d hung starts: %v", n, err)
	}
	// A start whose ctx ends while it waits for a slot reports ctx's
	// error and never reaches systemd.
	before := f.startCalls.Load()
	sctx, scancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	err := s.Start(sctx, "late.service")
	scancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Start waiting for a slot: %v; want ctx's deadline", err)
	}
	if got := f.startCalls.Load(); got != before {
		t.Errorf("a start that never got a slot reached systemd (%d calls, %d before)", got, before)
	}
	// Once systemd answers the hung calls (their Starts gave up before),
	// their slots are free again.
	cancel()
	for range n {
		<-errs
	}
	answer()
	if !until(5*time.Second, func() bool { return len(s.startCalls) == 0 }) {
		t.Errorf("%d start slots still taken after systemd answered every call", len(s.startCalls))
	}
	f.onStart(func(name string) (uint32, *dbus.Error) { return f.finish(name, "active", "done"), nil })
	if err := s.Start(ctxFor(t, 10*time.Second), "after.service"); err != nil {
		t.Errorf("Start after the hung starts: %v", err)
	}
}

// A StartUnit that systemd refuses gives its slot back: after ten times
// startBound refused starts, a start goes through.
func TestBreakStartSlotsComeBackAfterErrors(t *testing.T) {
	f := newFakeSystemd(t)
	s := dialFake(t, nil)
	f.onStart(func(name string) (uint32, *dbus.Error) {
		return 0, dbus.NewError("org.freedesktop.systemd1.NoSuchUnit", []any{"no " + name})
	})
	var wg sync.WaitGroup
	for i := range 10 * startBound {
		wg.Go(func() {
			if err := s.Start(ctxFor(t, 10*time.Second), fmt.Sprintf("e%d.service", i)); err == nil {
				t.Errorf("Start refused by systemd: nil")
			}
		})
	}
	wg.Wait()
	if !until(5*time.Second, func() bool { return len(s.startCalls) == 0 }) {
		t.Fatalf("%d start slots still taken after refused starts", len(s.startCalls))
	}
	f.onStart(func(name string) (uint32, *dbus.Error) { return f.finish(name, "active", "done"), nil })
	if err := s.Start(ctxFor(t, 5*time.Second), "ok.service"); err != nil {
		t.Fatalf("Start after refused starts: %v", err)
	}
}

// Two Starts of one unit at once get the same job from systemd (the
// second is merged into the first); the job fails. Both must report the
// job's result "failed".
func TestBreakMergedStartBothSeeResult(t *testing.T) {
	f := newFakeSystemd(t)
	s := dialFake(t, nil)
	id := f.job()
	var arrived atomic.Int64
	gate := make(chan struct{})
	f.onStart(func(name string) (uint32, *dbus.Error) {
		arrived.Add(1)
		<-gate
		return id, nil
	})
	f.set("m.service", "inactive", id, "start")
	type res struct {
		ch     <-chan string
		forget func()
		err    error
	}
	got := make(chan res, 2)
	pool := make(chan struct{}, 2)
	for range 2 {
		go func() {
			ctx := ctxFor(t, 10*time.Second)
			sl, err := takeSlot(ctx, pool, 1) // a pool of the test's: both calls at once
			if err != nil {
				got <- res{err: err}
				return
			}
			ch, forget, err := s.queueJob(ctx, "m.service", true, sl)
			got <- res{ch, forget, err}
		}()
	}
	if !until(10*time.Second, func() bool { return arrived.Load() == 2 }) {
		t.Fatal("the two StartUnit calls did not reach the fake")
	}
	close(gate)
	a, b := <-got, <-got
	if a.err != nil || b.err != nil {
		t.Fatal(a.err, b.err)
	}
	f.set("m.service", "failed", 0, "")
	f.removed(id, "m.service", "failed")
	for i, r := range []res{a, b} {
		select {
		case r := <-r.ch:
			if r != "failed" {
				t.Errorf("caller %d: result %q", i, r)
			}
		case <-time.After(3 * time.Second):
			t.Errorf("caller %d of merged job %d: no result", i, id)
		}
	}
	a.forget()
	b.forget()
}

// A job result that says done for a unit systemd still reports not
// running is no start: Start decides from the state.
func TestBreakStartDoneButNotRunning(t *testing.T) {
	f := newFakeSystemd(t)
	s := dialFake(t, nil)
	f.onStart(func(name string) (uint32, *dbus.Error) { return f.finish(name, "inactive", "done"), nil })
	err := s.Start(ctxFor(t, 10*time.Second), "d.service")
	if !errors.Is(err, ErrStartFailed) {
		t.Fatalf("Start of a unit left inactive with its job done: %v; want ErrStartFailed", err)
	}
}

// A stop job whose result is lost (no JobRemoved ever) is confirmed from
// the state once the unit is stopped; one whose result says done while
// the unit is still active is never a confirmed stop: Stop asks again.
func TestBreakStopJobResultLostOrWrong(t *testing.T) {
	f := newFakeSystemd(t)
	s := dialFake(t, nil)

	// Lost: the job stays queued for a while, then the unit is inactive.
	f.onStop(func(name string) (uint32, *dbus.Error) {
		id := f.job()
		f.set(name, "deactivating", id, "stop")
		return id, nil
	})
	f.set("lost.service", "active", 0, "")
	errs := make(chan error, 1)
	go func() { errs <- s.Stop(ctxFor(t, 10*time.Second), "lost.service", time.Minute) }()
	if !until(5*time.Second, func() bool { return f.stopCalls.Load() == 1 }) {
		t.Fatal("no StopUnit")
	}
	select {
	case err := <-errs:
		t.Fatalf("Stop returned %v while the unit was deactivating with its job queued", err)
	case <-time.After(300 * time.Millisecond): // several polls
	}
	f.set("lost.service", "inactive", 0, "")
	if err := <-errs; err != nil {
		t.Fatalf("Stop once the unit is inactive, no job result: %v", err)
	}

	// Wrong: "done" but the unit stays active without a job.
	f.stopCalls.Store(0)
	f.onStop(func(name string) (uint32, *dbus.Error) {
		id := f.job()
		f.removed(id, name, "done")
		return id, nil
	})
	f.set("wrong.service", "active", 0, "")
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	err := s.Stop(ctx, "wrong.service", time.Minute)
	if err == nil {
		t.Fatal("Stop confirmed a unit that is still active")
	}
	if f.stopCalls.Load() < 2 {
		t.Errorf("%d StopUnit calls: a stop job that ended with the unit still active was not queued again", f.stopCalls.Load())
	}
}

// A call given up on (Stop gives up on a StopUnit at the kill time, a
// Start when its ctx ends) is still waiting for systemd's answer at the
// bus: dbus-daemon counts it against its 128 pending replies until
// systemd answers. The bound must hold for those too. Here 100 Stops with
// a short stop_wait give up on their StopUnit at the kill time and queue
// another one after the SIGKILL; the fake answers none.
func TestBreakStopCallsGivenUpOnStillCount(t *testing.T) {
	f := newFakeSystemd(t)
	var lg logs
	s := dialFake(t, &lg)
	release := holdStops(t, f)
	const n = 100
	errs := make(chan error, n)
	for i := range n {
		u := fmt.Sprintf("g%d.service", i)
		f.set(u, "active", 0, "")
		go func() { errs <- s.Stop(ctxFor(t, time.Minute), u, time.Second) }()
	}
	if until(5*time.Second, func() bool { return f.stopsIn.Load() > stopBound }) {
		t.Errorf("%d StopUnit calls waiting for systemd's answer at the bus, want at most %d", f.stopsIn.Load(), stopBound)
	}
	f.set("other.service", "active", 0, "")
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	st, err := s.State(ctx, "other.service")
	cancel()
	if err != nil {
		t.Errorf("a state read with %d StopUnit calls pending at the bus: %v, %v", f.stopsIn.Load(), st, err)
	}
	release()
	for range n {
		if err := <-errs; err != nil {
			t.Errorf("Stop: %v", err)
		}
	}
}

// The same for starts whose ctx ends (a lease lost while systemd is busy
// with its starts): five rounds of startBound Starts that give up
// after 300ms on a systemd that answers none.
func TestBreakStartCallsGivenUpOnStillCount(t *testing.T) {
	f := newFakeSystemd(t)
	s := dialFake(t, nil)
	gate := make(chan struct{})
	t.Cleanup(func() { close(gate) })
	f.onStart(func(name string) (uint32, *dbus.Error) { <-gate; return f.finish(name, "active", "done"), nil })
	for round := range 5 {
		var wg sync.WaitGroup
		for i := range startBound {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
				defer cancel()
				s.Start(ctx, fmt.Sprintf("r%d-%d.service", round, i))
			})
		}
		wg.Wait()
	}
	if until(2*time.Second, func() bool { return f.startsIn.Load() > startBound }) {
		t.Errorf("%d StartUnit calls waiting for systemd's answer at the bus, want at most %d", f.startsIn.Load(), startBound)
	}
	f.set("other.service", "active", 0, "")
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	st, err := s.State(ctx, "other.service")
	cancel()
	if err != nil {
		t.Errorf("a state read with %d StartUnit calls pending at the bus: %v, %v", f.startsIn.Load(), st, err)
	}
}

// ---- in-node ----

// TestNodeBreakMergedStartJobResult: on a real systemd, a second
// StartUnit while the unit's start job is queued is merged into that job
// and answered with its path; the job then fails. Both calls must get
// the result "failed".
func TestNodeBreakMergedStartJobResult(t *testing.T) {
	t.Parallel()
	s := dialNode(t, Options{})
	const unit, gate = "ul-break-merged.service", "/run/ul-break-merged-go"
	os.Remove(gate)
	t.Cleanup(func() { os.Remove(gate) })
	installUnits(t, map[string]string{unit: "[Service]\nType=oneshot\nExecStart=/bin/sh -c 'while [ ! -e " + gate + " ]; do sleep 0.05; done; exit 3'\n"})
	ctx := ctxFor(t, 30*time.Second)
	queue := func() (<-chan string, func(), error) {
		sl, err := takeSlot(ctx, s.startCalls, 1)
		if err != nil {
			return nil, nil, err
		}
		return s.queueJob(ctx, unit, true, sl)
	}
	a, forgetA, err := queue()
	if err != nil {
		t.Fatal(err)
	}
	defer forgetA()
	b, forgetB, err := queue()
	if err != nil {
		t.Fatal(err)
	}
	defer forgetB()
	if job := show(t, unit, "Job"); job == "" || job == "0" {
		t.Fatalf("no start job queued for %s (Job=%q)", unit, job)
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	timeout := time.NewTimer(20 * time.Second)
	defer timeout.Stop()
	for i, ch := range []<-chan string{a, b} {
		select {
		case r := <-ch:
			if r != "failed" {
				t.Errorf("call %d: job result %q, want failed", i, r)
			}
		case <-timeout.C:
			t.Errorf("call %d of the merged start job: no result within 20s", i)
			return
		}
	}
}

// TestNodeBreakConcurrentStopsOfOneUnit: two Stops of one unit at once
// (their StopUnit calls merged into one job whose ExecStop= waits) both
// return nil once the unit is stopped, and not before.
func TestNodeBreakConcurrentStopsOfOneUnit(t *testing.T) {
	t.Parallel()
	s := dialNode(t, Options{})
	const unit, gate = "ul-break-twostops.service", "/run/ul-break-twostops-go"
	os.Remove(gate)
	t.Cleanup(func() { os.Remove(gate) })
	installUnits(t, map[string]string{unit: "[Service]\nExecStart=/bin/sleep 86417\nExecStop=/bin/sh -c 'while [ ! -e " + gate + " ]; do sleep 0.05; done'\nTimeoutStopSec=60\n"})
	if err := s.Start(ctxFor(t, 10*time.Second), unit); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 2)
	for range 2 {
		go func() { errs <- s.Stop(ctxFor(t, 40*time.Second), unit, time.Minute) }()
	}
	waitFor(t, 10*time.Second, "the stop job running", func() bool { return show(t, unit, "ActiveState") == "deactivating" })
	select {
	case err := <-errs:
		t.Fatalf("a Stop returned %v while ExecStop= still runs", err)
	default:
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Errorf("Stop: %v", err)
		}
	}
	if st := show(t, unit, "ActiveState"); st != "inactive" && st != "failed" {
		t.Errorf("ActiveState after both Stops: %s", st)
	}
}
