package policy

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/unitlease/unitlease/spec"
)

// The refinement mapping: every step of the world is one of the spec's
// actions, or a stutter that changes none of the spec's variables under
// the mapping below, or the step fails the test.
//
//	spec variable  in the world
//	now            true time; Tick is time passing
//	version        the stored record: Commit and Acquire write it
//	seen, age      a standby machine's seen value and its age
//	leader, remaining, committed
//	               the machine of a node that holds the lease: Reply,
//	               BeginRenew and Cancel move it; retry attempts inside the
//	               renew phase are stutters (the spec does not count them)
//	signalled      a stop sent to a living process: Signal
//	oldAlive       the process of the node that held the lease: Reap
//	standby        the machine of a node that does not: Observe, Defer,
//	               Acquire, Start; Spawn brings its process alive (newAlive)
//
// With two symmetric nodes and many handovers, each node plays the
// spec's leader while it holds the lease and its standby while it does
// not. Steps the spec has no action for are mapped to the nearest action
// whose effect they have:
//
//   - A write whose writer will not act on it (an acquire or renewal whose
//     reply is lost, a release, a Redis restart that drops the key) is a
//     Commit: the record changes, no process starts or stops.
//   - A definitive loss, a unit failure, a start failure and a handoff
//     are Cancel taken early: the spec's Cancel is the latest a leader may
//     begin to stop.
//   - A unit dying on its own is Reap without a Signal.
//   - A release of a confirmed-inactive unit followed by an immediate
//     acquire is Commit then Acquire where the spec would wait out the
//     age: safe because the old leader has taken Return (rule 3); the
//     Commit's guard checks that its process is dead.
//
// Each labelled step also checks the guard of its action, transposed to
// the world; stutters must be in the table of allowed (state, event,
// state) triples. A step that is neither fails.

const stutter = "stutter"

// specActionNames are the spec's actions, read from the spec package.
var specActionNames = func() map[string]bool {
	names := map[string]bool{}
	for _, a := range spec.Actions {
		names[a.Name] = true
	}
	return names
}()

type specMap struct {
	w      *world
	counts map[string]int
}

func newSpecMap(w *world) specMap { return specMap{w: w, counts: map[string]int{}} }

func (s *specMap) label(name string) {
	if name != stutter && !specActionNames[name] {
		s.w.fail("label %q is not an action of the spec", name)
	}
	s.counts[name]++
}

func (s *specMap) guard(ok bool, format string, args ...any) {
	if !ok {
		s.w.fail("at %v: %s\n%s", s.w.now, fmt.Sprintf(format, args...), s.w.lastSteps())
	}
}

func (s *specMap) stutter(string) { s.label(stutter) }

// tick: time passes. Urgent steps in the spec run before the clock moves;
// here a node may act on its Wake up to maxLag late, the scheduling delay
// the margin covers, and no later.
func (s *specMap) tick(to time.Duration) {
	for _, n := range s.w.nodes {
		if n.wakeAt != Never {
			s.guard(n.local(to) <= n.wakeAt.Add(maxLag+time.Millisecond), "%s: time passes its wake %v", n.name, n.wakeAt)
		}
	}
	s.label("Tick")
}

func (s *specMap) spawn(n *simNode) {
	m := n.m
	s.guard(m.state == Starting && m.job == StartUnit && m.holding, "%s spawns in %v", n.name, m.state)
	s.label("Spawn")
}

func (s *specMap) reap(n *simNode, why string) {
	s.guard(n.alive && (why == "crash" || n.signalled), "%s: Reap of a process not alive or not signalled", n.name)
	s.label("Reap")
}

func (s *specMap) drop() { s.label("Commit") }

// storeStep maps the store's execution of a request.
func (s *specMap) storeStep(r *request, before Record, reply Event) {
	n := s.w.nodes[r.node]
	switch reply.Kind {
	case AcquireOK:
		if r.fate == fateOK && n.m.state == Acquiring {
			s.guard(n.m.seen.Same(before), "%s acquires over %v, not what it saw", n.name, before)
			s.label("Acquire")
			return
		}
		s.label("Commit")
	case RenewOK:
		s.label("Commit")
	case ReleaseOK:
		s.guard(!n.alive && n.m.state != Starting && n.m.state != Leader, "%s releases with its unit alive", n.name)
		s.label("Commit")
	default:
		s.label(stutter)
	}
}

// machineStep maps one Step: the timers that ran out, the event, and the
// actions it returned.
func (s *specMap) machineStep(n *simNode, before Machine, e Event, out *Output) {
	now := n.local(s.w.now)
	mid := before
	mid.now = max(mid.now, now)
	var scratch Output
	mid.expire(&scratch)
	labelled := false
	if before.leading() && !mid.leading() {
		s.guard(now >= before.deadline(), "%s: Cancel before its deadline", n.name)
		s.label("Cancel")
		labelled = true
	}
	if !s.eventPart(n, mid, e, out) && !allowedStutter[stutterKey{mid.state, e.Kind, n.m.state}] {
		s.w.fail("%s: step %v -[%v]-> %v matches no action of the spec\n%s", n.name, mid.state, e.Kind, n.m.state, s.w.lastSteps())
	}
	if s.actionPart(n, mid, out, now) || labelled {
		return
	}
	s.label(stutter)
}

// eventPart labels what the event did, if it did what an action does.
func (s *specMap) eventPart(n *simNode, mid Machine, e Event, out *Output) bool {
	after, now := n.m, n.local(s.w.now)
	var names []string
	switch {
	case e.Kind == Observed && mid.req == Observe:
		names = append(names, "Observe")
		if after.observing() {
			names = append(names, "Defer")
		}
	case mid.req == Acquire && (e.Kind == AcquireLost || e.Kind == AcquireUnknown || e.Kind == AcquireOK && after.state == Standby):
		names = append(names, "Defer")
	case e.Kind == RenewOK && mid.leading() && after.anchor != mid.anchor:
		s.guard(after.anchor == mid.reqAt && now.Sub(mid.reqAt) <= s.w.tm.ReplyMax, "%s: Reply anchored at %v, sent %v", n.name, after.anchor, mid.reqAt)
		names = append(names, "Reply")
	case e.Kind == UnitStopped && mid.job == StopUnit:
		s.guard(!n.alive, "%s: Return while its unit is alive", n.name)
		names = append(names, "Return")
	}
	if mid.leading() && (after.state == Stopping || after.state == Standby) {
		j := out.Journal
		s.guard(j == JournalLost || j == JournalUnitFailed || j == JournalStopping || j == JournalRenewFailed, "%s: left the lease with journal %q", n.name, j)
		names = append(names, "Cancel")
	}
	for _, name := range names {
		s.label(name)
	}
	return len(names) > 0
}

// actionPart labels the actions the step returned.
func (s *specMap) actionPart(n *simNode, mid Machine, out *Output, now Instant) bool {
	after, labelled := n.m, false
	for a := range out.Actions() {
		switch {
		case a.Kind == StopUnit && n.alive:
			s.guard(after.state == Stopping, "%s: stop in %v", n.name, after.state)
			s.label("Signal")
			labelled = true
		case a.Kind == StartUnit:
			confirmed := mid.state == Acquiring && mid.seen.Present || mid.state == Confirming && after.anchor >= mid.confirmAt
			s.guard(after.holding && confirmed, "%s: Start from %v unconfirmed", n.name, mid.state)
			s.label("Start")
			labelled = true
		case a.Kind == Renew && after.leading() && after.attempts == 0:
			// On a renew grid the pause may end up to one grid step early:
			// the spec's Retry shorter and its Renew longer by as much, the
			// deadline (anchor + Retry + Renew) where it was.
			early := after.anchor.Add(s.w.tm.Retry).Sub(now)
			due := early <= 0 || now > after.anchor && early <= time.Duration(after.grid) ||
				after.state == Confirming && now >= after.confirmAt
			s.guard(due, "%s: BeginRenew %v before the retry pause is over (grid %v)", n.name, early, time.Duration(after.grid))
			s.label("BeginRenew")
			labelled = true
		case a.Kind == Acquire: // the spec's Acquire guard, at the decision
			released := a.Record.Present && a.Record.Released
			s.guard(released || now.Sub(after.seenAt) >= s.w.tm.LeaseSpan, "%s: acquire at age %v", n.name, now.Sub(after.seenAt))
		}
	}
	return labelled
}

type stutterKey struct {
	from State
	e    EventKind
	to   State
}

// allowedStutter lists the (state, event, state) steps that change no spec
// variable, and why.
var allowedStutter = func() map[stutterKey]bool {
	all := []State{Standby, Backoff, Acquiring, Confirming, Starting, Leader, Stopping, Releasing, StopFailed}
	holding := []State{Confirming, Starting, Leader, Stopping, StopFailed, Releasing, Standby}
	afterStop := []State{Stopping, StopFailed, Releasing, Standby, Backoff}
	k := map[stutterKey]bool{}
	add := func(e EventKind, to func(State) State, from ...State) {
		for _, f := range from {
			k[stutterKey{f, e, to(f)}] = true
		}
	}
	same := func(s State) State { return s }
	to := func(t State) func(State) State { return func(State) State { return t } }
	add(Tick, same, all...)                                      // nothing due, a poll sent, a retry attempt sent
	add(ObserveFailed, same, Standby, Backoff)                   // time passes in Poll
	add(AcquireOK, to(Confirming), Acquiring)                    // Acquired, waiting before Start
	add(AcquireOK, to(Starting), Acquiring)                      // Acquired; the StartUnit is the Start
	add(RenewOK, same, holding...)                               // a late reply, or one while stopping
	add(RenewFailed, same, holding...)                           // the renew phase goes on
	add(RenewLost, same, holding...)                             // our own record at a later version; or already stopping, or gone
	add(RenewMissing, same, Stopping, StopFailed, Standby)       // already stopping, or gone
	add(RenewLost, to(Backoff), Releasing)                       // nothing left to release
	add(RenewMissing, to(Backoff), Releasing)                    // nothing left to release
	add(ReleaseOK, to(Backoff), Releasing)                       // the leader is Done already
	add(ReleaseFailed, to(Backoff), Releasing)                   // the same: the leader is Done
	add(ReleaseLost, to(Backoff), Releasing)                     // the same
	add(ReleaseLost, same, Releasing)                            // our own later record: released again
	add(ReleaseFailed, same, Releasing)                          // a stop_failed record: released again later
	add(UnitStarted, to(Leader), Starting)                       // Spawn was the step
	add(UnitStartFailed, same, afterStop...)                     // the replaced start's result, or a stale one
	add(UnitFailed, same, afterStop...)                          // a stop is under way or over: stale
	add(UnitStopFailed, to(StopFailed), Stopping)                // still Stopping, outside the model
	add(HandoffRequested, same, Standby, Backoff, Acquiring)     // refused
	add(HandoffRequested, same, Stopping, StopFailed, Releasing) // under way
	add(HandoffRequested, to(Releasing), Confirming)             // never started: release
	add(Withdraw, same, all...)                                  // the node stops competing; what runs runs on
	add(Withdraw, to(Releasing), Confirming)                     // never started: release
	add(AcquireOK, to(Stopping), Acquiring)                      // acquired while withdrawn: given back unstarted
	add(AcquireOK, to(Releasing), Acquiring)                     // the same, over a missing key: released at once
	add(Compete, same, all...)                                   // competes again
	add(Defer, same, all...)                                     // only the wait before an acquisition changes
	return k
}()

// rapidChooser draws from rapid, with one generator per range.
type rapidChooser struct {
	t    *rapid.T
	gens map[[2]int]*rapid.Generator[int]
}

func (c rapidChooser) draw(lo, hi int, label string) int {
	g := c.gens[[2]int{lo, hi}]
	if g == nil {
		g = rapid.IntRange(lo, hi)
		c.gens[[2]int{lo, hi}] = g
	}
	return g.Draw(c.t, label)
}

// randChooser draws from math/rand, for runs that want no shrinking.
type randChooser struct{ r *rand.Rand }

func (c randChooser) draw(lo, hi int, _ string) int { return lo + c.r.IntN(hi-lo+1) }

// worldTimings are the timings the world runs: the first five of the
// spec's (the defaults, then small ones first so that they see many
// handovers per step).
var worldTimings = specTimings[:5]

// minSteps is the least number of steps one run of the test takes.
const minSteps = 100_000

// stepsPerCheck spreads minSteps over the checks rapid will run (its
// -rapid.checks, a fifth of it under -short).
func stepsPerCheck(t *testing.T) int {
	checks := 100
	if f := flag.Lookup("rapid.checks"); f != nil {
		if n, err := strconv.Atoi(f.Value.String()); err == nil && n > 0 {
			checks = n
		}
	}
	if testing.Short() {
		checks = max(1, checks/5)
	}
	t.Logf("%d checks of at least %d steps", checks, (minSteps+checks-1)/checks)
	return (minSteps + checks - 1) / checks
}

// TestRefinement runs two nodes' machines against an in-memory store with
// bounded random delays and faults, checks exclusion and the spec mapping
// at every step, and that each run settles with exactly one node running.
func TestRefinement(t *testing.T) {
	perCheck := stepsPerCheck(t)
	total, counts := 0, map[string]int{}
	rapid.Check(t, func(rt *rapid.T) {
		tm := worldTimings[rapid.IntRange(0, len(worldTimings)-1).Draw(rt, "timing")]
		tm.LeaseSpan = tm.SafeMinimum() + time.Duration(rapid.IntRange(0, 2000).Draw(rt, "extra_ms"))*time.Millisecond
		w := newWorld(tm, renewGrids(tm), rapidChooser{rt, map[[2]int]*rapid.Generator[int]{}}, rt.Fatalf)
		w.run(perCheck)
		total += w.steps
		for k, v := range w.spec.counts {
			counts[k] += v
		}
	})
	if t.Failed() {
		return
	}
	t.Logf("%d steps; by spec action: %v", total, counts)
	if total < minSteps {
		t.Errorf("%d steps, want at least %d", total, minSteps)
	}
	for name := range specActionNames {
		if counts[name] == 0 {
			t.Errorf("no step took the spec's %s", name)
		}
	}
}

// errViolation carries a world's failure out of a run that expects one.
type errViolation struct{ msg string }

// runWorld runs one world from seed and returns its failure, or "".
func runWorld(tm Timing, grids []time.Duration, seed uint64, steps int) (msg string) {
	defer func() {
		if r := recover(); r != nil {
			v, ok := r.(errViolation)
			if !ok {
				panic(r)
			}
			msg = v.msg
		}
	}()
	fail := func(format string, args ...any) { panic(errViolation{fmt.Sprintf(format, args...)}) }
	w := newWorld(tm, grids, randChooser{rand.New(rand.NewPCG(seed, 1))}, fail)
	w.run(steps)
	return ""
}

// TestWorldFindsUnsafeTiming shows the world has teeth: with a lease span
// that leaves out most of stop_wait it finds two nodes running the unit at
// once. The overlap needs a rare alignment, rarer still with a renew grid
// (renewals on the grid make it less likely, not impossible), so it
// searches without one.
func TestWorldFindsUnsafeTiming(t *testing.T) {
	tm := worldTimings[2]
	tm.LeaseSpan = tm.Retry + tm.RenewDeadline + time.Second
	for seed := range uint64(400) {
		msg := runWorld(tm, []time.Duration{0}, seed, 20_000)
		if strings.Contains(msg, "runs on both nodes") {
			t.Logf("seed %d: %.300s", seed, msg)
			return
		}
		if msg != "" {
			t.Fatalf("seed %d: %s", seed, msg)
		}
	}
	t.Fatal("no violation found with an unsafe lease span")
}
