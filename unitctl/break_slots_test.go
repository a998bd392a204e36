package unitctl

// Review tests of the call pools (slot, takeSlot, detached) and their use
// in Start, Stop and unitProcesses, against the fake systemd of
// break_jobs_test.go.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sd "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
	"github.com/unitlease/unitlease/internal/control"
)

// fakeExtras are Manager methods of the fake that a test replaces, and
// counters for the ones break_jobs_test.go does not count.
type fakeExtras struct {
	procCalls, killCalls atomic.Int64
	killsIn, maxKillsIn  atomic.Int64
	resets               atomic.Int64
	procs                atomic.Pointer[func(string) ([]fakeProcess, *dbus.Error)]
	kill                 atomic.Pointer[func(string) *dbus.Error]
}

func trackIn(in, max *atomic.Int64) func() {
	n := in.Add(1)
	for m := max.Load(); n > m && !max.CompareAndSwap(m, n); m = max.Load() {
	}
	return func() { in.Add(-1) }
}

// withExtras exports the fake's Manager table again (ExportMethodTable
// replaces an interface's methods), the same as newFakeSystemd's but with
// GetUnitProcesses, KillUnit and ResetFailedUnit counted and replaceable.
func withExtras(t *testing.T, f *fakeSystemd) *fakeExtras {
	t.Helper()
	x := &fakeExtras{}
	procs := func(string) ([]fakeProcess, *dbus.Error) { return []fakeProcess{}, nil }
	kill := func(string) *dbus.Error { return nil }
	x.procs.Store(&procs)
	x.kill.Store(&kill)
	manager := f.manager()
	manager["GetUnitProcesses"] = func(name string) ([]fakeProcess, *dbus.Error) {
		x.procCalls.Add(1)
		return (*x.procs.Load())(name)
	}
	manager["KillUnit"] = func(name, who string, sig int32) *dbus.Error {
		x.killCalls.Add(1)
		defer trackIn(&x.killsIn, &x.maxKillsIn)()
		return (*x.kill.Load())(name)
	}
	manager["ResetFailedUnit"] = func(name string) *dbus.Error { x.resets.Add(1); return nil }
	f.export(t, manager)
	return x
}

// serviceResultOf makes the fake answer unit's Service.Result with *r.
func serviceResultOf(t *testing.T, f *fakeSystemd, unit string, r *atomic.Value) {
	t.Helper()
	props := map[string]any{
		"Get": func(iface, prop string) (dbus.Variant, *dbus.Error) {
			if iface == "org.freedesktop.systemd1.Service" && prop == "Result" {
				return dbus.MakeVariant(r.Load().(string)), nil
			}
			return dbus.Variant{}, dbus.NewError("org.freedesktop.DBus.Error.UnknownProperty", []any{prop})
		},
	}
	path := dbus.ObjectPath("/org/freedesktop/systemd1/unit/" + sd.PathBusEscape(unit))
	if err := f.conn.ExportMethodTable(props, path, "org.freedesktop.DBus.Properties"); err != nil {
		t.Fatal(err)
	}
}

// poolsEmpty waits (bounded) until every pool of s is empty.
func poolsEmpty(s *Systemd, d time.Duration) bool {
	return until(d, func() bool { return len(s.startCalls) == 0 && len(s.stopCalls) == 0 && len(s.procCalls) == 0 })
}

// A call whose caller's ctx had already ended must not go to systemd.
// Before the commit queueJob's call was made with ctx, and godbus sends
// nothing on an ended context (conn.send's "short path"). detached makes
// it with s.life instead, and with() runs op once before it looks at
// ctx: the call goes out. Here detached is given an ended ctx 50 times,
// with a slot it holds.
func TestBreakSlotDetachedCallsWithEndedCtx(t *testing.T) {
	f := newFakeSystemd(t)
	s := dialFake(t, nil)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	const n = 50
	for i := range n {
		s.startCalls <- struct{}{}
		sl := &slot{pool: s.startCalls}
		sl.holders.Store(1)
		err := s.detached(ctx, sl, func(callCtx context.Context, c *sd.Conn) error {
			_, err := c.StartUnitContext(callCtx, fmt.Sprintf("late%d.service", i), "replace", nil)
			return err
		})
		if err == nil {
			t.Fatal("detached with an ended ctx: nil error")
		}
	}
	if !poolsEmpty(s, 5*time.Second) {
		t.Fatalf("%d start slots still held", len(s.startCalls))
	}
	if got := f.startCalls.Load(); got != 0 {
		t.Errorf("%d of %d StartUnit calls reached systemd although their ctx had ended before the call", got, n)
	}
}

// The same through the public API: a Start (Stop, cgroup listing) whose
// ctx has ended (the lease was lost, the daemon gave up on it) must queue
// no job. takeSlot's select picks the free place as often as ctx.Done(),
// and the place taken, detached makes the call anyway.
func TestBreakSlotEndedCtxStillReachesSystemd(t *testing.T) {
	f := newFakeSystemd(t)
	x := withExtras(t, f)
	s := dialFake(t, nil)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	const n = 200
	for i := range n {
		if err := s.Start(ctx, fmt.Sprintf("c%d.service", i)); err == nil {
			t.Fatal("Start with an ended ctx: nil")
		}
	}
	for i := range n {
		u := fmt.Sprintf("d%d.service", i)
		f.set(u, "active", 0, "")
		if err := s.Stop(ctx, u, time.Minute); err == nil {
			t.Fatal("Stop with an ended ctx: nil")
		}
	}
	for i := range n {
		if _, err := s.unitProcesses(ctx, fmt.Sprintf("p%d.service", i)); err == nil {
			t.Fatal("unitProcesses with an ended ctx: nil")
		}
	}
	if !poolsEmpty(s, 5*time.Second) {
		t.Fatalf("slots still held: %d start, %d stop, %d procs", len(s.startCalls), len(s.stopCalls), len(s.procCalls))
	}
	if got := f.startCalls.Load(); got != 0 {
		t.Errorf("%d of %d Starts with an ended ctx queued a start job (StartUnit reached systemd)", got, n)
	}
	if got := f.stopCalls.Load(); got != 0 {
		t.Errorf("%d of %d Stops with an ended ctx sent StopUnit", got, n)
	}
	if got := x.procCalls.Load(); got != 0 {
		t.Errorf("%d of %d listings with an ended ctx sent GetUnitProcesses", got, n)
	}
}

// "A start holds one of 32 places from its StartUnit call until its job
// ends, or 2 s at most": with systemd answering the call after 1.5 s and
// the job never ending, the place is free 2 s after the call. The code
// starts the 2 s once the call is answered (start.go: hold :=
// time.NewTimer after queueJob), so the place is held 3.5 s.
func TestBreakStartHoldCountsFromTheCall(t *testing.T) {
	f := newFakeSystemd(t)
	s := dialFake(t, nil)
	var calledAt atomic.Int64
	f.onStart(func(name string) (uint32, *dbus.Error) {
		calledAt.Store(time.Now().UnixNano())
		answer := make(chan struct{})
		time.AfterFunc(1500*time.Millisecond, func() { close(answer) }) // a systemd slow to answer
		<-answer
		id := f.job()
		f.set(name, "activating", id, "start") // the job never ends
		return id, nil
	})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Start(ctx, "slow.service") }()
	if !until(5*time.Second, func() bool { return calledAt.Load() != 0 }) {
		t.Fatal("no StartUnit")
	}
	if !until(8*time.Second, func() bool { return len(s.startCalls) == 0 }) {
		t.Fatal("the start's place was never given back")
	}
	held := time.Since(time.Unix(0, calledAt.Load()))
	if held > startSlotHold+400*time.Millisecond {
		t.Errorf("the place was held %v from the StartUnit call (answered after 1.5s, job never ending); want about %v", held.Round(100*time.Millisecond), startSlotHold)
	}
	cancel()
	<-done
}

// The start-limit-hit path calls startOnce twice, each taking a place:
// with 31 of the 32 places held by starts systemd does not answer, the
// retry must find the place the first attempt gave back (no start waits
// for a place only it holds).
func TestBreakStartLimitHitRetryWithPoolNearlyFull(t *testing.T) {
	f := newFakeSystemd(t)
	x := withExtras(t, f)
	var lg logs
	s := dialFake(t, &lg)
	var result atomic.Value
	result.Store("start-limit-hit")
	serviceResultOf(t, f, "lim.service", &result)
	gate := make(chan struct{})
	var once sync.Once
	open := func() { once.Do(func() { close(gate) }) }
	t.Cleanup(open)
	var limCalls atomic.Int64
	f.onStart(func(name string) (uint32, *dbus.Error) {
		if name != "lim.service" {
			<-gate
			return f.finish(name, "active", "done"), nil
		}
		if limCalls.Add(1) == 1 {
			return f.finish(name, "failed", "failed"), nil
		}
		result.Store("success")
		return f.finish(name, "active", "done"), nil
	})
	hctx, hcancel := context.WithCancel(t.Context())
	defer hcancel()
	var wg sync.WaitGroup
	for i := range startBound - 1 {
		wg.Go(func() { s.Start(hctx, fmt.Sprintf("hung%d.service", i)) })
	}
	if !until(10*time.Second, func() bool { return f.startsIn.Load() == startBound-1 }) {
		t.Fatalf("%d hung StartUnit calls, want %d", f.startsIn.Load(), startBound-1)
	}
	if err := s.Start(ctxFor(t, 10*time.Second), "lim.service"); err != nil {
		t.Fatalf("Start of a unit at its start limit, with %d places held: %v", startBound-1, err)
	}
	if limCalls.Load() != 2 || x.resets.Load() != 1 {
		t.Errorf("%d StartUnit calls and %d ResetFailedUnit for lim.service; want 2 and 1", limCalls.Load(), x.resets.Load())
	}
	hcancel()
	open()
	wg.Wait()
	if !poolsEmpty(s, 5*time.Second) {
		t.Errorf("%d start places still held", len(s.startCalls))
	}
}

// Every path gives its places back, and the bounds hold, under -race:
// starts that succeed, that systemd refuses, whose job outlasts the 2 s
// hold, that hit the start limit and are retried, whose ctx ends at a
// random point (waiting for a place, in the call, waiting for the job),
// stops, and cgroup listings, all at once.
func TestBreakSlotsComeBackOnEveryPath(t *testing.T) {
	f := newFakeSystemd(t)
	x := withExtras(t, f)
	var lg logs
	s := dialFake(t, &lg)
	var limCalls sync.Map // name -> *atomic.Int64
	results := map[string]*atomic.Value{}
	// Enough for every path many times over, few enough that the slow
	// starts, each holding its place for startSlotHold, fit the timeout.
	n := 48 * maxStarts
	for i := range n {
		if i%6 == 4 {
			u := fmt.Sprintf("lim%d.service", i)
			v := &atomic.Value{}
			v.Store("start-limit-hit")
			results[u] = v
			serviceResultOf(t, f, u, v)
		}
	}
	f.onStart(func(name string) (uint32, *dbus.Error) {
		switch {
		case strings.HasPrefix(name, "err"):
			return 0, dbus.NewError("org.freedesktop.systemd1.NoSuchUnit", []any{"no " + name})
		case strings.HasPrefix(name, "slow"):
			id := f.job()
			f.set(name, "activating", id, "start")
			time.AfterFunc(startSlotHold+300*time.Millisecond, func() {
				f.set(name, "active", 0, "")
				f.removed(id, name, "done")
			})
			return id, nil
		case strings.HasPrefix(name, "lim"):
			c, _ := limCalls.LoadOrStore(name, &atomic.Int64{})
			if c.(*atomic.Int64).Add(1) == 1 {
				return f.finish(name, "failed", "failed"), nil
			}
			results[name].Store("success")
			return f.finish(name, "active", "done"), nil
		case strings.HasPrefix(name, "hang"):
			answer := make(chan struct{})
			time.AfterFunc(time.Duration(rand.IntN(300))*time.Millisecond, func() { close(answer) }) // systemd's latency
			<-answer
			return f.finish(name, "active", "done"), nil
		}
		return f.finish(name, "active", "done"), nil
	})
	var wg sync.WaitGroup
	var unexpected atomic.Int64
	for i := range n {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			switch i % 6 {
			case 0:
				if err := s.Start(ctx, fmt.Sprintf("ok%d.service", i)); err != nil {
					unexpected.Add(1)
					t.Errorf("Start ok%d: %v", i, err)
				}
			case 1:
				if err := s.Start(ctx, fmt.Sprintf("err%d.service", i)); err == nil {
					t.Errorf("Start err%d: nil", i)
				}
			case 2:
				if err := s.Start(ctx, fmt.Sprintf("slow%d.service", i)); err != nil {
					t.Errorf("Start slow%d: %v", i, err)
				}
			case 3:
				cctx, ccancel := context.WithCancel(ctx)
				time.AfterFunc(time.Duration(rand.IntN(400))*time.Millisecond, ccancel) // the lease lost at a random point
				s.Start(cctx, fmt.Sprintf("hang%d.service", i))
			case 4:
				if err := s.Start(ctx, fmt.Sprintf("lim%d.service", i)); err != nil {
					t.Errorf("Start lim%d: %v", i, err)
				}
			case 5:
				u := fmt.Sprintf("st%d.service", i)
				f.set(u, "active", 0, "")
				if err := s.Stop(ctx, u, time.Minute); err != nil {
					t.Errorf("Stop %s: %v", u, err)
				}
				if _, err := s.unitProcesses(ctx, u); err != nil {
					t.Errorf("unitProcesses %s: %v", u, err)
				}
			}
		})
	}
	wg.Wait()
	if !poolsEmpty(s, 5*time.Second) {
		t.Errorf("places still held once every call returned: %d start, %d stop, %d procs", len(s.startCalls), len(s.stopCalls), len(s.procCalls))
	}
	if m := f.maxStartsIn.Load(); m > startBound {
		t.Errorf("%d StartUnit calls at systemd at once, want at most %d", m, startBound)
	}
	if l := lg.with("maximum number of pending replies"); len(l) > 0 {
		t.Errorf("%d calls refused by dbus-daemon, first: %s", len(l), l[0])
	}
	if err := s.Start(ctxFor(t, 5*time.Second), "after.service"); err != nil {
		t.Errorf("Start after the storm: %v", err)
	}
	if got, want := x.resets.Load(), int64(len(results)); got != want {
		t.Errorf("%d ResetFailedUnit calls, want one for each of the %d units at their start limit", got, want)
	}
}

// Starts never hold up a stop, also while they hold their places for
// their jobs (answered calls, jobs that outlast the hold): a stop goes
// through at once, and a 33rd start gets a place once the 2 s are over.
func TestBreakStopNotHeldByStartsWaitingForJobs(t *testing.T) {
	f := newFakeSystemd(t)
	s := dialFake(t, nil)
	f.onStart(func(name string) (uint32, *dbus.Error) {
		if name == "late.service" {
			return f.finish(name, "active", "done"), nil
		}
		id := f.job()
		f.set(name, "activating", id, "start") // never ends
		return id, nil
	})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var wg sync.WaitGroup
	for i := range startBound {
		wg.Go(func() { s.Start(ctx, fmt.Sprintf("j%d.service", i)) })
	}
	if !until(10*time.Second, func() bool { return f.startCalls.Load() == startBound && len(s.startCalls) == startBound }) {
		t.Fatalf("%d StartUnit calls, %d places held", f.startCalls.Load(), len(s.startCalls))
	}
	f.set("victim.service", "active", 0, "")
	begun := time.Now()
	if err := s.Stop(ctxFor(t, 10*time.Second), "victim.service", time.Minute); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if d := time.Since(begun); d > time.Second {
		t.Errorf("Stop took %v behind %d starts holding their places", d, startBound)
	}
	begun = time.Now()
	if err := s.Start(ctxFor(t, 10*time.Second), "late.service"); err != nil {
		t.Fatalf("33rd Start: %v", err)
	}
	if d := time.Since(begun); d > startSlotHold+time.Second {
		t.Errorf("33rd Start took %v, want about the 2 s hold at most", d)
	}
	cancel()
	wg.Wait()
}

// The bound the commit relies on: calls waiting for systemd's answer stay
// under dbus-daemon's 128 pending replies per connection. KillUnit calls
// have no pool: 140 Stops of a node that lost its leases, on a systemd
// busy enough to answer neither StopUnit nor KillUnit, each send one at
// the kill time, besides the 40 StopUnit calls. A state read then fails
// (the bus refuses it), as in the commit's 143 refusals.
func TestBreakKillCallsAreUnbounded(t *testing.T) {
	f := newFakeSystemd(t)
	x := withExtras(t, f)
	var lg logs
	s := dialFake(t, &lg)
	releaseStops := holdStops(t, f)
	gate := make(chan struct{})
	var once sync.Once
	releaseKills := func() { once.Do(func() { close(gate) }) }
	t.Cleanup(releaseKills)
	kill := func(string) *dbus.Error { <-gate; return nil }
	x.kill.Store(&kill)
	const n = 140
	errs := make(chan error, n)
	for i := range n {
		u := fmt.Sprintf("k%d.service", i)
		f.set(u, "active", 0, "")
		go func() { errs <- s.Stop(ctxFor(t, time.Minute), u, time.Second) }()
	}
	until(10*time.Second, func() bool { return x.killsIn.Load()+f.stopsIn.Load() >= 128 })
	pending := x.killsIn.Load() + f.stopsIn.Load()
	f.set("other.service", "active", 0, "")
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	_, err := s.State(ctx, "other.service")
	cancel()
	if pending > 120 {
		t.Errorf("%d calls waiting for systemd at the bus (%d KillUnit, %d StopUnit); the pools bound StopUnit only", pending, x.killsIn.Load(), f.stopsIn.Load())
	}
	if err != nil {
		t.Errorf("a state read with %d calls pending: %v", pending, err)
	}
	if l := lg.with("maximum number of pending replies"); len(l) > 0 {
		t.Errorf("%d calls refused by dbus-daemon's pending-replies limit, first: %s", len(l), l[0])
	}
	releaseKills()
	releaseStops()
	for range n {
		if err := <-errs; err != nil && !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Stop: %v", err)
		}
	}
}

// ---- in-node: the guard's fast path and systemd's escaping ----

// TestNodeBreakGuardEscapedUnitName: systemd puts a unit named like a
// controller's file (cpu.service) in an escaped cgroup
// (/system.slice/_cpu.service); the fast path does not recognise that one
// (the fallback does), and it does recognise the unescaped
// /system.slice/cpu.service, which systemd never makes: a process that
// root put there is admitted as the unit's without being in it. Which
// names systemd escapes depends on its version (252: the part before the
// last "."; newer: any name that starts with a controller and a "."):
// the log line for cpu.ul-break-esc.service says which rule this one has.
func TestNodeBreakGuardEscapedUnitName(t *testing.T) {
	t.Parallel()
	s := dialNode(t, Options{})
	const unit, probe = "cpu.service", "cpu.ul-break-esc.service"
	installUnits(t, map[string]string{
		unit:  "[Service]\nExecStart=/bin/sleep 86418\n",
		probe: "[Service]\nExecStart=/bin/sleep 86420\n",
	})
	for _, u := range []string{unit, probe} {
		if err := s.Start(ctxFor(t, 10*time.Second), u); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%s: ControlGroup %s (escaped only by the newer rule)", probe, show(t, probe, "ControlGroup"))
	cg := show(t, unit, "ControlGroup")
	if cg != "/system.slice/_"+unit {
		t.Fatalf("%s: ControlGroup %s, want the escaped /system.slice/_%s", unit, cg, unit)
	}
	pid, err := strconv.Atoi(show(t, unit, "MainPID"))
	if err != nil || pid == 0 {
		t.Fatalf("MainPID %q", show(t, unit, "MainPID"))
	}
	main, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	t.Logf("%s's main process: %q", unit, main)
	if control.InUnitCgroup(int32(pid), unit) {
		t.Errorf("fast path recognised the escaped cgroup %s", cg)
	}
	if !control.InCgroup(int32(pid), cg) {
		t.Errorf("fallback does not find the unit's process in %s", cg)
	}
	// The unescaped name, made by hand (root), in the hierarchy systemd's
	// tree is in.
	root := "/sys/fs/cgroup"
	if _, err := os.Stat(filepath.Join(root, "cgroup.controllers")); err != nil {
		root = "/sys/fs/cgroup/systemd"
	}
	dir := filepath.Join(root, "system.slice", unit)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(dir) })
	cmd := exec.Command("/bin/sleep", "86419")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	other := int32(cmd.Process.Pid)
	text, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", other))
	if control.InUnitCgroup(other, unit) && !control.InCgroup(other, cg) {
		t.Errorf("a process in %q (not %s's cgroup %s) is admitted as %s's by the fast path; the fallback refuses it", text, unit, cg, unit)
	}
}
