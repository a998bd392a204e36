package unitctl

import (
	"sync"

	"github.com/godbus/dbus/v5"
)

// change is one PropertiesChanged signal of a unit.
type change struct {
	unit  string
	props map[string]dbus.Variant
	gen   uint64 // the intent generation when it arrived
}

// watcher receives the changes of some units. Delivery never blocks the
// dispatcher: when changes is full, or events may have been lost (a new
// connection, go-systemd's own full buffer), resync is poked and the
// watcher re-reads the state from systemd instead.
type watcher struct {
	units   map[string]bool
	changes chan change
	resync  chan struct{}
}

// watchers is the set of live watchers.
type watchers struct {
	mu  sync.Mutex
	set map[*watcher]bool
}

func (ws *watchers) add(units ...string) *watcher {
	w := &watcher{units: map[string]bool{}, changes: make(chan change, 256), resync: make(chan struct{}, 1)}
	for _, u := range units {
		w.units[u] = true
	}
	ws.mu.Lock()
	defer ws.mu.Unlock()
	ws.set[w] = true
	return w
}

func (ws *watchers) remove(w *watcher) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	delete(ws.set, w)
}

func (ws *watchers) deliver(unit string, props map[string]dbus.Variant, gen uint64) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for w := range ws.set {
		if !w.units[unit] {
			continue
		}
		select {
		case w.changes <- change{unit, props, gen}:
		default:
			w.poke()
		}
	}
}

func (ws *watchers) resyncAll() {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for w := range ws.set {
		w.poke()
	}
}

func (w *watcher) poke() {
	select {
	case w.resync <- struct{}{}:
	default:
	}
}

// stateFrom updates st from a change's properties and reports whether the
// change carried the ActiveState.
func stateFrom(st *UnitState, props map[string]dbus.Variant) bool {
	as, ok := props["ActiveState"].Value().(string)
	if !ok {
		return false
	}
	st.ActiveState = intern(as)
	if sub, ok := props["SubState"].Value().(string); ok {
		st.SubState = intern(sub)
	}
	return true
}
