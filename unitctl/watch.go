package unitctl

import (
	"context"
	"maps"
	"slices"
	"time"
)

// intent is what this Systemd last asked of a unit.
type intent int

const (
	intentStopped  intent = iota // the default: a unit nobody asked to run
	intentStarting               // a Start is in progress: inactive is on its way to active
	intentRunning                // the last Start succeeded
)

func (s *Systemd) setIntent(unit string, i intent) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.intentGen++
	s.intents[unit] = intentAt{i, s.intentGen}
}

// intentAt is an intent and when it was set, counted in setIntent calls.
type intentAt struct {
	intent
	gen uint64
}

func (s *Systemd) intent(unit string) intentAt {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.intents[unit]
}

// generation counts the intents set so far. A state read or received
// after it was taken is compared with no intent set before it.
func (s *Systemd) generation() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.intentGen
}

func (s *Systemd) ticker() *time.Ticker { return time.NewTicker(s.opts.PollInterval) }

// Kind says how a state change relates to what this Systemd last asked
// of the unit.
type Kind int

const (
	// Settled: the state agrees with the last Start or Stop (or the unit is
	// on its way there).
	Settled Kind = iota
	// Failed: the unit failed, or its main process died and systemd will
	// restart it (SubState auto-restart).
	Failed
	// StartedBehind: the unit is activating or active though the last
	// order was Stop, or there was none: someone else started it.
	StartedBehind
	// StoppedBehind: the unit is stopping or inactive though the last
	// order was Start: someone stopped it or it exited.
	StoppedBehind
)

var kindNames = [...]string{"settled", "failed", "started-behind", "stopped-behind"}

func (k Kind) String() string { return kindNames[k] }

// Event is a change of a watched unit's ActiveState or SubState.
type Event struct {
	Unit  string
	State UnitState
	Kind  Kind
}

// classify relates a state to the last order.
func classify(i intent, st UnitState) Kind {
	if st.ActiveState == "failed" || st.SubState == "auto-restart" {
		return Failed
	}
	switch {
	case i == intentStopped && (st.ActiveState == "activating" || st.Running()):
		return StartedBehind
	case i == intentStarting:
		return Settled // Start itself reports how it ends
	case i == intentRunning && (st.ActiveState == "deactivating" || st.ActiveState == "inactive"):
		return StoppedBehind
	}
	return Settled
}

// Watch reports the state of units on the returned channel: first the
// state of each as it is now, then every change of its ActiveState or
// SubState, classified against the last Start or Stop of this Systemd.
// Changes come from systemd's events; every interval all units are also
// re-read in one call (a backstop for lost events), and after a
// reconnect. A state that comes and goes between two reads may be missed;
// one that stays is reported within interval. The channel is closed when
// ctx ends or the Systemd is closed.
func (s *Systemd) Watch(ctx context.Context, units []string, interval time.Duration) <-chan Event {
	out := make(chan Event, 64)
	w := s.watchers.add(units...)
	go func() {
		defer close(out)
		defer s.watchers.remove(w)
		wt := watching{s: s, units: units, out: out, last: map[string]UnitState{}}
		wt.run(ctx, w, interval)
	}()
	return out
}

// watching is one Watch in progress.
type watching struct {
	s     *Systemd
	units []string
	out   chan<- Event
	last  map[string]UnitState
}

func (wt *watching) run(ctx context.Context, w *watcher, interval time.Duration) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	if !wt.readAll(ctx) {
		return
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-wt.s.life.Done():
			return
		case c := <-w.changes:
			st := wt.last[c.unit]
			if stateFrom(&st, c) && !wt.emit(ctx, c.unit, st, c.gen) {
				return
			}
		case <-w.resync:
			if !wt.readAll(ctx) {
				return
			}
		case <-tick.C:
			if !wt.readAll(ctx) {
				return
			}
		}
	}
}

// readAll re-reads every unit and reports those that changed. It returns
// false once the watch is over.
func (wt *watching) readAll(ctx context.Context) bool {
	gen := wt.s.generation()
	states, err := wt.s.states(ctx, wt.units...)
	if err != nil {
		wt.s.opts.Logf("unitctl: watch: %v", err)
		return ctx.Err() == nil && wt.s.life.Err() == nil
	}
	for _, u := range slices.Sorted(maps.Keys(states)) {
		if !wt.emit(ctx, u, states[u], gen) {
			return false
		}
	}
	return true
}

// emit sends an event if the state differs from the last one reported.
// gen is the intent generation when the state was asked for (a read) or
// received (a signal). A state from before the unit's last Start or Stop
// is left for the next read: the intent it would be classified against
// came after it (a list of every unit, taken just before a Start, must not
// report that unit as stopped behind the daemon's back).
func (wt *watching) emit(ctx context.Context, unit string, st UnitState, gen uint64) bool {
	i := wt.s.intent(unit)
	if i.gen > gen {
		return true
	}
	prev, seen := wt.last[unit]
	if seen && prev.ActiveState == st.ActiveState && prev.SubState == st.SubState {
		return true
	}
	wt.last[unit] = st
	ev := Event{Unit: unit, State: st, Kind: classify(i.intent, st)}
	select {
	case wt.out <- ev:
		return true
	case <-ctx.Done():
		return false
	case <-wt.s.life.Done():
		return false
	}
}
