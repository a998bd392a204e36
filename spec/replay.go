package spec

import (
	"errors"
	"fmt"
)

// ErrNotBehaviour reports a sequence of steps that the module does not allow.
var ErrNotBehaviour = errors.New("spec: not a behaviour of the module")

// Replay checks that steps is a behaviour of l: it starts in Init and every
// later step is a successor of the one before under the action it names. A
// non-negative cycleFrom also requires the last state to equal the state at
// that index, closing a loop of at least one step.
func (l Lease) Replay(steps []Step, cycleFrom int) error {
	return replaySteps(l.module(), steps, cycleFrom)
}

// Enabled lists the actions that have a successor in s.
func (l Lease) Enabled(s State) []string { return enabled(l.module(), s) }

func replaySteps[S, K comparable](m *module[S, K], steps []StepOf[S], cycleFrom int) error {
	if len(steps) == 0 || steps[0].Action != "Init" || steps[0].State != m.init {
		return fmt.Errorf("%w: it does not start with Init", ErrNotBehaviour)
	}
	for i := 1; i < len(steps); i++ {
		if !allows(m, steps[i-1].State, steps[i]) {
			return fmt.Errorf("%w: step %d (%s) does not lead from %v to %v",
				ErrNotBehaviour, i, steps[i].Action, steps[i-1].State, steps[i].State)
		}
	}
	if cycleFrom >= 0 {
		last := len(steps) - 1
		if cycleFrom >= last || steps[cycleFrom].State != steps[last].State {
			return fmt.Errorf("%w: the loop from step %d does not close", ErrNotBehaviour, cycleFrom)
		}
	}
	return nil
}

// allows reports whether the action named in step leads from s to step.State.
func allows[S, K comparable](m *module[S, K], s S, step StepOf[S]) bool {
	for a, name := range m.actions {
		if name != step.Action {
			continue
		}
		ok := false
		m.next[a](s, func(t S) { ok = ok || t == step.State })
		return ok
	}
	return false
}

func enabled[S, K comparable](m *module[S, K], s S) []string {
	var names []string
	for a, name := range m.actions {
		some := false
		m.next[a](s, func(S) { some = true })
		if some {
			names = append(names, name)
		}
	}
	return names
}
