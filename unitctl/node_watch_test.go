package unitctl

import (
	"context"
	"testing"
	"time"
)

// TestNodeWatch: a unit started behind our back, one that fails and one
// stopped behind our back are each noticed by an event.
func TestNodeWatch(t *testing.T) {
	t.Parallel()
	s := dialNode(t, Options{})
	unit := "ul-watch.service"
	installUnits(t, map[string]string{unit: plainService})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// A long backstop interval: what is noticed here is noticed by events.
	events := s.Watch(ctx, []string{unit}, time.Hour)
	expect(t, events, Settled, "inactive")

	systemctl(t, "start", unit)
	expect(t, events, StartedBehind, "active")
	systemctl(t, "stop", unit)
	expect(t, events, Settled, "inactive")

	if err := s.Start(ctx, unit); err != nil {
		t.Fatal(err)
	}
	expect(t, events, Settled, "active")
	systemctl(t, "kill", "-s", "KILL", unit)
	expect(t, events, Failed, "failed")

	if err := s.Start(ctx, unit); err != nil {
		t.Fatal(err)
	}
	expect(t, events, Settled, "active")
	systemctl(t, "stop", unit)
	expect(t, events, StoppedBehind, "inactive")
}

// expect reads events until one has the wanted ActiveState and checks its
// kind.
func expect(t *testing.T, events <-chan Event, kind Kind, active string) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				t.Fatalf("events closed while waiting for %s", active)
			}
			t.Logf("event %s %s %v", ev.Unit, ev.State, ev.Kind)
			if ev.State.ActiveState == active {
				if ev.Kind != kind {
					t.Errorf("%s: kind %v, want %v", ev.State, ev.Kind, kind)
				}
				return
			}
		case <-timeout:
			t.Fatalf("no event with ActiveState %s", active)
		}
	}
}

// TestNodeWatchBackstop: with no events at all (the watcher's event feed
// cut off), the periodic re-read still notices a start behind our back.
func TestNodeWatchBackstop(t *testing.T) {
	t.Parallel()
	s := dialNode(t, Options{})
	unit := "ul-watch-backstop.service"
	installUnits(t, map[string]string{unit: plainService})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	events := s.Watch(ctx, []string{unit}, 300*time.Millisecond)
	s.watchers.mu.Lock() // take the watcher out of the fan-out: no event reaches it
	s.watchers.set = map[*watcher]bool{}
	s.watchers.mu.Unlock()
	expect(t, events, Settled, "inactive")
	systemctl(t, "start", unit)
	expect(t, events, StartedBehind, "active")
}
