package policy

import (
	"fmt"
	"strconv"
	"time"
	"unique"
)

// A world of two nodes, a lease store and each node's unit, on one true
// clock, for the refinement test. Everything that happens is a happening
// on a queue, taken in order of time; every delay and fault is drawn from
// a chooser (rapid in the property test, math/rand elsewhere).

// chooser draws an integer in [lo, hi].
type chooser interface {
	draw(lo, hi int, label string) int
}

type hKind uint8

const (
	hWake    hKind = iota // the node's Wake came (if gen is still current)
	hExec                 // the store executes a request
	hDeliver              // an event reaches the node's machine
	hSpawn                // the unit's process comes alive (if gen is current)
	hDeath                // the unit's process dies (if gen is current)
	hUnit                 // a unit job's result reaches the machine (if gen is current)
	hFault                // the next fault
)

type happening struct {
	at   time.Duration
	seq  uint64
	kind hKind
	node int
	gen  uint64
	req  *request
	ev   Event
}

// fate is what becomes of a store request.
type fate uint8

const (
	fateOK          fate = iota // executes within reply_max, the reply arrives within reply_max
	fateLostReply               // executes; the reply is lost: a failure at reply_max
	fateLostRequest             // never executes: a failure at reply_max
	fateLateExec                // a failure at reply_max, then executes after all
)

type request struct {
	node    int
	act     Action
	sentAt  time.Duration
	fate    fate
	replyAt time.Duration
}

type store struct {
	rec       Record
	downUntil time.Duration
	writes    uint64
}

type simNode struct {
	id        int
	name      string
	m         Machine
	ppm       int64   // the clock's rate error
	offset    Instant // the clock's origin
	wakeAt    Instant
	wakeGen   uint64
	alive     bool // the unit's process
	signalled bool // a stop was sent to the living process
	unitGen   uint64
	starting  bool // a start job's result is outstanding
	stopping  bool // a stop job's result is outstanding
	cutUntil  time.Duration
}

// world is the simulation. fail is called on any broken promise and must
// not return.
type world struct {
	tm    Timing
	c     chooser
	fail  func(format string, args ...any)
	now   time.Duration
	seq   uint64
	queue []happening
	nodes [2]*simNode
	st    store
	quiet bool // no more faults from here on
	dense bool // faults come three times as often, and cuts last longer
	steps int
	trace []string // the last steps, for a failure report
	spec  specMap
}

const (
	maxLag     = 200 * time.Millisecond // how late a node acts on its Wake
	maxStart   = 3 * time.Second
	faultEvery = 40 * time.Second // mean gap between faults, at the default timing (dense: a third)
)

// renewGrids are the renew grids a world's nodes draw from: none, a tenth
// and a quarter of retry, and retry itself.
func renewGrids(tm Timing) []time.Duration {
	return []time.Duration{0, tm.Retry / 10, tm.Retry / 4, tm.Retry}
}

func newWorld(tm Timing, grids []time.Duration, c chooser, fail func(string, ...any)) *world {
	w := &world{tm: tm, c: c, fail: fail}
	w.dense = c.draw(0, 1, "dense_faults") == 1
	w.spec = newSpecMap(w)
	for i, name := range []string{"a", "b"} {
		safe := tm
		safe.LeaseSpan = 0
		grid := grids[c.draw(0, len(grids)-1, "renew_grid")]
		m, err := New(Config{Timing: safe, Seed: uint64(c.draw(0, 1<<30, "seed")), RenewGrid: grid, Node: name})
		if err != nil {
			fail("New: %v", err)
		}
		m.t = unique.Make(tm) // the lease span as given, even an unsafe one (see TestWorldFindsUnsafeTiming)
		w.nodes[i] = &simNode{
			id: i, name: name, m: m,
			ppm:    int64(c.draw(-DriftPPM, DriftPPM, "ppm")),
			offset: Instant(c.draw(0, 1000, "offset_s")) * Instant(time.Second),
		}
		w.stepNode(w.nodes[i], Event{Kind: Tick})
	}
	w.scheduleFault()
	return w
}

// local is the node's clock at true time t.
func (n *simNode) local(t time.Duration) Instant {
	return n.offset + Instant(t) + Instant(int64(t)*n.ppm/1_000_000)
}

// trueAt is the earliest true time at which the node's clock reads at least i.
func (n *simNode) trueAt(i Instant) time.Duration {
	d := float64(i-n.offset) * 1e6 / float64(1_000_000+n.ppm)
	t := time.Duration(d) - 2
	for n.local(t) < i {
		t++
	}
	return t
}

func (w *world) push(h happening) {
	w.seq++
	h.seq = w.seq
	w.queue = append(w.queue, h)
}

func (w *world) pop() happening {
	best := 0
	for i, h := range w.queue {
		if h.at < w.queue[best].at || h.at == w.queue[best].at && h.seq < w.queue[best].seq {
			best = i
		}
	}
	h := w.queue[best]
	w.queue[best] = w.queue[len(w.queue)-1]
	w.queue = w.queue[:len(w.queue)-1]
	return h
}

func (w *world) ms(lo, hi time.Duration, label string) time.Duration {
	return time.Duration(w.c.draw(int(lo/time.Millisecond), int(hi/time.Millisecond), label)) * time.Millisecond
}

func (w *world) percent(label string) int { return w.c.draw(0, 99, label) }

// run takes happenings until steps have been taken with faults, then
// runs quietly for long enough that the lease must have settled.
func (w *world) run(steps int) {
	for w.steps < steps {
		w.next()
	}
	w.quiet = true
	for _, n := range w.nodes { // the operators' say ends: both compete, neither defers
		// After whatever the last fault queued for now.
		w.push(happening{at: w.now + time.Millisecond, kind: hDeliver, node: n.id, ev: Event{Kind: Compete}})
		w.push(happening{at: w.now + time.Millisecond, kind: hDeliver, node: n.id, ev: Event{Kind: Defer}})
	}
	end := w.now + w.settle()
	for w.now < end {
		w.next()
	}
	w.checkSettled()
}

// settle bounds how long, without faults, until one node runs the unit: a
// stop retried and finished, a backoff, a missing key aged and confirmed,
// the start; twice over for a lost race.
func (w *world) settle() time.Duration {
	t := w.tm
	once := t.StopWait*2 + t.backoff() + t.LeaseSpan + t.PollMax + t.confirmWait() + t.Retry + t.RenewDeadline + maxStart + 4*t.ReplyMax
	return 2*once + 2*t.LeaseSpan
}

func (w *world) next() {
	h := w.pop()
	if h.at > w.now {
		w.spec.tick(h.at)
		w.now = h.at
	}
	if w.take(h) {
		w.steps++
		w.checkExclusion()
	}
}

// take carries out one happening; it reports false for one that no
// longer applies (a superseded timer or unit job).
func (w *world) take(h happening) bool {
	n := w.nodes[h.node]
	switch h.kind {
	case hWake:
		if h.gen != n.wakeGen {
			return false
		}
		w.stepNode(n, Event{Kind: Tick})
	case hExec:
		w.exec(h.req)
	case hDeliver:
		w.stepNode(n, h.ev)
	case hSpawn, hDeath, hUnit:
		if h.gen != n.unitGen {
			return false
		}
		return w.unitHappening(n, h)
	case hFault:
		w.fault()
	}
	return true
}

func (w *world) stepNode(n *simNode, e Event) {
	now := n.local(w.now)
	before := n.m
	m, out := n.m.Step(now, e)
	n.m = m
	w.note("%s %v: %v -> %v %v", n.name, e, before.state, m.state, actionKinds(&out))
	if out.Wake <= now {
		w.fail("%s: wake %v is not after now %v", n.name, out.Wake, now)
	}
	w.spec.machineStep(n, before, e, &out)
	for a := range out.Actions() {
		w.execute(n, a)
	}
	w.scheduleWake(n, out.Wake)
}

func actionKinds(o *Output) []ActionKind {
	var ks []ActionKind
	for a := range o.Actions() {
		ks = append(ks, a.Kind)
	}
	return ks
}

func (w *world) scheduleWake(n *simNode, wake Instant) {
	if wake == n.wakeAt {
		return
	}
	n.wakeAt = wake
	n.wakeGen++
	if wake != Never {
		at := max(n.trueAt(wake), w.now) + w.ms(0, maxLag, "lag")
		w.push(happening{at: at, kind: hWake, node: n.id, gen: n.wakeGen})
	}
}

func (w *world) execute(n *simNode, a Action) {
	switch a.Kind {
	case StartUnit:
		w.startUnit(n)
	case StopUnit:
		w.stopUnit(n)
	default:
		w.send(n, a)
	}
}

// send schedules a store request's execution and its answer.
func (w *world) send(n *simNode, a Action) {
	r := &request{node: n.id, act: a, sentAt: w.now, fate: w.drawFate()}
	rm := w.tm.ReplyMax
	exec := w.ms(0, rm, "exec_delay")
	timeout := w.now + rm
	switch r.fate {
	case fateOK:
		r.replyAt = w.now + exec + w.ms(0, rm-exec, "reply_delay")
		w.push(happening{at: w.now + exec, kind: hExec, req: r})
	case fateLostReply:
		w.push(happening{at: w.now + exec, kind: hExec, req: r})
	case fateLateExec:
		w.push(happening{at: timeout + exec + 1, kind: hExec, req: r})
	}
	if r.fate != fateOK {
		w.push(happening{at: timeout, kind: hDeliver, node: n.id, ev: failure(a.Kind)})
	}
}

func (w *world) drawFate() fate {
	if w.quiet {
		return fateOK
	}
	switch p := w.percent("fate"); {
	case p < 88:
		return fateOK
	case p < 94:
		return fateLostReply
	case p < 97:
		return fateLostRequest
	}
	return fateLateExec
}

func failure(k ActionKind) Event {
	switch k {
	case Observe:
		return Event{Kind: ObserveFailed}
	case Acquire:
		return Event{Kind: AcquireUnknown}
	case Renew:
		return Event{Kind: RenewFailed}
	}
	return Event{Kind: ReleaseFailed}
}

// exec applies a request to the store, and answers it if its fate allows.
func (w *world) exec(r *request) {
	n := w.nodes[r.node]
	before := w.st.rec
	reply := failure(r.act.Kind)
	if w.now >= w.st.downUntil && w.now >= n.cutUntil {
		reply = w.st.apply(n.name, r.act)
	}
	w.note("store %s %v: %v -> %v (%v)", n.name, r.act, before, w.st.rec, reply)
	w.spec.storeStep(r, before, reply)
	if r.fate == fateOK {
		w.push(happening{at: r.replyAt, kind: hDeliver, node: r.node, ev: reply})
	}
}

// apply is the store's side of each request: compare-and-set on exactly
// the bytes given, or on the holder, token and version.
func (st *store) apply(node string, a Action) Event {
	switch a.Kind {
	case Observe:
		return Event{Kind: Observed, Record: st.rec}
	case Acquire:
		if !st.rec.Same(a.Record) {
			return Event{Kind: AcquireLost}
		}
		return Event{Kind: AcquireOK, Record: st.write(node, "t"+strconv.FormatUint(st.writes, 10), a.Record.Version+1, false)}
	case Renew:
		switch {
		case !st.rec.Present:
			return Event{Kind: RenewMissing}
		case !st.owned(a.Record):
			return Event{Kind: RenewLost, Record: st.rec}
		}
		rec := st.write(node, a.Record.Token, a.Record.Version+1, false)
		if a.Record.StopFailed {
			st.rec.StopFailed, st.rec.Raw = true, st.rec.Raw+"/stop_failed"
			rec = st.rec
		}
		return Event{Kind: RenewOK, Record: rec}
	case Release:
		if !st.owned(a.Record) {
			return Event{Kind: ReleaseLost, Record: st.rec}
		}
		st.write(node, a.Record.Token, a.Record.Version+1, true)
		if a.Record.Next != "" {
			st.rec.Next, st.rec.Raw = a.Record.Next, st.rec.Raw+"/to/"+a.Record.Next
		}
		return Event{Kind: ReleaseOK}
	}
	panic(fmt.Sprint("store: ", a))
}

func (st *store) owned(r Record) bool {
	c := st.rec
	return c.Present && !c.Released && c.Holder == r.Holder && c.Token == r.Token && c.Version == r.Version
}

func (st *store) write(holder, token string, version uint64, released bool) Record {
	st.writes++
	raw := holder + "/" + token + "/" + strconv.FormatUint(version, 10)
	if released {
		raw += "/released"
	}
	st.rec = Record{Present: true, Raw: raw, Holder: holder, Token: token, Version: version, Released: released}
	return st.rec
}

func (w *world) startUnit(n *simNode) {
	n.unitGen++
	n.starting = true
	d := w.ms(0, maxStart, "start_delay")
	if !w.quiet && w.percent("start_fails") >= 96 {
		w.push(happening{at: w.now + d, kind: hUnit, node: n.id, gen: n.unitGen, ev: Event{Kind: UnitStartFailed}})
		return
	}
	w.push(happening{at: w.now + d, kind: hSpawn, node: n.id, gen: n.unitGen})
	w.push(happening{at: w.now + d + w.ms(0, maxLag, "started_delay"), kind: hUnit, node: n.id, gen: n.unitGen, ev: Event{Kind: UnitStarted}})
}

// stopUnit replaces any start job (its result, canceled, comes first),
// kills the process within stop_wait, and reports. Now and then the report
// is a failure although the process died: the policy must then neither
// release nor forget that it may hold the lease.
func (w *world) stopUnit(n *simNode) {
	if n.starting {
		n.starting = false
		w.push(happening{at: w.now, kind: hDeliver, node: n.id, ev: Event{Kind: UnitStartFailed}})
	}
	n.unitGen++
	n.stopping = true
	n.signalled = n.alive
	k := w.ms(0, w.tm.StopWait, "stop_delay")
	w.push(happening{at: w.now + k, kind: hDeath, node: n.id, gen: n.unitGen})
	result := Event{Kind: UnitStopped, Killed: k > w.tm.StopWait*3/4}
	at := w.now + k + w.ms(0, maxLag, "stopped_delay")
	if !w.quiet && w.percent("stop_fails") >= 96 {
		result, at = Event{Kind: UnitStopFailed}, w.now+w.tm.StopWait+1
	}
	w.push(happening{at: at, kind: hUnit, node: n.id, gen: n.unitGen, ev: result})
}

func (w *world) unitHappening(n *simNode, h happening) bool {
	switch h.kind {
	case hSpawn:
		w.spec.spawn(n)
		n.alive = true
		w.note("%s spawns", n.name)
	case hDeath:
		if !n.alive {
			return false
		}
		w.spec.reap(n, "stop")
		n.alive, n.signalled = false, false
		w.note("%s dies", n.name)
	case hUnit:
		n.starting = n.starting && h.ev.Kind != UnitStarted && h.ev.Kind != UnitStartFailed
		n.stopping = n.stopping && h.ev.Kind != UnitStopped && h.ev.Kind != UnitStopFailed
		w.stepNode(n, h.ev)
	}
	return true
}

// faultScale is the lease span whose faults come every faultEvery on
// average (the default timing's before it had an allowance for a late
// daemon); others scale with it.
const faultScale = 36072 * time.Millisecond

// Faults: a Redis restart that drops the key (and is down a while), a node
// cut off from the store, the unit failing, a handoff.
func (w *world) scheduleFault() {
	if w.quiet {
		return
	}
	scale := float64(w.tm.LeaseSpan) / float64(faultScale)
	if w.dense {
		scale /= 3
	}
	gap := w.ms(0, time.Duration(2*scale*float64(faultEvery)), "fault_gap")
	w.push(happening{at: w.now + gap, kind: hFault})
}

// cutMax: long enough to pass a leader's deadline; dense, to also hide a
// whole confirmed record from a standby.
func (w *world) cutMax() time.Duration {
	if w.dense {
		return 3 * (w.tm.Retry + w.tm.RenewDeadline)
	}
	return 2 * (w.tm.Retry + w.tm.RenewDeadline)
}

func (w *world) fault() {
	defer w.scheduleFault()
	if w.quiet {
		return
	}
	n := w.nodes[w.c.draw(0, 1, "fault_node")]
	kind := w.c.draw(0, 3, "fault")
	if kind == 3 { // an operator's word: a handoff, mostly
		kind += max(0, w.c.draw(-4, 2, "operator"))
	}
	switch kind {
	case 0:
		w.spec.drop()
		w.st.rec = Absent
		w.st.downUntil = w.now + w.ms(0, 3*w.tm.ReplyMax, "down")
		w.note("store restarts, key dropped")
	case 1:
		n.cutUntil = w.now + w.ms(0, w.cutMax(), "cut")
		w.spec.stutter("cut")
		w.note("%s cut off until %v", n.name, n.cutUntil)
	case 2:
		w.crash(n)
	case 3:
		w.spec.stutter("handoff requested")
		to := []string{"", "a", "b", "z"}[w.c.draw(0, 3, "handoff_to")]
		w.push(happening{at: w.now, kind: hDeliver, node: n.id, ev: Event{Kind: HandoffRequested, To: to}})
	case 4: // drained, or a failure threshold reached, for a while
		w.spec.stutter("withdraw")
		back := w.now + w.ms(0, 2*w.tm.LeaseSpan, "withdrawn")
		w.push(happening{at: w.now, kind: hDeliver, node: n.id, ev: Event{Kind: Withdraw}})
		w.push(happening{at: back, kind: hDeliver, node: n.id, ev: Event{Kind: Compete}})
	case 5: // a more preferred node is ready, for a while
		w.spec.stutter("defer")
		d := w.ms(0, 3*w.tm.LeaseSpan, "defer")
		back := w.now + w.ms(0, 2*w.tm.LeaseSpan, "deferring")
		w.push(happening{at: w.now, kind: hDeliver, node: n.id, ev: Event{Kind: Defer, Delay: d}})
		w.push(happening{at: back, kind: hDeliver, node: n.id, ev: Event{Kind: Defer}})
	}
}

// crash: the unit dies on its own while it runs and no stop is under way.
func (w *world) crash(n *simNode) {
	if !n.alive || n.stopping {
		w.spec.stutter("crash of nothing")
		return
	}
	w.spec.reap(n, "crash")
	n.alive = false
	n.unitGen++
	e := Event{Kind: UnitFailed}
	if n.starting {
		n.starting, e = false, Event{Kind: UnitStartFailed}
	}
	w.note("%s unit crashes", n.name)
	w.push(happening{at: w.now + w.ms(0, maxLag, "failed_delay"), kind: hDeliver, node: n.id, ev: e})
}

func (w *world) checkExclusion() {
	if w.nodes[0].alive && w.nodes[1].alive {
		w.fail("at %v: the unit runs on both nodes\n%s", w.now, w.lastSteps())
	}
}

// checkSettled: after the quiet period exactly one node runs the unit, as
// leader, and the other does not hold the lease.
func (w *world) checkSettled() {
	a, b := w.nodes[0], w.nodes[1]
	if a.alive == b.alive {
		w.fail("after %v without faults: alive %t and %t (%v, %v; withdrawn %t %t, delay %v %v)\n%s", w.settle(), a.alive, b.alive, a.m.state, b.m.state, a.m.withdrawn, b.m.withdrawn, a.m.delay, b.m.delay, fmt.Sprintf("%+v %v %v %v", a.m.seen, a.m.seenAt, a.m.now, a.m.writerSpan)+w.lastSteps())
	}
	run, other := a, b
	if b.alive {
		run, other = b, a
	}
	if run.m.state != Leader || other.m.holding {
		w.fail("settled with %s %v and %s %v (holding %t)\n%s", run.name, run.m.state, other.name, other.m.state, other.m.holding, w.lastSteps())
	}
}

func (w *world) note(format string, args ...any) {
	const keep = 40
	if len(w.trace) >= 2*keep {
		w.trace = append(w.trace[:0], w.trace[keep:]...)
	}
	w.trace = append(w.trace, fmt.Sprintf("%12v ", w.now.Truncate(time.Millisecond))+fmt.Sprintf(format, args...))
}

func (w *world) lastSteps() string {
	out := ""
	for _, l := range w.trace {
		out += l + "\n"
	}
	return out
}
