package unitctl

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
)

// TestQueuedStopsParkNoGoroutine: 300 queued stops of units stopped
// already, while systemd holds every GetUnitProcesses call, take no
// goroutine each: at most maxStopChecks are checking (their reads and
// calls' goroutines), the others are entries in the line. Once systemd
// answers, every one is confirmed stopped with no stop job, and every
// place is given back.
func TestQueuedStopsParkNoGoroutine(t *testing.T) {
	f := newFakeSystemd(t)
	s := dialFake(t, nil)
	gate := make(chan struct{})
	f.procsGate.Store(&gate)
	open := sync.OnceFunc(func() { close(gate) })
	t.Cleanup(open)
	const n = 300
	for i := range n {
		f.set(fmt.Sprintf("q%d.service", i), "inactive", 0, "")
	}
	before := runtime.NumGoroutine()
	errs := make(chan error, n)
	for i := range n {
		s.StopQueued(ctxFor(t, 30*time.Second), fmt.Sprintf("q%d.service", i), 10*time.Second, func(err error) { errs <- err })
	}
	if !until(10*time.Second, func() bool { return f.procsIn.Load() == maxProcCalls }) {
		t.Fatalf("%d GetUnitProcesses calls at the fake, want the pool's %d", f.procsIn.Load(), maxProcCalls)
	}
	// A stop checking holds a goroutine; one that waits for its
	// GetUnitProcesses, its call's too and the fake's handler's (this
	// process's), and godbus's for the call's answer. State reads are
	// batched. A stop waiting in the line holds none.
	if extra := runtime.NumGoroutine() - before; extra > 3*maxStopChecks {
		t.Fatalf("%d goroutines more for %d queued stops, %d at most checking at once", extra, n, maxStopChecks)
	}
	open()
	for i := range n {
		if err := <-errs; err != nil {
			t.Fatalf("stop %d: %v", i, err)
		}
	}
	if c := f.stopCalls.Load(); c != 0 {
		t.Errorf("%d StopUnit calls for units stopped already", c)
	}
	if !until(5*time.Second, func() bool { return len(s.checkCalls) == 0 }) || !poolsEmpty(s, 5*time.Second) {
		t.Errorf("places still held: %d checks, %d proc calls", len(s.checkCalls), len(s.procCalls))
	}
}

// TestQueuedStopOfARunningUnitGivesItsPlaceBack: maxStopChecks queued
// stops of running units whose stop jobs systemd holds take every
// place; they give each back once they find the unit running, so a
// queued stop of a unit stopped already, behind them, is confirmed while
// theirs are still under way. Once systemd answers, they are confirmed
// too.
func TestQueuedStopOfARunningUnitGivesItsPlaceBack(t *testing.T) {
	f := newFakeSystemd(t)
	s := dialFake(t, nil)
	gate := make(chan struct{})
	open := sync.OnceFunc(func() { close(gate) })
	t.Cleanup(open)
	f.onStop(func(name string) (uint32, *dbus.Error) {
		<-gate
		return f.finish(name, "inactive", "done"), nil
	})
	errs := make(chan error, maxStopChecks)
	for i := range maxStopChecks {
		u := fmt.Sprintf("r%d.service", i)
		f.set(u, "active", 0, "")
		s.StopQueued(ctxFor(t, 30*time.Second), u, 20*time.Second, func(err error) { errs <- err })
	}
	if !until(10*time.Second, func() bool { return f.stopsIn.Load() == maxStopCalls }) {
		t.Fatalf("%d StopUnit calls at the fake, want the pool's %d", f.stopsIn.Load(), maxStopCalls)
	}
	f.set("idle.service", "inactive", 0, "")
	idle := make(chan error, 1)
	s.StopQueued(ctxFor(t, 30*time.Second), "idle.service", 20*time.Second, func(err error) { idle <- err })
	select {
	case err := <-idle:
		if err != nil {
			t.Fatalf("idle.service: %v", err)
		}
	case err := <-errs:
		t.Fatalf("a held stop ended first: %v", err)
	}
	open()
	for range maxStopChecks {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// TestQueuedStopWhoseCtxEnds: a queued stop still in the line when its
// ctx ends leaves it, done getting a *JobError that wraps the ctx's
// error; it makes no call to systemd, and the line goes on.
func TestQueuedStopWhoseCtxEnds(t *testing.T) {
	f := newFakeSystemd(t)
	s := dialFake(t, nil)
	gate := make(chan struct{})
	f.procsGate.Store(&gate)
	open := sync.OnceFunc(func() { close(gate) })
	t.Cleanup(open)
	errs := make(chan error, maxStopChecks)
	for i := range maxStopChecks {
		u := fmt.Sprintf("h%d.service", i)
		f.set(u, "inactive", 0, "")
		s.StopQueued(ctxFor(t, 30*time.Second), u, 20*time.Second, func(err error) { errs <- err })
	}
	ctx, cancel := context.WithCancel(context.Background())
	late := make(chan error, 1)
	s.StopQueued(ctx, "late.service", 20*time.Second, func(err error) { late <- err })
	cancel()
	err := <-late
	var je *JobError
	if !errors.As(err, &je) || !errors.Is(err, context.Canceled) || je.Unit != "late.service" {
		t.Fatalf("a queued stop whose ctx ended: %v", err)
	}
	open()
	for range maxStopChecks {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if c := f.stopCalls.Load(); c != 0 {
		t.Errorf("%d StopUnit calls", c)
	}
}
