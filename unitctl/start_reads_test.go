package unitctl

// Start's reads of the unit's state, against the fake systemd of
// break_jobs_test.go: a change that shows the start's job still queued
// needs no read, and every other change still gets one.

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	sd "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
)

// readsFake is a fake systemd whose starts queue a job and leave the
// unit activating, and a Systemd on it that never polls: every read of
// state in these tests is one a change or a job result asked for.
func readsFake(t *testing.T, unit string) (*fakeSystemd, *Systemd, *atomic.Uint32) {
	t.Helper()
	f := newFakeSystemd(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	s, err := Dial(ctx, Options{PollInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	job := new(atomic.Uint32)
	f.onStart(func(name string) (uint32, *dbus.Error) {
		id := f.job()
		job.Store(id)
		f.set(name, "activating", id, "start")
		return id, nil
	})
	return f, s, job
}

// emitChange sends a PropertiesChanged of unit's Unit interface with
// props, as systemd does for every change of a unit.
func (f *fakeSystemd) emitChange(t *testing.T, unit string, props map[string]dbus.Variant) {
	t.Helper()
	path := dbus.ObjectPath("/org/freedesktop/systemd1/unit/" + sd.PathBusEscape(unit))
	if err := f.conn.Emit(path, "org.freedesktop.DBus.Properties.PropertiesChanged", "org.freedesktop.systemd1.Unit", props, []string{}); err != nil {
		t.Fatal(err)
	}
}

// unitProps are the properties of a change: the state and, as systemd
// sends it, the job as (id, path), (0, "/") for none.
func unitProps(active, sub string, job uint32) map[string]dbus.Variant {
	return map[string]dbus.Variant{
		"ActiveState": dbus.MakeVariant(active),
		"SubState":    dbus.MakeVariant(sub),
		"Job": dbus.MakeVariant(struct {
			ID   uint32
			Path dbus.ObjectPath
		}{job, jobPath(job)}),
	}
}

// startWatcher is the watcher of unit that is not probe: the running
// Start's.
func (s *Systemd) startWatcher(unit string, probe *watcher) *watcher {
	s.watchers.mu.Lock()
	defer s.watchers.mu.Unlock()
	for _, w := range s.watchers.byUnit[unit] {
		if w != probe {
			return w
		}
	}
	return nil
}

// delivered sends a change and returns once the running Start took it
// from its watcher: probe, a watcher of the same unit, gets every change
// the Start's does, in the same delivery.
func delivered(ctx context.Context, t *testing.T, f *fakeSystemd, s *Systemd, probe *watcher, unit string, props map[string]dbus.Variant) {
	t.Helper()
	f.emitChange(t, unit, props)
	select {
	case <-probe.changes:
	case <-ctx.Done():
		t.Fatal("the change never arrived")
	}
	if !until(10*time.Second, func() bool { w := s.startWatcher(unit, probe); return w != nil && len(w.changes) == 0 }) {
		t.Fatal("the start never took the change")
	}
}

// A start of a unit with a process before its main one (the guard, an
// ExecStartPre=) sees several changes while its job runs: the job
// queued, activating in start-pre, then in start. Each read of the state
// they woke costs systemd a ListUnitsByNames, for a state that can only
// say "still queued": two reads per start are enough, the one after the
// StartUnit answer and one at the job's end.
func TestStartNoReadForChangesShowingItsJob(t *testing.T) {
	const unit = "ul-reads.service"
	f, s, job := readsFake(t, unit)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	probe := s.watchers.add(unit)
	defer s.watchers.remove(probe)
	base := s.reads.calls.Load()
	done := make(chan error, 1)
	go func() { done <- s.Start(ctx, unit) }()
	if !until(10*time.Second, func() bool { return s.reads.calls.Load() == base+1 }) {
		t.Fatal("no read of the state after StartUnit")
	}
	for _, sub := range []string{"dead", "start-pre", "start"} {
		active := "activating"
		if sub == "dead" {
			active = "inactive"
		}
		delivered(ctx, t, f, s, probe, unit, unitProps(active, sub, job.Load()))
	}
	f.set(unit, "active", 0, "")
	f.emitChange(t, unit, unitProps("active", "running", 0))
	f.removed(job.Load(), unit, "done")
	if err := <-done; err != nil {
		t.Fatalf("Start: %v", err)
	}
	if got := s.reads.calls.Load() - base; got != 2 {
		t.Fatalf("Start read the state %d times; want 2: after StartUnit, and at the job's end (three changes showed the job queued)", got)
	}
}

// Any other change is read: one that shows no job (the job ended, its
// JobRemoved lost: the start must end now, not at the next poll, an hour
// away here), and one without the Job property at all.
func TestStartReadsOnChangesWithoutItsJob(t *testing.T) {
	for name, props := range map[string]map[string]dbus.Variant{
		"job gone":        unitProps("failed", "failed", 0),
		"no Job property": {"ActiveState": dbus.MakeVariant("failed"), "SubState": dbus.MakeVariant("failed")},
	} {
		t.Run(name, func(t *testing.T) {
			const unit = "ul-reads.service"
			f, s, job := readsFake(t, unit)
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			probe := s.watchers.add(unit)
			defer s.watchers.remove(probe)
			base := s.reads.calls.Load()
			done := make(chan error, 1)
			go func() { done <- s.Start(ctx, unit) }()
			if !until(10*time.Second, func() bool { return s.reads.calls.Load() == base+1 }) {
				t.Fatal("no read of the state after StartUnit")
			}
			delivered(ctx, t, f, s, probe, unit, unitProps("activating", "start-pre", job.Load()))
			f.set(unit, "failed", 0, "")
			f.emitChange(t, unit, props)
			err := <-done
			if !errors.Is(err, ErrStartFailed) {
				t.Fatalf("Start after its unit failed with no job result: %v; want ErrStartFailed", err)
			}
			var je *JobError
			if !errors.As(err, &je) || je.State.ActiveState != "failed" {
				t.Fatalf("Start's error %v: want the failed state read", err)
			}
		})
	}
}
