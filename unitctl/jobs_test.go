package unitctl

import (
	"testing"

	"github.com/godbus/dbus/v5"
)

func TestJobResultBeforeTheCallLooks(t *testing.T) {
	var j jobResults
	j.removed(7, "done") // read on the events connection before the answer naming job 7
	ch := make(chan string, 1)
	j.expect(7, ch)
	select {
	case r := <-ch:
		if r != "done" {
			t.Fatalf("result %q, want done", r)
		}
	default:
		t.Fatal("a result removed before expect was not delivered by it")
	}
}

func TestJobResultAfterTheCallLooks(t *testing.T) {
	var j jobResults
	ch := make(chan string, 1)
	j.expect(8, ch)
	j.removed(9, "failed") // another job's
	select {
	case r := <-ch:
		t.Fatalf("job 8 got job 9's result %q", r)
	default:
	}
	j.removed(8, "canceled")
	if r := <-ch; r != "canceled" {
		t.Fatalf("result %q, want canceled", r)
	}
	j.removed(8, "done") // a repeat must not block on the full channel
	if len(j.waiting) != 0 {
		t.Fatalf("still waiting after the result: %v", j.waiting)
	}
}

func TestJobResultForgotten(t *testing.T) {
	var j jobResults
	ch := make(chan string, 1)
	j.expect(3, ch)
	j.forget(3, ch)
	j.removed(3, "done")
	select {
	case r := <-ch:
		t.Fatalf("a forgotten wait got %q", r)
	default:
	}
}

// Results nobody waits for (other clients' jobs: systemd announces
// every job's end) are kept for the last earlyMax jobs only.
func TestJobResultsKeptAreBounded(t *testing.T) {
	var j jobResults
	for id := range uint32(3 * earlyMax) {
		j.removed(id, "done")
	}
	if len(j.early) != earlyMax || len(j.order) != earlyMax {
		t.Fatalf("%d results kept (%d in order), want %d", len(j.early), len(j.order), earlyMax)
	}
	old, recent := make(chan string, 1), make(chan string, 1)
	j.expect(0, old)
	j.expect(3*earlyMax-1, recent)
	if len(old) != 0 || len(recent) != 1 {
		t.Fatalf("oldest result delivered: %v, newest delivered: %v; want false, true", len(old) == 1, len(recent) == 1)
	}
}

func TestJobRemovedSignal(t *testing.T) {
	sig := &dbus.Signal{Name: "org.freedesktop.systemd1.Manager.JobRemoved",
		Body: []any{uint32(42), dbus.ObjectPath("/org/freedesktop/systemd1/job/42"), "a.service", "dependency"}}
	id, result, ok := jobRemoved(sig)
	if !ok || id != 42 || result != "dependency" {
		t.Fatalf("jobRemoved = %d, %q, %v; want 42, dependency, true", id, result, ok)
	}
	for _, bad := range []*dbus.Signal{
		{Name: "org.freedesktop.systemd1.Manager.JobNew", Body: sig.Body},
		{Name: sig.Name, Body: sig.Body[:3]},
		{Name: sig.Name, Body: []any{"42", sig.Body[1], sig.Body[2], sig.Body[3]}},
	} {
		if _, _, ok := jobRemoved(bad); ok {
			t.Errorf("jobRemoved(%v) accepted", bad)
		}
	}
}
