package unitctl

import (
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// testStopWait is the stop_wait of the stop tests: SIGKILL at 1.5s.
const testStopWait = 2 * time.Second

// TestNodeStopKillsUnitIgnoringSIGTERM: a unit that ignores SIGTERM, and
// one whose main process exits on SIGTERM while a child ignores it
// (hashicorp/consul#2022), are both killed and inactive within stop_wait,
// with nothing of them left. Their own TimeoutStopSec=60 would keep
// systemd waiting: the SIGKILL is unitctl's.
func TestNodeStopKillsUnitIgnoringSIGTERM(t *testing.T) {
	t.Parallel()
	s := dialNode(t, Options{})
	cases := []struct{ name, execStart, marker string }{
		{"main ignores SIGTERM", `/bin/sh -c "trap '' TERM; exec sleep 86401"`, "sleep 86401"},
		{"child outlives main", `/bin/sh -c "(trap '' TERM; exec sleep 86402) & exec sleep infinity"`, "sleep 86402"},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			unit := fmt.Sprintf("ul-stop-kill-%d.service", i)
			installUnits(t, map[string]string{unit: "[Service]\nExecStart=" + c.execStart + "\nTimeoutStopSec=60\n"})
			if err := s.Start(ctxFor(t, 10*time.Second), unit); err != nil {
				t.Fatal(err)
			}
			waitFor(t, 5*time.Second, c.marker+" running", func() bool { return len(processesWith(c.marker)) == 1 })

			start := time.Now()
			var killed atomic.Bool
			err := s.Stop(OnKilled(ctxFor(t, time.Minute), func() { killed.Store(true) }), unit, testStopWait)
			took := time.Since(start)
			if err != nil {
				t.Fatalf("Stop: %v", err)
			}
			if !killed.Load() {
				t.Errorf("a stop that sent SIGKILL did not say so (OnKilled)")
			}
			t.Logf("stopped in %v (SIGKILL due at %v)", took.Round(time.Millisecond), testStopWait-KillMargin(testStopWait))
			if took > testStopWait || took < testStopWait-KillMargin(testStopWait) {
				t.Errorf("Stop took %v: want the SIGKILL at %v and inactive by %v", took, testStopWait-KillMargin(testStopWait), testStopWait)
			}
			if st := show(t, unit, "ActiveState"); st != "inactive" && st != "failed" {
				t.Errorf("ActiveState after Stop: %s", st)
			}
			if left := processesWith(c.marker); len(left) > 0 {
				t.Errorf("processes left after Stop: %v", left)
			}
		})
	}
}

// TestNodeStopSaysWhenSIGKILLWasNeeded: a stop that succeeds calls
// OnKilled's function when systemd itself sent SIGKILL (a unit that
// ignores SIGTERM, its TimeoutStopSec= of 300 ms run out, long before
// Stop's own SIGKILL at 1.5 s), and not when SIGTERM was enough.
func TestNodeStopSaysWhenSIGKILLWasNeeded(t *testing.T) {
	t.Parallel()
	s := dialNode(t, Options{})
	cases := []struct {
		name, service, marker string
		killed                bool
	}{
		{"systemd's SIGKILL", "[Service]\nExecStart=/bin/sh -c \"trap '' TERM; exec sleep 86431\"\nTimeoutStopSec=300ms\n", "sleep 86431", true},
		{"SIGTERM enough", "[Service]\nExecStart=/bin/sleep 86432\n", "/bin/sleep 86432", false},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			unit := fmt.Sprintf("ul-stop-says-%d.service", i)
			installUnits(t, map[string]string{unit: c.service})
			if err := s.Start(ctxFor(t, 10*time.Second), unit); err != nil {
				t.Fatal(err)
			}
			// Active as soon as forked: the shell must have set its trap
			// (and exec'd) before the stop, or SIGTERM ends it.
			waitFor(t, 5*time.Second, c.marker+" running", func() bool { return len(processesWith(c.marker)) == 1 })
			var killed atomic.Bool
			if err := s.Stop(OnKilled(ctxFor(t, time.Minute), func() { killed.Store(true) }), unit, testStopWait); err != nil {
				t.Fatalf("Stop: %v", err)
			}
			if killed.Load() != c.killed {
				t.Errorf("OnKilled called: %t, want %t", killed.Load(), c.killed)
			}
		})
	}
}

// TestNodeStopFailsWhenKillDoesNotWork plays a process that even SIGKILL
// does not end (a task stuck in the kernel, which a container cannot
// make) by sending SIGCONT in place of SIGKILL: Stop must return
// ErrStopFailed once stop_wait has run out, not sooner, and without
// waiting another stop_wait: systemd answers every call at once here.
func TestNodeStopFailsWhenKillDoesNotWork(t *testing.T) {
	t.Parallel()
	s := dialNode(t, Options{})
	s.killSignal = int32(syscall.SIGCONT)
	unit := "ul-stop-unkillable.service"
	installUnits(t, map[string]string{unit: "[Service]\nExecStart=/bin/sh -c \"trap '' TERM; exec sleep 86403\"\nTimeoutStopSec=60\n"})
	if err := s.Start(ctxFor(t, 10*time.Second), unit); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "sleep 86403 running", func() bool { return len(processesWith("sleep 86403")) == 1 })
	start := time.Now()
	err := s.Stop(ctxFor(t, time.Minute), unit, testStopWait)
	took := time.Since(start)
	var je *JobError
	if !errors.Is(err, ErrStopFailed) || !errors.As(err, &je) {
		t.Fatalf("Stop = %v, want ErrStopFailed", err)
	}
	t.Logf("Stop: %v after %v", err, took.Round(time.Millisecond))
	if !je.Killed || je.State.Stopped() {
		t.Errorf("JobError %+v: want the kill sent and the unit not stopped", je)
	}
	if took < testStopWait || took >= 2*testStopWait {
		t.Errorf("Stop returned after %v, want once stop_wait %v has run out, before another has", took, testStopWait)
	}
	systemctl(t, "kill", "-s", "KILL", unit)
	waitState(t, s, unit, 5*time.Second, "inactive", "failed")
}

// TestNodeStopWaitsOutAHungBus: while the system bus does not answer
// (dbus-daemon stopped) for longer than stop_wait, Stop can confirm
// nothing, and a busy systemd is not a failed stop: it must neither report
// the units stopped nor fail, and once the bus answers again it confirms
// them, the running one stopped by its job or the SIGKILL, the one that
// was never running at once. The bus is resumed only once Stop has logged
// that systemd did not answer within stop_wait, which it does only after
// stop_wait has run out. Before the change, Stop returned ErrStopFailed
// ("systemd did not answer: context deadline exceeded") at stop_wait. Not
// parallel: every other test would hang with the bus.
func TestNodeStopWaitsOutAHungBus(t *testing.T) {
	unanswered := make(chan string, 16)
	s := dialNode(t, Options{Logf: func(f string, a ...any) {
		msg := fmt.Sprintf(f, a...)
		t.Log(msg)
		if strings.Contains(msg, "has not answered") {
			select {
			case unanswered <- msg:
			default:
			}
		}
	}})
	running, idle := "ul-stop-bus-hangs.service", "ul-stop-bus-hangs-idle.service"
	installUnits(t, map[string]string{running: "[Service]\nExecStart=/bin/sleep infinity\n", idle: "[Service]\nExecStart=/bin/sleep infinity\n"})
	if err := s.Start(ctxFor(t, 10*time.Second), running); err != nil {
		t.Fatal(err)
	}
	systemctl(t, "kill", "-s", "STOP", "dbus.service")
	resumed := false
	resume := func() {
		if !resumed {
			systemctl(t, "kill", "-s", "CONT", "dbus.service")
			resumed = true
		}
	}
	defer resume()
	errs := make(chan error, 2)
	for _, u := range []string{running, idle} {
		go func() { errs <- s.Stop(ctxFor(t, time.Minute), u, testStopWait) }()
	}
	select {
	case msg := <-unanswered:
		t.Logf("logged while the bus hangs: %s", msg)
	case err := <-errs:
		t.Fatalf("Stop returned while the bus hangs: %v; want it to wait for systemd's answer", err)
	}
	resume()
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatalf("Stop once the bus answers again: %v", err)
		}
	}
	for _, u := range []string{running, idle} {
		if st := show(t, u, "ActiveState"); st != "inactive" && st != "failed" {
			t.Errorf("%s is %s after Stop returned nil", u, st)
		}
	}
}

// TestNodeStopAndStartEdges: stopping what is not running, or does not
// exist, is confirmed at once; starting what runs is a success.
func TestNodeStopAndStartEdges(t *testing.T) {
	t.Parallel()
	s := dialNode(t, Options{})
	unit := "ul-edges.service"
	installUnits(t, map[string]string{unit: "[Service]\nExecStart=/bin/sleep infinity\n"})
	ctx := ctxFor(t, 30*time.Second)
	for _, u := range []string{unit, "ul-does-not-exist.service"} {
		if err := s.Stop(ctx, u, testStopWait); err != nil {
			t.Errorf("Stop(%s) while inactive: %v", u, err)
		}
	}
	for range 2 {
		if err := s.Start(ctx, unit); err != nil {
			t.Fatalf("Start: %v", err)
		}
	}
	if st, err := s.ActiveState(ctx, unit); err != nil || st != "active" {
		t.Errorf("ActiveState = %q, %v", st, err)
	}
	if err := s.Stop(ctx, unit, testStopWait); err != nil {
		t.Fatal(err)
	}
	if st, err := s.ActiveState(ctx, unit); err != nil || st != "inactive" {
		t.Errorf("ActiveState after Stop = %q, %v", st, err)
	}
	err := s.Start(ctx, "ul-does-not-exist.service")
	if !errors.Is(err, ErrStartFailed) {
		t.Errorf("Start of a unit that does not exist = %v, want ErrStartFailed", err)
	}
}

// TestNodeStartAfterStartLimit: starts refused elsewhere (here: two
// starts and a third refused by StartLimitBurst=2) do not keep Start from
// starting the unit.
func TestNodeStartAfterStartLimit(t *testing.T) {
	// Not parallel: a daemon-reload by another test between the starts
	// resets systemd's start counter and lets the third start through.
	s := dialNode(t, Options{})
	unit := "ul-start-limit.service"
	installUnits(t, map[string]string{unit: "[Unit]\nStartLimitBurst=2\nStartLimitIntervalSec=1h\n" + plainService})
	holdUnitLoaded(t, unit) // an inactive unit that is unloaded forgets its starts
	for range 2 {
		systemctl(t, "start", unit)
		systemctl(t, "stop", unit)
	}
	if err := exec.Command("systemctl", "start", unit).Run(); err == nil {
		t.Fatal("the third start within StartLimitBurst=2 succeeded")
	}
	if got := show(t, unit, "Result"); got != "start-limit-hit" {
		t.Fatalf("Result=%s, want start-limit-hit", got)
	}
	if err := s.Start(ctxFor(t, 10*time.Second), unit); err != nil {
		t.Fatalf("Start after the start limit: %v", err)
	}
}

// leftoverUnit is a unit whose process outlives systemd's whole stop:
// it ignores SIGTERM, and FinalKillSignal=SIGCONT plays the SIGKILL that a
// task in uninterruptible sleep (stuck in the kernel, on a hung NFS
// server, say) survives; a container cannot make such a task. systemd
// then takes its own path to the state such a task leaves: stop-sigterm
// times out, stop-sigkill and final-sigkill send the "SIGKILL" and time
// out, and systemd logs "Processes still around after final SIGKILL.
// Entering failed mode." and "Unit process N (sleep) remains running
// after unit stopped": the unit is failed, with no job, and its cgroup
// still holds the process. TimeoutStopSec=100ms gets it there within a
// few of systemd's timer periods (250ms each at most), well before
// leftoverStopWait's own SIGKILL.
func leftoverUnit(marker string) string {
	return "[Service]\nExecStart=/bin/sh -c \"trap '' TERM; exec " + marker + "\"\nTimeoutStopSec=100ms\nFinalKillSignal=SIGCONT\n"
}

// leftoverStopWait is the stop_wait of the leftover tests: Stop's own
// SIGKILL comes at 4.5s, after systemd has failed the unit.
const leftoverStopWait = 5 * time.Second

// TestNodeStopLeftoverProcess: a unit that systemd reports failed or
// inactive while a process is left in its cgroup is not stopped. Stop
// must SIGKILL what is left and return nil only once nothing is; if the
// kill does not end it, Stop must return ErrStopFailed, never nil.
func TestNodeStopLeftoverProcess(t *testing.T) {
	t.Parallel()
	t.Run("failed during Stop", func(t *testing.T) {
		t.Parallel()
		s := dialNode(t, Options{})
		unit, marker := "ul-stop-left-0.service", "sleep 86404"
		startLeftoverUnit(t, s, unit, marker)
		if err := s.Stop(ctxFor(t, time.Minute), unit, leftoverStopWait); err != nil {
			t.Fatalf("Stop: %v", err)
		}
		checkLeftoverGone(t, unit, marker)
	})
	t.Run("unkillable", func(t *testing.T) {
		t.Parallel()
		s := dialNode(t, Options{})
		s.killSignal = int32(syscall.SIGCONT) // Stop's SIGKILL does not end it either
		unit, marker := "ul-stop-left-1.service", "sleep 86405"
		startLeftoverUnit(t, s, unit, marker)
		err := s.Stop(ctxFor(t, time.Minute), unit, leftoverStopWait)
		var je *JobError
		if !errors.Is(err, ErrStopFailed) || !errors.As(err, &je) {
			t.Fatalf("Stop = %v, want ErrStopFailed: %s is %s with %v still running", err, unit, show(t, unit, "ActiveState"), processesWith(marker))
		}
		t.Logf("Stop: %v", err)
		pids := processesWith(marker)
		if len(pids) != 1 {
			t.Fatalf("%s: processes %v, want the one that survived", marker, pids)
		}
		if !je.Killed || len(je.Left) != 1 || fmt.Sprint(je.Left[0].PID) != pids[0] {
			t.Errorf("JobError %+v: want the kill sent and PID %s left", je, pids[0])
		}
	})
	for i, reset := range []bool{false, true} {
		name := "already failed"
		if reset {
			name = "inactive after reset-failed"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := dialNode(t, Options{})
			unit, marker := fmt.Sprintf("ul-stop-left-%d.service", 2+i), fmt.Sprintf("sleep %d", 86406+i)
			startLeftoverUnit(t, s, unit, marker)
			systemctl(t, "stop", unit) // systemd alone: returns once the unit is failed
			if reset {
				systemctl(t, "reset-failed", unit)
			}
			st := show(t, unit, "ActiveState")
			if pids := processesWith(marker); len(pids) != 1 || st != map[bool]string{false: "failed", true: "inactive"}[reset] {
				t.Fatalf("after systemctl stop: %s is %s with %v: the stand-in for a process that survives SIGKILL did not work", unit, st, pids)
			}
			t.Logf("%s is %s (Result=%s) with %s still in its cgroup %s", unit, st, show(t, unit, "Result"), marker, show(t, unit, "ControlGroup"))
			if err := s.Stop(ctxFor(t, time.Minute), unit, leftoverStopWait); err != nil {
				t.Fatalf("Stop: %v", err)
			}
			checkLeftoverGone(t, unit, marker)
		})
	}
}

// startLeftoverUnit installs leftoverUnit(marker) as unit and starts it.
func startLeftoverUnit(t *testing.T, s *Systemd, unit, marker string) {
	t.Helper()
	installUnits(t, map[string]string{unit: leftoverUnit(marker)})
	// What no stop ends, and what the test kept alive.
	t.Cleanup(func() { systemctlQuiet("kill", "-s", "KILL", unit) })
	holdUnitLoaded(t, unit) // its Result and ControlGroup stay readable
	if err := s.Start(ctxFor(t, 10*time.Second), unit); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, marker+" running", func() bool { return len(processesWith(marker)) == 1 })
}

// checkLeftoverGone: once Stop returned nil, nothing of the unit runs.
func checkLeftoverGone(t *testing.T, unit, marker string) {
	t.Helper()
	if left := processesWith(marker); len(left) > 0 {
		t.Errorf("Stop returned nil with %s (PID %v) still running; %s is %s, Result=%s", marker, left, unit, show(t, unit, "ActiveState"), show(t, unit, "Result"))
	}
	t.Logf("%s: %s, Result=%s, processes left %v", unit, show(t, unit, "ActiveState"), show(t, unit, "Result"), processesWith(marker))
}

// TestNodeStopTellsWhenSystemdHasTheStop: OnQueued's function is called
// once, before Stop returns, when systemd has the stop: for a unit whose
// ExecStop= takes a while, while systemd is carrying the stop out (the
// job is queued or running, the unit no longer active); for a unit that
// is stopped already, too.
func TestNodeStopTellsWhenSystemdHasTheStop(t *testing.T) {
	t.Parallel()
	s := dialNode(t, Options{})
	const unit = "ul-stop-queued.service"
	installUnits(t, map[string]string{unit: "[Service]\nExecStart=/bin/sleep infinity\nExecStop=/bin/sleep 1\n"})
	if err := s.Start(ctxFor(t, 10*time.Second), unit); err != nil {
		t.Fatal(err)
	}
	var calls int
	var seen, jobs string
	ctx := OnQueued(ctxFor(t, time.Minute), func() {
		calls++
		seen = show(t, unit, "ActiveState")
		jobs = systemctl(t, "list-jobs", "--no-legend", unit)
	})
	if err := s.Stop(ctx, unit, 10*time.Second); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if calls != 1 {
		t.Fatalf("OnQueued's function called %d times, want once", calls)
	}
	if seen == "active" && !strings.Contains(jobs, unit) {
		t.Fatalf("when told that systemd has the stop, %s was %s with no job (list-jobs: %q)", unit, seen, jobs)
	}
	t.Logf("when told: %s, jobs %q", seen, strings.TrimSpace(jobs))
	calls = 0
	if err := s.Stop(ctx, unit, 10*time.Second); err != nil {
		t.Fatalf("Stop of the stopped unit: %v", err)
	}
	if calls != 1 {
		t.Fatalf("stopping a stopped unit, OnQueued's function was called %d times, want once", calls)
	}
}

// TestNodeStopQueued: queued stops of 60 units, every fifth one running
// (one of those ignoring SIGTERM), on a real systemd: each is confirmed,
// the running ones inactive with no process left, and every place is
// given back.
func TestNodeStopQueued(t *testing.T) {
	t.Parallel()
	s := dialNode(t, Options{})
	units := map[string]string{}
	var running []string
	for i := range 60 {
		u := fmt.Sprintf("ul-stopq-%02d.service", i)
		units[u] = "[Service]\nExecStart=/bin/sleep infinity\n"
		if i == 5 {
			units[u] = "[Service]\nExecStart=/bin/sh -c 'trap \"\" TERM; while :; do sleep 1; done'\nTimeoutStopSec=60\n"
		}
		if i%5 == 0 {
			running = append(running, u)
		}
	}
	installUnits(t, units)
	ctx := ctxFor(t, 60*time.Second)
	for _, u := range running {
		if err := s.Start(ctx, u); err != nil {
			t.Fatal(err)
		}
	}
	type result struct {
		unit string
		err  error
	}
	results := make(chan result, len(units))
	for u := range units {
		s.StopQueued(ctx, u, testStopWait, func(err error) { results <- result{u, err} })
	}
	for range units {
		r := <-results
		if r.err != nil {
			t.Errorf("%s: %v", r.unit, r.err)
			continue
		}
		if st, err := s.State(ctx, r.unit); err != nil || !st.Stopped() {
			t.Errorf("%s reported stopped, and is %v (%v)", r.unit, st, err)
		}
	}
	for _, u := range running {
		if left, err := s.unitProcesses(ctx, u); err != nil || len(left) != 0 {
			t.Errorf("%s: processes left %v (%v)", u, left, err)
		}
	}
	if !poolsEmpty(s, 5*time.Second) || len(s.checkCalls) != 0 {
		t.Errorf("places held after every queued stop reported: %d checks", len(s.checkCalls))
	}
}
