package spec

import (
	"errors"
	"fmt"
	"math/bits"
)

// How the checker decides, and why it is complete for this module.
//
// Invariants. A breadth-first search from Init under Next visits every
// reachable state once and evaluates TypeOK and ProcessExclusion in each.
// Breadth-first order makes the first violating state found one of the
// closest to Init, so its path in the search tree is a shortest
// counterexample.
//
// Handoff (<>Done) under WF_vars(A) for every action A of Next. TypeOK
// bounds every variable, so the reachable graph is finite (the search also
// refuses to grow past MaxStates). A behaviour that never reaches Done
// either (a) ends stuttering forever in a state s, or (b) takes infinitely
// many real steps and so, from some point on, stays inside one strongly
// connected component C of the graph of non-Done states.
//
// (a) Every step of every action changes some variable, so stuttering at s
// is fair exactly when no action is enabled at s: a reachable non-Done state
// with no successor (a deadlock) is a counterexample, and a state with a
// successor cannot be stuttered on forever by a fair behaviour.
//
// (b) Under weak fairness a behaviour confined to C is fair iff each action
// A is taken infinitely often or is infinitely often disabled. If for every
// A some edge inside C is an A step or some state of C disables A, the cycle
// that runs through all of those edges and states is fair. If some A is
// enabled in every state of C and no edge inside C is an A step, every
// behaviour confined to C keeps A enabled and never takes it: unfair. So C
// admits a fair counterexample iff it has an internal edge and passes that
// test, which is what Check evaluates for every component.
//
// Both cases together cover every infinite behaviour, so Handoff holds iff
// no deadlock and no such component is reachable. In this module, with
// PollLow >= 1, every cycle would need a Tick, Tick strictly raises now, and
// now is bounded: the graph is acyclic and case (b) never fires; the check
// does not rely on that argument, it verifies it.

// MaxStates bounds the search; a model whose TypeOK fails may otherwise grow
// without end.
const MaxStates = 20_000_000

// ErrTooManyStates reports a search that passed MaxStates.
var ErrTooManyStates = errors.New("spec: state space exceeds MaxStates")

// Step is one step of a behaviour: the action taken and the state after it.
// The first step's action is "Init".
type Step struct {
	Action string `json:"action"`
	State  State  `json:"state"`
}

// Kinds of counterexample.
const (
	KindInvariant = "invariant" // the last state breaks the named invariant
	KindDeadlock  = "deadlock"  // the last state is not Done and enables no action
	KindCycle     = "cycle"     // from CycleFrom on, the steps repeat forever, fairly
)

// Result is the outcome of checking one instance of the module.
type Result struct {
	Lease
	States           int    `json:"states"`
	TypeOK           bool   `json:"type_ok"`
	ProcessExclusion bool   `json:"process_exclusion"`
	Handoff          bool   `json:"handoff"`
	Violated         string `json:"violated,omitempty"`
	Kind             string `json:"counterexample_kind,omitempty"`
	CycleFrom        *int   `json:"cycle_from,omitempty"`
	Counterexample   []Step `json:"counterexample"`
}

// OK reports whether every property holds.
func (r Result) OK() bool { return r.TypeOK && r.ProcessExclusion && r.Handoff }

// graph is the reachable state graph in breadth-first order: state i's
// successors are edgeTo[edgeStart[i]:edgeStart[i+1]].
type graph struct {
	lease     Lease
	states    []State
	index     map[uint64]int32 // by key(state)
	parent    []int32          // breadth-first tree; -1 for Init
	via       []uint8          // the action that reached the state from its parent
	edgeStart []int32
	edgeTo    []int32
	edgeAct   []uint8
	enabled   []uint16 // bit a set: Actions[a] has a successor here
}

const allActions = 1<<13 - 1

func init() {
	if len(Actions) != bits.OnesCount16(allActions) {
		panic("spec: allActions does not match Actions")
	}
}

// explore builds the reachable graph. It stops early, returning the index of
// the state, as soon as stop reports true for a newly found state.
func explore(l Lease, stop func(State) bool) (*graph, int32, error) {
	g := &graph{lease: l, index: make(map[uint64]int32)}
	if stopped := g.add(Init(), -1, 0, stop); stopped {
		return g, 0, nil
	}
	// One callback for the whole search: it reads the state being expanded
	// and the action being tried from these variables.
	var (
		from  int32
		act   int
		mask  uint16
		found int32 = -1
	)
	emit := func(t State) {
		mask |= 1 << act
		j, ok := g.index[key(t)]
		if !ok {
			j = int32(len(g.states))
			if g.add(t, from, uint8(act), stop) && found < 0 {
				found = j
			}
		}
		g.edgeTo = append(g.edgeTo, j)
		g.edgeAct = append(g.edgeAct, uint8(act))
	}
	for ; int(from) < len(g.states); from++ {
		g.edgeStart = append(g.edgeStart, int32(len(g.edgeTo)))
		mask = 0
		// A state outside TypeOK is reported, not expanded: what follows a
		// type error means nothing, and the bound keeps the graph finite
		// and every key distinct.
		if l.TypeOK(g.states[from]) {
			for act = range Actions {
				Actions[act].Next(l, g.states[from], emit)
			}
		}
		g.enabled = append(g.enabled, mask)
		if found >= 0 {
			return g, found, nil
		}
		if len(g.states) > MaxStates {
			return nil, -1, fmt.Errorf("%w (%d) for %+v", ErrTooManyStates, MaxStates, l)
		}
	}
	g.edgeStart = append(g.edgeStart, int32(len(g.edgeTo)))
	return g, -1, nil
}

func (g *graph) add(s State, parent int32, via uint8, stop func(State) bool) bool {
	g.index[key(s)] = int32(len(g.states))
	g.states = append(g.states, s)
	g.parent = append(g.parent, parent)
	g.via = append(g.via, via)
	return stop != nil && stop(s)
}

func (g *graph) successors(i int32) ([]int32, []uint8) {
	lo, hi := g.edgeStart[i], g.edgeStart[i+1]
	return g.edgeTo[lo:hi], g.edgeAct[lo:hi]
}

// pathTo returns the breadth-first (shortest) behaviour from Init to i.
func (g *graph) pathTo(i int32) []Step {
	var rev []Step
	for ; i >= 0; i = g.parent[i] {
		name := "Init"
		if g.parent[i] >= 0 {
			name = Actions[g.via[i]].Name
		}
		rev = append(rev, Step{name, g.states[i]})
	}
	for a, b := 0, len(rev)-1; a < b; a, b = a+1, b-1 {
		rev[a], rev[b] = rev[b], rev[a]
	}
	return rev
}

// Check explores every reachable state of l and checks TypeOK,
// ProcessExclusion and Handoff. The counterexample, if any, is for the first
// property violated in that order.
func (l Lease) Check() (Result, error) {
	if err := l.Validate(); err != nil {
		return Result{}, err
	}
	return l.check()
}

func (l Lease) check() (Result, error) {
	g, _, err := explore(l, nil)
	if err != nil {
		return Result{}, err
	}
	r := Result{Lease: l, States: len(g.states), TypeOK: true, ProcessExclusion: true, Handoff: true}
	for i, s := range g.states {
		typeOK, excl := l.TypeOK(s), ProcessExclusion(s)
		if r.Violated == "" && !typeOK {
			r.Violated, r.Kind, r.Counterexample = "TypeOK", KindInvariant, g.pathTo(int32(i))
		}
		if r.Violated == "" && !excl {
			r.Violated, r.Kind, r.Counterexample = "ProcessExclusion", KindInvariant, g.pathTo(int32(i))
		}
		r.TypeOK = r.TypeOK && typeOK
		r.ProcessExclusion = r.ProcessExclusion && excl
	}
	steps, cycleFrom := g.handoffCounterexample()
	if steps != nil {
		r.Handoff = false
		if r.Violated == "" {
			r.Violated, r.Counterexample = "Handoff", steps
			r.Kind = KindDeadlock
			if cycleFrom >= 0 {
				r.Kind, r.CycleFrom = KindCycle, &cycleFrom
			}
		}
	}
	return r, nil
}

// Excludes reports whether ProcessExclusion holds, stopping at the first
// violating state. It is the fast path of the sweep.
func (l Lease) Excludes() (bool, error) {
	if err := l.Validate(); err != nil {
		return false, err
	}
	_, found, err := explore(l, func(s State) bool { return !ProcessExclusion(s) })
	return found < 0, err
}

// handoffCounterexample returns a behaviour that never reaches Done and is
// fair, or nil. cycleFrom is the index where the repeating part starts, or
// -1 for a deadlock.
func (g *graph) handoffCounterexample() ([]Step, int) {
	for i, s := range g.states {
		if !Done(s) && g.enabled[i] == 0 {
			return g.pathTo(int32(i)), -1
		}
	}
	comp, n := g.components()
	members := make([][]int32, n)
	for i, c := range comp {
		if c >= 0 {
			members[c] = append(members[c], int32(i))
		}
	}
	for c, m := range members {
		if g.fairCycle(comp, int32(c), m) {
			return g.lasso(comp, int32(c), m)
		}
	}
	return nil, -1
}

// fairCycle applies the weak-fairness test of case (b) to component c.
func (g *graph) fairCycle(comp []int32, c int32, members []int32) bool {
	var taken, disabled uint16
	internal := false
	for _, i := range members {
		disabled |= allActions &^ g.enabled[i]
		to, act := g.successors(i)
		for k, j := range to {
			if comp[j] == c {
				internal = true
				taken |= 1 << act[k]
			}
		}
	}
	return internal && taken|disabled == allActions
}

// components labels every non-Done state with its strongly connected
// component (Tarjan's algorithm, iterative). Done states get -1.
func (g *graph) components() ([]int32, int) {
	n := len(g.states)
	comp := make([]int32, n)
	low := make([]int32, n)
	order := make([]int32, n) // 0: unvisited; else visit number + 1
	onStack := make([]bool, n)
	var stack []int32
	type frame struct{ v, edge int32 }
	var calls []frame
	next, count := int32(1), 0
	for i := range comp {
		comp[i] = -1
	}
	for root := int32(0); int(root) < n; root++ {
		if order[root] != 0 || Done(g.states[root]) {
			continue
		}
		calls = append(calls, frame{root, g.edgeStart[root]})
		order[root], low[root] = next, next
		next++
		stack = append(stack, root)
		onStack[root] = true
		for len(calls) > 0 {
			f := &calls[len(calls)-1]
			v := f.v
			if f.edge < g.edgeStart[v+1] {
				w := g.edgeTo[f.edge]
				f.edge++
				switch {
				case Done(g.states[w]):
				case order[w] == 0:
					order[w], low[w] = next, next
					next++
					stack = append(stack, w)
					onStack[w] = true
					calls = append(calls, frame{w, g.edgeStart[w]})
				case onStack[w]:
					low[v] = min(low[v], order[w])
				}
				continue
			}
			calls = calls[:len(calls)-1]
			if len(calls) > 0 {
				u := calls[len(calls)-1].v
				low[u] = min(low[u], low[v])
			}
			if low[v] == order[v] {
				for {
					w := stack[len(stack)-1]
					stack = stack[:len(stack)-1]
					onStack[w] = false
					comp[w] = int32(count)
					if w == v {
						break
					}
				}
				count++
			}
		}
	}
	return comp, count
}

// lasso builds a fair cycle through component c: the shortest path from
// Init to the component's state nearest Init, then a loop inside the
// component that takes every action taken there and visits, for each other
// action, a state that disables it, and returns to where it began.
func (g *graph) lasso(comp []int32, c int32, members []int32) ([]Step, int) {
	entry := members[0]
	for _, i := range members {
		entry = min(entry, i)
	}
	steps := g.pathTo(entry)
	cycleFrom := len(steps) - 1
	cur := entry
	walk := func(target int32) {
		path := g.pathWithin(comp, c, cur, target)
		steps = append(steps, path...)
		cur = target
	}
	take := func(from int32, k int32) {
		walk(from)
		j := g.edgeTo[k]
		steps = append(steps, Step{Actions[g.edgeAct[k]].Name, g.states[j]})
		cur = j
	}
	var covered uint16
	for _, i := range members {
		for k := g.edgeStart[i]; k < g.edgeStart[i+1]; k++ {
			a := uint16(1) << g.edgeAct[k]
			if comp[g.edgeTo[k]] == c && covered&a == 0 {
				covered |= a
				take(i, k)
			}
		}
	}
	for _, i := range members {
		if missing := allActions &^ g.enabled[i] &^ covered; missing != 0 {
			covered |= missing
			walk(i)
		}
	}
	walk(entry)
	return steps, cycleFrom
}

// pathWithin returns the steps of a shortest path from a to b that stays in
// component c (empty when a == b).
func (g *graph) pathWithin(comp []int32, c, a, b int32) []Step {
	type hop struct {
		from int32
		edge int32
	}
	prev := map[int32]hop{a: {-1, -1}}
	queue := []int32{a}
	for len(queue) > 0 && a != b {
		v := queue[0]
		queue = queue[1:]
		for k := g.edgeStart[v]; k < g.edgeStart[v+1]; k++ {
			w := g.edgeTo[k]
			if _, seen := prev[w]; seen || comp[w] != c {
				continue
			}
			prev[w] = hop{v, k}
			if w == b {
				queue = nil
				break
			}
			queue = append(queue, w)
		}
	}
	var rev []Step
	for v := b; v != a; v = prev[v].from {
		k := prev[v].edge
		rev = append(rev, Step{Actions[g.edgeAct[k]].Name, g.states[v]})
	}
	for i, j := 0, len(rev)-1; i < j; i, j = i+1, j-1 {
		rev[i], rev[j] = rev[j], rev[i]
	}
	return rev
}
