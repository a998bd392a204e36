package unitctl

import (
	"slices"
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
	units   []string // sorted, each once
	changes chan change
	resync  chan struct{}
}

// watchers is the set of live watchers, indexed by unit: a change is
// handed to the watchers of its unit only, however many watch others (a
// daemon starting thousands of units has a watcher for each start, its
// own watch of every unit besides).
type watchers struct {
	mu     sync.Mutex
	set    map[*watcher]bool
	byUnit map[string][]*watcher // a unit has few: its watch, and a start or stop under way
}

// watcherBuffer is the changes a watcher of one unit holds before it is
// poked to re-read instead: a start or a stop sees a handful.
const watcherBuffer = 16

func (ws *watchers) add(units ...string) *watcher {
	size := watcherBuffer
	if len(units) > 1 {
		size = 256
	}
	units = slices.Clone(units)
	slices.Sort(units)
	w := &watcher{units: slices.Compact(units), changes: make(chan change, size), resync: make(chan struct{}, 1)}
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.set == nil {
		ws.set, ws.byUnit = map[*watcher]bool{}, map[string][]*watcher{}
	}
	ws.set[w] = true
	for _, u := range w.units {
		ws.byUnit[u] = append(ws.byUnit[u], w)
	}
	return w
}

func (ws *watchers) remove(w *watcher) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	delete(ws.set, w)
	for _, u := range w.units {
		l := slices.DeleteFunc(ws.byUnit[u], func(x *watcher) bool { return x == w })
		if len(l) == 0 {
			delete(ws.byUnit, u)
		} else {
			ws.byUnit[u] = l
		}
	}
}

func (ws *watchers) deliver(unit string, props map[string]dbus.Variant, gen uint64) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for _, w := range ws.byUnit[unit] {
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
