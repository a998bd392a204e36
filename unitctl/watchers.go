package unitctl

import (
	"slices"
	"strings"
	"sync"

	"github.com/godbus/dbus/v5"
)

// change is what a watcher needs of one PropertiesChanged signal of a
// unit, read out of it once for every watcher: its strings are copies,
// so a change waiting in a watcher's buffer keeps none of the signal's
// decoding buffers alive (at a daemon's start, thousands of stops and
// starts wait for their turn with a few changes each).
type change struct {
	unit     string
	active   string // ActiveState, if hasState
	sub      string // SubState, if hasSub
	hasState bool   // the signal carried the ActiveState
	hasSub   bool
	job      jobShown
	gen      uint64 // the intent generation when it arrived
}

// jobShown is what a change says of the unit's Job property.
type jobShown int8

const (
	jobNotShown jobShown = iota // absent, or not an (id, path) pair
	jobNone                     // id 0: no job queued
	jobQueued                   // a job is queued
)

// changeOf reads a change out of a signal's properties.
func changeOf(unit string, props map[string]dbus.Variant, gen uint64) change {
	c := change{unit: unit, gen: gen}
	if as, ok := props["ActiveState"].Value().(string); ok {
		c.active, c.hasState = intern(as), true
		if sub, ok := props["SubState"].Value().(string); ok {
			c.sub, c.hasSub = intern(sub), true
		}
	}
	if job, ok := props["Job"].Value().([]any); ok && len(job) == 2 {
		if id, ok := job[0].(uint32); ok {
			c.job = jobNone
			if id != 0 {
				c.job = jobQueued
			}
		}
	}
	return c
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
	ours := ws.byUnit[unit]
	if len(ours) == 0 {
		return
	}
	c := changeOf(strings.Clone(unit), props, gen)
	for _, w := range ours {
		select {
		case w.changes <- c:
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

// stateFrom updates st from a change and reports whether the change
// carried the ActiveState.
func stateFrom(st *UnitState, c change) bool {
	if !c.hasState {
		return false
	}
	st.ActiveState = c.active
	if c.hasSub {
		st.SubState = c.sub
	}
	return true
}
