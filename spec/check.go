package spec

import (
	"errors"
	"fmt"
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
// does not rely on that argument, it verifies it. That matters for
// LeaseFailover.tla, whose clock stops at Settle: there, only the check
// shows that no fair cycle avoids Done.

// The same search and the same decision serve every module in this package
// (Lease.tla and LeaseFailover.tla): module describes one instance to them.

// MaxStates bounds the search; a model whose TypeOK fails may otherwise grow
// without end.
const MaxStates = 20_000_000

// ErrTooManyStates reports a search that passed MaxStates.
var ErrTooManyStates = errors.New("spec: state space exceeds MaxStates")

// StepOf is one step of a behaviour of a module whose states are S: the
// action taken and the state after it. The first step's action is "Init".
type StepOf[S any] struct {
	Action string `json:"action"`
	State  S      `json:"state"`
}

// Step is one step of a behaviour of Lease.tla.
type Step = StepOf[State]

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

// module is one instance of a module, as the search needs it: its initial
// state, its invariants, Done, and Next's disjuncts (each weakly fair, each
// step of each changing some variable), with key packing a state that
// satisfies TypeOK into a smaller comparable value.
type module[S, K comparable] struct {
	name      string // for errors: the instance and its constants
	init      S
	key       func(S) K
	typeOK    func(S) bool
	exclusion func(S) bool
	done      func(S) bool
	actions   []string
	next      []func(S, func(S))
}

// all is the set of every action, as a bit mask over actions.
func (m *module[S, K]) all() uint32 { return 1<<len(m.actions) - 1 }

// graph is the reachable state graph in breadth-first order: state i's
// successors are edgeTo[edgeStart[i]:edgeStart[i+1]].
type graph[S, K comparable] struct {
	m         *module[S, K]
	states    []S
	index     map[K]int32 // by key(state)
	parent    []int32     // breadth-first tree; -1 for Init
	via       []uint8     // the action that reached the state from its parent
	edgeStart []int32
	edgeTo    []int32
	edgeAct   []uint8
	enabled   []uint32 // bit a set: action a has a successor here
}

// explore builds the reachable graph. It stops early, returning the index of
// the state, as soon as stop reports true for a newly found state.
func explore[S, K comparable](m *module[S, K], stop func(S) bool) (*graph[S, K], int32, error) {
	if len(m.actions) > 32 || len(m.next) != len(m.actions) {
		panic("spec: a module needs one function per action, at most 32")
	}
	g := &graph[S, K]{m: m, index: make(map[K]int32)}
	if stopped := g.add(m.init, -1, 0, stop); stopped {
		return g, 0, nil
	}
	// One callback for the whole search: it reads the state being expanded
	// and the action being tried from these variables.
	var (
		from  int32
		act   int
		mask  uint32
		found int32 = -1
	)
	emit := func(t S) {
		mask |= 1 << act
		j, ok := g.index[m.key(t)]
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
		if m.typeOK(g.states[from]) {
			for act = range m.next {
				m.next[act](g.states[from], emit)
			}
		}
		g.enabled = append(g.enabled, mask)
		if found >= 0 {
			return g, found, nil
		}
		if len(g.states) > MaxStates {
			return nil, -1, fmt.Errorf("%w (%d) for %s", ErrTooManyStates, MaxStates, m.name)
		}
	}
	g.edgeStart = append(g.edgeStart, int32(len(g.edgeTo)))
	return g, -1, nil
}

func (g *graph[S, K]) add(s S, parent int32, via uint8, stop func(S) bool) bool {
	g.index[g.m.key(s)] = int32(len(g.states))
	g.states = append(g.states, s)
	g.parent = append(g.parent, parent)
	g.via = append(g.via, via)
	return stop != nil && stop(s)
}

func (g *graph[S, K]) successors(i int32) ([]int32, []uint8) {
	lo, hi := g.edgeStart[i], g.edgeStart[i+1]
	return g.edgeTo[lo:hi], g.edgeAct[lo:hi]
}

// pathTo returns the breadth-first (shortest) behaviour from Init to i.
func (g *graph[S, K]) pathTo(i int32) []StepOf[S] {
	var rev []StepOf[S]
	for ; i >= 0; i = g.parent[i] {
		name := "Init"
		if g.parent[i] >= 0 {
			name = g.m.actions[g.via[i]]
		}
		rev = append(rev, StepOf[S]{name, g.states[i]})
	}
	for a, b := 0, len(rev)-1; a < b; a, b = a+1, b-1 {
		rev[a], rev[b] = rev[b], rev[a]
	}
	return rev
}

// verdict is what decide finds for one instance.
type verdict[S any] struct {
	states                     int
	typeOK, exclusion, handoff bool
	violated, kind             string
	cycleFrom                  *int
	counterexample             []StepOf[S]
}

// decide explores every reachable state of m and checks TypeOK,
// ProcessExclusion and Handoff. The counterexample, if any, is for the first
// property violated in that order.
func decide[S, K comparable](m *module[S, K]) (verdict[S], error) {
	g, _, err := explore(m, nil)
	if err != nil {
		return verdict[S]{}, err
	}
	r := verdict[S]{states: len(g.states), typeOK: true, exclusion: true, handoff: true}
	for i, s := range g.states {
		typeOK, excl := m.typeOK(s), m.exclusion(s)
		if r.violated == "" && !typeOK {
			r.violated, r.kind, r.counterexample = "TypeOK", KindInvariant, g.pathTo(int32(i))
		}
		if r.violated == "" && !excl {
			r.violated, r.kind, r.counterexample = "ProcessExclusion", KindInvariant, g.pathTo(int32(i))
		}
		r.typeOK = r.typeOK && typeOK
		r.exclusion = r.exclusion && excl
	}
	steps, cycleFrom := g.handoffCounterexample()
	if steps != nil {
		r.handoff = false
		if r.violated == "" {
			r.violated, r.counterexample = "Handoff", steps
			r.kind = KindDeadlock
			if cycleFrom >= 0 {
				r.kind, r.cycleFrom = KindCycle, &cycleFrom
			}
		}
	}
	return r, nil
}

// firstWhere returns a shortest behaviour to a state for which stop reports
// true, or nil when no reachable state does.
func firstWhere[S, K comparable](m *module[S, K], stop func(S) bool) ([]StepOf[S], error) {
	g, found, err := explore(m, stop)
	if err != nil || found < 0 {
		return nil, err
	}
	return g.pathTo(found), nil
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
	v, err := decide(l.module())
	if err != nil {
		return Result{}, err
	}
	return Result{
		Lease: l, States: v.states, TypeOK: v.typeOK, ProcessExclusion: v.exclusion, Handoff: v.handoff,
		Violated: v.violated, Kind: v.kind, CycleFrom: v.cycleFrom, Counterexample: v.counterexample,
	}, nil
}

// Excludes reports whether ProcessExclusion holds, stopping at the first
// violating state. It is the fast path of the sweep.
func (l Lease) Excludes() (bool, error) {
	if err := l.Validate(); err != nil {
		return false, err
	}
	steps, err := firstWhere(l.module(), func(s State) bool { return !ProcessExclusion(s) })
	return steps == nil, err
}

// module describes l to the search.
func (l Lease) module() *module[State, uint64] {
	m := &module[State, uint64]{
		name:      fmt.Sprintf("%+v", l),
		init:      Init(),
		key:       key,
		typeOK:    l.TypeOK,
		exclusion: ProcessExclusion,
		done:      Done,
	}
	for _, a := range Actions {
		m.actions = append(m.actions, a.Name)
		m.next = append(m.next, func(s State, emit func(State)) { a.Next(l, s, emit) })
	}
	return m
}

// handoffCounterexample returns a behaviour that never reaches Done and is
// fair, or nil. cycleFrom is the index where the repeating part starts, or
// -1 for a deadlock.
func (g *graph[S, K]) handoffCounterexample() ([]StepOf[S], int) {
	for i, s := range g.states {
		if !g.m.done(s) && g.enabled[i] == 0 {
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
func (g *graph[S, K]) fairCycle(comp []int32, c int32, members []int32) bool {
	var taken, disabled uint32
	internal := false
	for _, i := range members {
		disabled |= g.m.all() &^ g.enabled[i]
		to, act := g.successors(i)
		for k, j := range to {
			if comp[j] == c {
				internal = true
				taken |= 1 << act[k]
			}
		}
	}
	return internal && taken|disabled == g.m.all()
}

// components labels every non-Done state with its strongly connected
// component (Tarjan's algorithm, iterative). Done states get -1.
func (g *graph[S, K]) components() ([]int32, int) {
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
		if order[root] != 0 || g.m.done(g.states[root]) {
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
				case g.m.done(g.states[w]):
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
func (g *graph[S, K]) lasso(comp []int32, c int32, members []int32) ([]StepOf[S], int) {
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
		steps = append(steps, StepOf[S]{g.m.actions[g.edgeAct[k]], g.states[j]})
		cur = j
	}
	var covered uint32
	for _, i := range members {
		for k := g.edgeStart[i]; k < g.edgeStart[i+1]; k++ {
			a := uint32(1) << g.edgeAct[k]
			if comp[g.edgeTo[k]] == c && covered&a == 0 {
				covered |= a
				take(i, k)
			}
		}
	}
	for _, i := range members {
		if missing := g.m.all() &^ g.enabled[i] &^ covered; missing != 0 {
			covered |= missing
			walk(i)
		}
	}
	walk(entry)
	return steps, cycleFrom
}

// pathWithin returns the steps of a shortest path from a to b that stays in
// component c (empty when a == b).
func (g *graph[S, K]) pathWithin(comp []int32, c, a, b int32) []StepOf[S] {
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
	var rev []StepOf[S]
	for v := b; v != a; v = prev[v].from {
		k := prev[v].edge
		rev = append(rev, StepOf[S]{g.m.actions[g.edgeAct[k]], g.states[v]})
	}
	for i, j := 0, len(rev)-1; i < j; i, j = i+1, j-1 {
		rev[i], rev[j] = rev[j], rev[i]
	}
	return rev
}
