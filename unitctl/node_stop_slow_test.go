package unitctl

import (
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sd "github.com/coreos/go-systemd/v22/dbus"
)

// slowBus is a proxy in front of the system bus that delays every byte
// systemd (via dbus-daemon) sends back by delay: a systemd that answers
// every call, only late. Requests reach systemd at once.
type slowBus struct {
	ln    net.Listener
	delay atomic.Int64
	mu    sync.Mutex
	conns []net.Conn
}

func newSlowBus(t *testing.T) *slowBus {
	t.Helper()
	path := filepath.Join(t.TempDir(), "bus")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	p := &slowBus{ln: ln}
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, c := range p.conns {
			c.Close()
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("unix", "/run/dbus/system_bus_socket")
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			go func() { io.Copy(up, c); up.Close() }()
			go p.delayed(c, up)
		}
	}()
	t.Setenv("DBUS_SYSTEM_BUS_ADDRESS", "unix:path="+path)
	return p
}

// delayed copies src to dst, each chunk delay after it was read, in order.
func (p *slowBus) delayed(dst, src net.Conn) {
	type chunk struct {
		b  []byte
		at time.Time
	}
	chunks := make(chan chunk, 1<<16)
	go func() {
		defer close(chunks)
		for {
			buf := make([]byte, 64<<10)
			n, err := src.Read(buf)
			if n > 0 {
				chunks <- chunk{buf[:n], time.Now().Add(time.Duration(p.delay.Load()))}
			}
			if err != nil {
				return
			}
		}
	}()
	defer dst.Close()
	for c := range chunks {
		if d := time.Until(c.at); d > 0 {
			tm := time.NewTimer(d) // the simulated latency, not a synchronisation
			<-tm.C
		}
		if _, err := dst.Write(c.b); err != nil {
			return
		}
	}
}

// TestNodeStopSlowSystemdIsConfirmed: a systemd that answers every
// call, but each only after longer than stop_wait (busy), is no failed
// stop, and "once it answers, Stop confirms". The unit is a plain sleep
// that SIGTERM ends: systemd stops it as soon as the stop job's request
// reaches it. Not parallel: it sets DBUS_SYSTEM_BUS_ADDRESS.
func TestNodeStopSlowSystemdIsConfirmed(t *testing.T) {
	requireNode(t)
	unit := "ul-break-slow.service"
	installUnits(t, map[string]string{unit: "[Service]\nExecStart=/bin/sleep 86410\n"})
	bus := newSlowBus(t)
	var unansweredLogs atomic.Int32
	s := dialNode(t, Options{Logf: func(f string, a ...any) {
		msg := fmt.Sprintf(f, a...)
		if strings.Contains(msg, "has not answered") {
			unansweredLogs.Add(1)
		}
		t.Log(msg)
	}})
	if err := s.Start(ctxFor(t, 10*time.Second), unit); err != nil {
		t.Fatal(err)
	}
	const stopWait = time.Second
	const latency = 2 * time.Second // every answer comes 2x stop_wait late
	bus.delay.Store(int64(latency))
	start := time.Now()
	err := s.Stop(ctxFor(t, 30*time.Second), unit, stopWait)
	took := time.Since(start)
	t.Logf("Stop after %v: %v (unit %s, %s; %d 'has not answered' logs)", took.Round(time.Millisecond), err,
		show(t, unit, "ActiveState"), strings.Join(processesWith("/bin/sleep 86410"), ","), unansweredLogs.Load())
	if err != nil {
		t.Fatalf("Stop with a systemd that answers every call %v late (stop_wait %v): %v; the unit was %s long before: want nil once systemd answers",
			latency, stopWait, err, show(t, unit, "ActiveState"))
	}
}

// TestNodeStopSecondExecStopPostIsKilled: the SIGKILL Stop sends at
// the kill time ends the main process; systemd then runs the unit's
// ExecStopPost= commands, each a new process. Stop's SIGKILL on the change
// of state kills the first; the second starts without a change of
// SubState (still stop-post) and is never sent a SIGKILL. Every process
// here dies on SIGKILL and systemd answers at once: Stop must not report
// a failed stop.
func TestNodeStopSecondExecStopPostIsKilled(t *testing.T) {
	t.Parallel()
	s := dialNode(t, Options{})
	unit := "ul-break-stoppost.service"
	installUnits(t, map[string]string{unit: "[Service]\n" +
		"ExecStart=/bin/sh -c \"trap '' TERM; exec sleep 86411\"\n" +
		"ExecStopPost=-/bin/sleep 86412\n" +
		"ExecStopPost=/bin/sh -c \"trap '' TERM; exec sleep 86413\"\n" +
		"TimeoutStopSec=60\n"})
	t.Cleanup(func() { systemctlQuiet("kill", "-s", "KILL", unit) })
	if err := s.Start(ctxFor(t, 10*time.Second), unit); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "sleep 86411 running", func() bool { return len(processesWith("sleep 86411")) == 1 })
	start := time.Now()
	err := s.Stop(ctxFor(t, 30*time.Second), unit, testStopWait)
	took := time.Since(start)
	t.Logf("Stop after %v: %v", took.Round(time.Millisecond), err)
	if err != nil {
		t.Fatalf("Stop of a unit all of whose processes die on SIGKILL: %v (left running: %v); want nil: the process listed was never sent a SIGKILL",
			err, processesWith("sleep 86413"))
	}
	for _, m := range []string{"sleep 86411", "sleep 86412", "sleep 86413"} {
		if left := processesWith(m); len(left) > 0 {
			t.Errorf("Stop returned nil with %s (%v) running", m, left)
		}
	}
}

// TestNodeStopSlowSystemdStoppedUnitIsNotKilled: a unit already stopped,
// and a systemd that answers every call only after longer than
// stop_wait (a daemon's startup stop while systemd reloads thousands of
// units). The check whether it is stopped already gives up at the kill
// time, the stop's SIGKILL comes at once, and its list of the cgroup,
// answered late, is empty: the SIGKILL hit nothing, and the stop must
// not say SIGKILL was needed (OnKilled; the daemon journals "killed").
//
// Failed before hit: OnKilled was called whenever the kill time came
// (a scale run at 5,000 leases journalled 45 "killed" startup stops of
// units that were inactive). Not parallel: it sets
// DBUS_SYSTEM_BUS_ADDRESS.
func TestNodeStopSlowSystemdStoppedUnitIsNotKilled(t *testing.T) {
	requireNode(t)
	unit := "ul-break-slow-stopped.service"
	installUnits(t, map[string]string{unit: "[Service]\nExecStart=/bin/sleep 86411\n"})
	bus := newSlowBus(t)
	s := dialNode(t, Options{Logf: t.Logf})
	if st := show(t, unit, "ActiveState"); st != "inactive" {
		t.Fatalf("%s is %s before the stop; want inactive", unit, st)
	}
	const stopWait = time.Second
	bus.delay.Store(int64(2 * time.Second)) // every answer 2x stop_wait late
	var killed atomic.Bool
	if err := s.Stop(OnKilled(ctxFor(t, 30*time.Second), func() { killed.Store(true) }), unit, stopWait); err != nil {
		t.Fatalf("Stop of a stopped unit with a slow systemd: %v", err)
	}
	if killed.Load() {
		t.Errorf("Stop of a unit that was stopped all along said SIGKILL was needed (OnKilled)")
	}
}

// TestNodeKillSaysWhetherItReachedAProcess: the node's systemd (252)
// takes the kill target all-fail: a SIGKILL to a running unit is sent
// (nil) and ends it; one to the unit then failed, loaded and with no
// process left, is answered NoSuchProcess (errKillMissed). The plain
// target is never needed.
func TestNodeKillSaysWhetherItReachedAProcess(t *testing.T) {
	requireNode(t)
	t.Parallel()
	unit := "ul-kill-reach.service"
	installUnits(t, map[string]string{unit: "[Service]\nExecStart=/bin/sleep 86412\n"})
	s := dialNode(t, Options{})
	kill := func() error {
		return s.with(ctxFor(t, 10*time.Second), func(c *sd.Conn) error { return s.killAll(ctxFor(t, 10*time.Second), c, unit) })
	}
	if err := s.Start(ctxFor(t, 10*time.Second), unit); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "/bin/sleep 86412 running", func() bool { return len(processesWith("/bin/sleep 86412")) == 1 })
	if err := kill(); err != nil {
		t.Fatalf("SIGKILL to the running %s: %v; want nil (sent, and it reached a process)", unit, err)
	}
	waitFor(t, 5*time.Second, unit+" failed", func() bool { return show(t, unit, "ActiveState") == "failed" })
	if err := kill(); !errors.Is(err, errKillMissed) {
		t.Fatalf("SIGKILL to the failed %s, no process left: %v; want errKillMissed (systemd's NoSuchProcess)", unit, err)
	}
	if s.noAllFail.Load() {
		t.Error("the node's systemd refused all-fail")
	}
}
