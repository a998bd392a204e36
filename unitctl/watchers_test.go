package unitctl

import (
	"testing"
	"unsafe"

	"github.com/godbus/dbus/v5"
)

// TestWatchersDeliverToTheUnitsWatchersOnly: a change reaches the
// watchers of its unit, a watcher of several units among them, and no
// other; a removed watcher leaves nothing behind in the index; a watcher
// whose buffer is full is poked to re-read instead.
func TestWatchersDeliverToTheUnitsWatchersOnly(t *testing.T) {
	var ws watchers
	a := ws.add("a.service")
	b := ws.add("b.service")
	both := ws.add("a.service", "b.service")
	ws.deliver("a.service", nil, 1)
	if len(a.changes) != 1 || len(b.changes) != 0 || len(both.changes) != 1 {
		t.Fatalf("a change of a.service reached a %d, b %d, both %d times; want 1, 0, 1", len(a.changes), len(b.changes), len(both.changes))
	}
	ws.remove(a)
	ws.remove(both)
	if _, ok := ws.byUnit["a.service"]; ok || len(ws.byUnit["b.service"]) != 1 || len(ws.set) != 1 {
		t.Fatalf("after removing a's watchers: index %v, set of %d", ws.byUnit, len(ws.set))
	}
	for range cap(b.changes) + 1 {
		ws.deliver("b.service", nil, 1)
	}
	if len(b.changes) != cap(b.changes) || len(b.resync) != 1 {
		t.Fatalf("a full watcher holds %d of %d changes and %d resync pokes; want it full and poked", len(b.changes), cap(b.changes), len(b.resync))
	}
}

// TestWatchersNameAUnitOnce: a watcher given a unit twice gets each change
// of it once, and its removal leaves the unit's other watchers in place.
func TestWatchersNameAUnitOnce(t *testing.T) {
	var ws watchers
	twice := ws.add("a.service", "a.service")
	other := ws.add("a.service")
	ws.deliver("a.service", nil, 1)
	if len(twice.changes) != 1 || len(other.changes) != 1 {
		t.Fatalf("one change reached the watcher named twice %d times, the other %d; want 1 and 1", len(twice.changes), len(other.changes))
	}
	ws.remove(twice)
	if l := ws.byUnit["a.service"]; len(l) != 1 || l[0] != other {
		t.Fatalf("after removing one of a.service's two watchers, its index holds %v; want only the other", l)
	}
}

// TestChangeKeepsNoneOfTheSignal: a change copies what it keeps of a
// signal (the unit's name, its states, whether a job is queued), so one
// waiting in a watcher's buffer holds none of the signal's memory; and it
// reads the Job property as showsJob did from the properties.
func TestChangeKeepsNoneOfTheSignal(t *testing.T) {
	buf := []byte("x.service weird-state odd-sub")
	unit, active, sub := unsafe.String(&buf[0], 9), unsafe.String(&buf[10], 11), unsafe.String(&buf[22], 7)
	var ws watchers
	w := ws.add("x.service")
	ws.deliver(unit, map[string]dbus.Variant{"ActiveState": dbus.MakeVariant(active), "SubState": dbus.MakeVariant(sub)}, 1)
	c := <-w.changes
	if c.unit != "x.service" || c.active != "weird-state" || c.sub != "odd-sub" || !c.hasState || !c.hasSub {
		t.Fatalf("change %+v; want x.service, weird-state, odd-sub", c)
	}
	for _, s := range []string{c.unit, c.active, c.sub} {
		if p := uintptr(unsafe.Pointer(unsafe.StringData(s))); p >= uintptr(unsafe.Pointer(&buf[0])) && p < uintptr(unsafe.Pointer(&buf[0]))+uintptr(len(buf)) {
			t.Errorf("the change's %q points into the signal's buffer", s)
		}
	}
	for _, j := range []struct {
		name  string
		props map[string]dbus.Variant
		shows bool
	}{
		{"queued", map[string]dbus.Variant{"Job": dbus.MakeVariant([]any{uint32(7), dbus.ObjectPath("/org/freedesktop/systemd1/job/7")})}, true},
		{"none", map[string]dbus.Variant{"Job": dbus.MakeVariant([]any{uint32(0), dbus.ObjectPath("/")})}, false},
		{"absent", map[string]dbus.Variant{}, false},
		{"not a pair", map[string]dbus.Variant{"Job": dbus.MakeVariant([]any{uint32(7)})}, false},
		{"id not uint32", map[string]dbus.Variant{"Job": dbus.MakeVariant([]any{int32(7), dbus.ObjectPath("/")})}, false},
	} {
		if got := showsJob(changeOf("x.service", j.props, 1)); got != j.shows {
			t.Errorf("%s: showsJob %t, want %t", j.name, got, j.shows)
		}
	}
}
