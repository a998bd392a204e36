package unitctl

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestNodeDaemonReexec: a systemctl daemon-reexec while Start or Stop
// waits does not lose the result, over the system bus (where calls in
// flight get NoReply) and over the private socket (where the connection
// drops).
func TestNodeDaemonReexec(t *testing.T) {
	requireNode(t)
	for _, transport := range []struct {
		name    string
		private bool
	}{{"bus", false}, {"private", true}} {
		t.Run(transport.name, func(t *testing.T) {
			var retries atomic.Int64
			s := dialNode(t, Options{Private: transport.private, Logf: func(format string, args ...any) {
				if strings.HasPrefix(format, "unitctl: retrying") || strings.HasPrefix(format, "unitctl: reconnected") {
					retries.Add(1)
				}
				t.Logf(format, args...)
			}})
			t.Run("calls", func(t *testing.T) { reexecDuringCalls(t, s, &retries) })
			t.Run("stop", func(t *testing.T) { reexecDuringStop(t, s) })
			t.Run("start", func(t *testing.T) { reexecDuringStart(t, s) })
			t.Run("watch", func(t *testing.T) { reexecThenWatch(t, s) })
		})
	}
}

// reexecDuringCalls reads a unit's state in a loop while systemd
// re-executes: no call may fail, and at least one must have met the
// re-exec (NoReply on the bus, a reset connection on the private socket)
// and been retried.
func reexecDuringCalls(t *testing.T, s *Systemd, retries *atomic.Int64) {
	stop := make(chan struct{})
	done := make(chan error, 1)
	calls := 0
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := s.State(ctxFor(t, 10*time.Second), "dbus.service"); err != nil {
				done <- err
				return
			}
			calls++
		}
	}()
	before := retries.Load()
	reexec(t)
	close(stop)
	if err := <-done; err != nil {
		t.Fatalf("a call during daemon-reexec failed: %v", err)
	}
	retried := retries.Load() - before
	t.Logf("%d calls during the re-exec, %d retried or reconnected", calls, retried)
	if retried == 0 {
		t.Error("no call was retried: the re-exec did not meet a call in flight, and the test proved nothing")
	}
}

// reexecDuringStop stops a unit whose ExecStop= takes 1.5s and re-executes
// systemd while the stop runs. stop_wait is long enough that no SIGKILL
// is due: the stop must end by itself and be reported.
func reexecDuringStop(t *testing.T, s *Systemd) {
	unit := "ul-reexec-stop.service"
	installUnits(t, map[string]string{unit: "[Service]\nExecStart=/bin/sleep infinity\nExecStop=/bin/sleep 1.5\n"})
	systemctl(t, "start", unit)
	result := make(chan error, 1)
	go func() { result <- s.Stop(context.Background(), unit, 20*time.Second) }()
	waitState(t, s, unit, 5*time.Second, "deactivating")
	reexec(t)
	select {
	case err := <-result:
		if err != nil {
			t.Fatalf("Stop across daemon-reexec: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Stop did not return within 15s of the re-exec")
	}
	if st := show(t, unit, "ActiveState"); st != "inactive" {
		t.Errorf("ActiveState %s after Stop", st)
	}
}

// reexecDuringStart starts a unit whose ExecStartPre= takes 1.5s and
// re-executes systemd meanwhile.
func reexecDuringStart(t *testing.T, s *Systemd) {
	unit := "ul-reexec-start.service"
	installUnits(t, map[string]string{unit: "[Service]\nExecStartPre=/bin/sleep 1.5\nExecStart=/bin/sleep infinity\n"})
	result := make(chan error, 1)
	go func() { result <- s.Start(context.Background(), unit) }()
	waitState(t, s, unit, 5*time.Second, "activating")
	reexec(t)
	select {
	case err := <-result:
		if err != nil {
			t.Fatalf("Start across daemon-reexec: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Start did not return within 15s of the re-exec")
	}
	if st := show(t, unit, "ActiveState"); st != "active" {
		t.Errorf("ActiveState %s after Start", st)
	}
}

// reexec runs systemctl daemon-reexec, which returns once systemd is back.
func reexec(t *testing.T) {
	start := time.Now()
	systemctl(t, "daemon-reexec")
	t.Logf("daemon-reexec took %v", time.Since(start).Round(time.Millisecond))
}

// reexecThenWatch: after a re-exec, events still arrive (systemd keeps
// its subscribers across a re-exec; a dropped connection is re-dialled and
// subscribed again): a start behind our back is noticed without the
// backstop.
func reexecThenWatch(t *testing.T, s *Systemd) {
	unit := "ul-reexec-watch.service"
	installUnits(t, map[string]string{unit: plainService})
	reexec(t)
	if _, err := s.ActiveState(ctxFor(t, 10*time.Second), unit); err != nil { // reconnects if need be
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	events := s.Watch(ctx, []string{unit}, time.Hour)
	expect(t, events, Settled, "inactive")
	systemctl(t, "start", unit)
	expect(t, events, StartedBehind, "active")
}
