package policy

// Review of the named handoff (Record.Next), the Backoff shortcut for a
// release offered by name, and Withdraw/Compete: attempts to break
// ProcessExclusion, or to get a lease stuck, written as tests.
//
// The first part is a randomized world of three nodes (nextWorld), built
// for this review next to world_test.go's two-node world, which has no
// server identity and no rollback: here the store answers with its
// identity (Config.Identified), and restarts bring back any earlier
// record (rules 7 and 8: a crash with everysec, a restart from an older
// snapshot) under a new identity; daemons restart (a fresh machine, its
// unit stopped by BindsTo=); handoffs name any node (or one that does not
// exist), nodes withdraw and compete, defer; requests execute late or lose
// their replies. Every step checks that the unit runs on at most one node;
// after the faults, every node competes and the lease must settle on
// exactly one.
//
// The second part is single-machine scenarios (the drivers of
// machine_test.go and operations_test.go) for the cases named in the
// review brief.

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"
	"unique"
)

type nwKind uint8

const (
	nwWake nwKind = iota
	nwExec
	nwDeliver
	nwSpawn
	nwDeath
	nwUnit
	nwFault
	nwBoot // a restarted daemon's first step
)

type nwHap struct {
	at   time.Duration
	seq  uint64
	kind nwKind
	node int
	gen  uint64 // wake or unit generation
	dgen uint64 // the daemon incarnation a reply is for (0: whichever runs)
	req  *nwReq
	ev   Event
}

type nwReq struct {
	node    int
	dgen    uint64
	act     Action
	fate    fate
	replyAt time.Duration
}

type nwNode struct {
	id        int
	name      string
	m         Machine
	up        bool // a daemon runs
	dgen      uint64
	ppm       int64
	offset    Instant
	wakeAt    Instant
	wakeGen   uint64
	alive     bool
	unitGen   uint64
	starting  bool
	stopping  bool
	cutUntil  time.Duration
	withdrawn bool // the drain's mark: survives a restart
}

type nextWorld struct {
	tm        Timing
	r         *rand.Rand
	fail      func(string, ...any)
	now       time.Duration
	seq       uint64
	queue     []nwHap
	nodes     []*nwNode
	rec       Record
	server    int
	history   []Record
	writes    uint64
	downUntil time.Duration
	quiet     bool
	steps     int
	trace     []string
	counts    map[string]int
	rollbacks bool
}

func newNextWorld(tm Timing, seed uint64, rollbacks bool, fail func(string, ...any)) *nextWorld {
	w := &nextWorld{tm: tm, r: rand.New(rand.NewPCG(seed, 7)), fail: fail, counts: map[string]int{}, rollbacks: rollbacks}
	for i, name := range []string{"a", "b", "c"} {
		n := &nwNode{id: i, name: name,
			ppm:    int64(w.r.IntN(2*DriftPPM+1) - DriftPPM),
			offset: Instant(w.r.IntN(1000)) * Instant(time.Second)}
		w.nodes = append(w.nodes, n)
		w.boot(n)
	}
	w.scheduleFault()
	return w
}

func (w *nextWorld) ms(lo, hi time.Duration) time.Duration {
	l, h := int(lo/time.Millisecond), int(hi/time.Millisecond)
	return time.Duration(l+w.r.IntN(h-l+1)) * time.Millisecond
}

func (w *nextWorld) srv() string { return "srv" + strconv.Itoa(w.server) }

func (n *nwNode) local(t time.Duration) Instant {
	return n.offset + Instant(t) + Instant(int64(t)*n.ppm/1_000_000)
}

func (n *nwNode) trueAt(i Instant) time.Duration {
	d := float64(i-n.offset) * 1e6 / float64(1_000_000+n.ppm)
	t := time.Duration(d) - 2
	for n.local(t) < i {
		t++
	}
	return t
}

func (w *nextWorld) push(h nwHap) {
	w.seq++
	h.seq = w.seq
	w.queue = append(w.queue, h)
}

func (w *nextWorld) pop() nwHap {
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

// boot starts a fresh daemon on n (its machine begins in Stopping).
func (w *nextWorld) boot(n *nwNode) {
	safe := w.tm
	safe.LeaseSpan = 0
	m, err := New(Config{Timing: safe, Seed: w.r.Uint64(), Node: n.name, Identified: true, Withdrawn: n.withdrawn,
		RenewGrid: []time.Duration{0, w.tm.Retry / 10, w.tm.Retry}[w.r.IntN(3)]})
	if err != nil {
		w.fail("New: %v", err)
	}
	m.t = unique.Make(w.tm)
	n.m, n.up = m, true
	n.dgen++
	n.wakeAt = Never
	n.wakeGen++
	w.step(n, Event{Kind: Tick})
}

func (w *nextWorld) run(steps int) {
	for w.steps < steps {
		w.next()
	}
	w.quiet = true
	for _, n := range w.nodes {
		n.withdrawn = false
		w.push(nwHap{at: w.now + time.Millisecond, kind: nwDeliver, node: n.id, ev: Event{Kind: Compete}})
		w.push(nwHap{at: w.now + time.Millisecond, kind: nwDeliver, node: n.id, ev: Event{Kind: Defer}})
	}
	t := w.tm
	once := t.StopWait*2 + t.backoff() + t.LeaseSpan + t.PollMax + t.confirmWait() + t.Retry + t.RenewDeadline + maxStart + 4*t.ReplyMax + 3*w.tm.ReplyMax
	end := w.now + 3*once + 2*t.LeaseSpan
	for w.now < end {
		w.next()
	}
	if w.rec.StopFailed {
		held := false
		for _, n := range w.nodes {
			held = held || n.up && n.m.holding
		}
		if !held {
			// A daemon whose stop had failed restarted: its record stays
			// stop_failed until an operator clears it (or the key's TTL of
			// a day): by design (rule 10), not a stuck lease.
			w.counts["left stop_failed by a restart"]++
			return
		}
	}
	alive := 0
	for _, n := range w.nodes {
		if n.alive {
			alive++
			if n.m.state != Leader {
				w.fail("settled: %s runs the unit as %v\n%s", n.name, n.m.state, w.last())
			}
		}
	}
	if alive != 1 {
		w.fail("after the quiet period %d nodes run the unit (record %v; states %v %v %v; seen %v/%v/%v)\n%s", alive, w.rec,
			w.nodes[0].m.state, w.nodes[1].m.state, w.nodes[2].m.state, w.nodes[0].m.seen, w.nodes[1].m.seen, w.nodes[2].m.seen, w.last())
	}
}

func (w *nextWorld) next() {
	h := w.pop()
	w.now = max(w.now, h.at)
	if w.take(h) {
		w.steps++
		alive := ""
		for _, n := range w.nodes {
			if n.alive {
				alive += n.name
			}
		}
		if len(alive) > 1 {
			w.fail("at %v: the unit runs on %s at once\n%s", w.now, alive, w.last())
		}
	}
}

func (w *nextWorld) take(h nwHap) bool {
	n := w.nodes[h.node]
	switch h.kind {
	case nwWake:
		if h.gen != n.wakeGen || !n.up {
			return false
		}
		w.step(n, Event{Kind: Tick})
	case nwExec:
		w.exec(h.req)
	case nwDeliver:
		if !n.up || h.dgen != 0 && h.dgen != n.dgen {
			return false
		}
		w.step(n, h.ev)
	case nwSpawn, nwDeath, nwUnit:
		if h.gen != n.unitGen {
			return false
		}
		switch h.kind {
		case nwSpawn:
			n.alive = true
			w.note("%s spawns", n.name)
		case nwDeath:
			if !n.alive {
				return false
			}
			n.alive = false
			w.note("%s dies", n.name)
		case nwUnit:
			n.starting = n.starting && h.ev.Kind != UnitStarted && h.ev.Kind != UnitStartFailed
			n.stopping = n.stopping && h.ev.Kind != UnitStopped && h.ev.Kind != UnitStopFailed
			if !n.up {
				return false
			}
			w.step(n, h.ev)
		}
	case nwFault:
		w.fault()
	case nwBoot:
		if n.up {
			return false
		}
		w.boot(n)
	}
	return true
}

func (w *nextWorld) step(n *nwNode, e Event) {
	now := n.local(w.now)
	before := n.m.state
	m, out := n.m.Step(now, e)
	n.m = m
	w.note("%s %v: %v -> %v %v", n.name, e, before, m.state, actionKinds(&out))
	if out.Journal != "" {
		w.counts[string(out.Journal)]++
	}
	if before == Backoff && m.state == Acquiring {
		w.counts["acquire from backoff"]++
	}
	for a := range out.Actions() {
		switch a.Kind {
		case StartUnit:
			w.startUnit(n)
		case StopUnit:
			w.stopUnit(n)
		default:
			w.send(n, a)
		}
	}
	if out.Wake != n.wakeAt {
		n.wakeAt = out.Wake
		n.wakeGen++
		if out.Wake != Never {
			w.push(nwHap{at: max(n.trueAt(out.Wake), w.now) + w.ms(0, maxLag), kind: nwWake, node: n.id, gen: n.wakeGen})
		}
	}
}

func (w *nextWorld) send(n *nwNode, a Action) {
	r := &nwReq{node: n.id, dgen: n.dgen, act: a, fate: fateOK}
	if !w.quiet {
		switch p := w.r.IntN(100); {
		case p < 88:
		case p < 94:
			r.fate = fateLostReply
		case p < 97:
			r.fate = fateLostRequest
		default:
			r.fate = fateLateExec
		}
	}
	rm := w.tm.ReplyMax
	exec := w.ms(0, rm)
	switch r.fate {
	case fateOK:
		r.replyAt = w.now + exec + w.ms(0, rm-exec)
		w.push(nwHap{at: w.now + exec, kind: nwExec, req: r})
	case fateLostReply:
		w.push(nwHap{at: w.now + exec, kind: nwExec, req: r})
	case fateLateExec:
		w.push(nwHap{at: w.now + rm + exec + 1, kind: nwExec, req: r})
	}
	if r.fate != fateOK {
		w.push(nwHap{at: w.now + rm, kind: nwDeliver, node: n.id, dgen: n.dgen, ev: failure(a.Kind)})
	}
}

func (w *nextWorld) exec(r *nwReq) {
	n := w.nodes[r.node]
	reply := failure(r.act.Kind)
	before := w.rec
	if w.now >= w.downUntil && w.now >= n.cutUntil {
		reply = w.apply(n.name, r.act)
	}
	w.note("store(%s) %s %v: %v -> %v (%v)", w.srv(), n.name, r.act, before, w.rec, reply)
	if r.fate == fateOK {
		w.push(nwHap{at: r.replyAt, kind: nwDeliver, node: r.node, dgen: r.dgen, ev: reply})
	}
}

// write stores a record (the scripts' raw bytes are unique per write).
func (w *nextWorld) write(holder, token string, version uint64, released, stopFailed bool, next string) Record {
	w.writes++
	raw := holder + "/" + token + "/" + strconv.FormatUint(version, 10) + "/w" + strconv.FormatUint(w.writes, 10)
	switch {
	case released:
		raw += "/released"
	case stopFailed:
		raw += "/stop_failed"
	}
	if next != "" {
		raw += "/to/" + next
	}
	w.rec = Record{Present: true, Raw: raw, Holder: holder, Token: token, Version: version, Released: released, StopFailed: stopFailed, Next: next}
	w.history = append(w.history, w.rec)
	return w.answer(w.rec)
}

func (w *nextWorld) answer(r Record) Record {
	r.Server = w.srv()
	return r
}

// apply: the scripts' semantics (acquireScript, ownedLua, renewScript,
// releaseScript): compare-and-set on the bytes, never over stop_failed,
// the acquisition's version above the server's clock in ms; renewals and
// releases over the caller's own record at its version or an earlier one.
func (w *nextWorld) apply(node string, a Action) Event {
	cur := w.rec
	owned := func() (Event, bool) {
		switch {
		case !cur.Present:
			return Event{Kind: RenewMissing}, false
		case cur.Released || cur.Holder != a.Record.Holder || cur.Token != a.Record.Token || cur.Version > a.Record.Version:
			return Event{Kind: RenewLost, Record: w.answer(cur)}, false
		}
		return Event{}, true
	}
	switch a.Kind {
	case Observe:
		return Event{Kind: Observed, Record: w.answer(cur)}
	case Acquire:
		if !cur.Same(a.Record) || cur.StopFailed {
			return Event{Kind: AcquireLost}
		}
		v := max(cur.Version, uint64(w.now/time.Millisecond)) + 1
		return Event{Kind: AcquireOK, Record: w.write(node, "t"+strconv.FormatUint(w.writes, 10), v, false, false, "")}
	case Renew:
		if e, ok := owned(); !ok {
			return e
		}
		return Event{Kind: RenewOK, Record: w.write(node, a.Record.Token, a.Record.Version+1, false, a.Record.StopFailed, "")}
	case Release:
		if _, ok := owned(); !ok {
			return Event{Kind: ReleaseLost}
		}
		w.write(node, a.Record.Token, a.Record.Version+1, true, false, a.Record.Next)
		return Event{Kind: ReleaseOK}
	}
	panic(fmt.Sprint("store: ", a))
}

func (w *nextWorld) startUnit(n *nwNode) {
	n.unitGen++
	n.starting = true
	d := w.ms(0, maxStart)
	if !w.quiet && w.r.IntN(100) >= 96 {
		w.push(nwHap{at: w.now + d, kind: nwUnit, node: n.id, gen: n.unitGen, ev: Event{Kind: UnitStartFailed}})
		return
	}
	w.push(nwHap{at: w.now + d, kind: nwSpawn, node: n.id, gen: n.unitGen})
	w.push(nwHap{at: w.now + d + w.ms(0, maxLag), kind: nwUnit, node: n.id, gen: n.unitGen, ev: Event{Kind: UnitStarted}})
}

func (w *nextWorld) stopUnit(n *nwNode) {
	if n.starting {
		n.starting = false
		w.push(nwHap{at: w.now, kind: nwDeliver, node: n.id, dgen: n.dgen, ev: Event{Kind: UnitStartFailed}})
	}
	n.unitGen++
	n.stopping = true
	k := w.ms(0, w.tm.StopWait)
	w.push(nwHap{at: w.now + k, kind: nwDeath, node: n.id, gen: n.unitGen})
	result := Event{Kind: UnitStopped, Killed: k > w.tm.StopWait*3/4}
	at := w.now + k + w.ms(0, maxLag)
	if !w.quiet && w.r.IntN(100) >= 96 {
		result, at = Event{Kind: UnitStopFailed}, w.now+w.tm.StopWait+1
	}
	w.push(nwHap{at: at, kind: nwUnit, node: n.id, gen: n.unitGen, ev: result})
}

func (w *nextWorld) scheduleFault() {
	if w.quiet {
		return
	}
	gap := w.ms(0, 2*w.tm.LeaseSpan/3)
	w.push(nwHap{at: w.now + gap, kind: nwFault})
}

func (w *nextWorld) fault() {
	defer w.scheduleFault()
	if w.quiet {
		return
	}
	n := w.nodes[w.r.IntN(len(w.nodes))]
	switch k := w.r.IntN(10); k {
	case 0: // Redis restarts from an older state (or empty), under a new identity
		if !w.rollbacks {
			return
		}
		var back []Record
		for _, r := range w.history {
			if !r.StopFailed { // a stop_failed record brought back blocks the lease for its TTL, which this world does not model
				back = append(back, r)
			}
		}
		w.rec = Absent
		if i := w.r.IntN(len(back) + 1); i < len(back) {
			w.rec = back[i]
		}
		w.server++
		w.downUntil = w.now + w.ms(0, 3*w.tm.ReplyMax)
		w.counts["rollback"]++
		w.note("store restarts as %s with %v", w.srv(), w.rec)
	case 1:
		n.cutUntil = w.now + w.ms(0, 2*(w.tm.Retry+w.tm.RenewDeadline))
		w.note("%s cut off until %v", n.name, n.cutUntil)
	case 2: // the unit crashes
		if !n.alive || n.stopping {
			return
		}
		n.alive = false
		n.unitGen++
		e := Event{Kind: UnitFailed}
		if n.starting {
			n.starting, e = false, Event{Kind: UnitStartFailed}
		}
		w.note("%s unit crashes", n.name)
		w.push(nwHap{at: w.now + w.ms(0, maxLag), kind: nwDeliver, node: n.id, dgen: n.dgen, ev: e})
	case 3, 4, 5: // handoff, named mostly
		to := []string{"", "a", "b", "c", "z"}[w.r.IntN(5)]
		w.counts["handoff to "+to]++
		w.push(nwHap{at: w.now, kind: nwDeliver, node: n.id, ev: Event{Kind: HandoffRequested, To: to}})
	case 6: // drain and undrain
		n.withdrawn = true
		w.push(nwHap{at: w.now, kind: nwDeliver, node: n.id, ev: Event{Kind: Withdraw}})
		back := w.now + w.ms(0, 2*w.tm.LeaseSpan)
		w.push(nwHap{at: back, kind: nwDeliver, node: n.id, ev: Event{Kind: Compete}})
	case 7:
		d := w.ms(0, 2*w.tm.LeaseSpan)
		w.push(nwHap{at: w.now, kind: nwDeliver, node: n.id, ev: Event{Kind: Defer, Delay: d}})
		w.push(nwHap{at: w.now + w.ms(0, 2*w.tm.LeaseSpan), kind: nwDeliver, node: n.id, ev: Event{Kind: Defer}})
	case 8: // the daemon dies: BindsTo= stops the unit at once; a new daemon comes up
		if !n.up {
			return
		}
		n.up = false
		n.wakeGen++
		if n.alive {
			n.alive = false
			w.note("%s dies with its daemon", n.name)
		}
		n.unitGen++
		n.starting, n.stopping = false, false
		w.counts["restart"]++
		w.push(nwHap{at: w.now + w.ms(0, 3*w.tm.ReplyMax), kind: nwBoot, node: n.id})
	case 9: // a handoff back to a node that is backing off
		for _, o := range w.nodes {
			if o != n && o.up && o.m.state == Backoff {
				w.counts["handoff to a backing-off node"]++
				w.push(nwHap{at: w.now, kind: nwDeliver, node: n.id, ev: Event{Kind: HandoffRequested, To: o.name}})
				break
			}
		}
	}
}

func (w *nextWorld) note(format string, args ...any) {
	const keep = 60
	if len(w.trace) >= 2*keep {
		w.trace = append(w.trace[:0], w.trace[keep:]...)
	}
	w.trace = append(w.trace, fmt.Sprintf("%12v ", w.now.Truncate(time.Millisecond))+fmt.Sprintf(format, args...))
}

func (w *nextWorld) last() string {
	out := ""
	for _, l := range w.trace {
		out += l + "\n"
	}
	return out
}

func runNextWorld(tm Timing, seed uint64, steps int, rollbacks bool) (msg string, counts map[string]int) {
	defer func() {
		if r := recover(); r != nil {
			v, ok := r.(errViolation)
			if !ok {
				panic(r)
			}
			msg = v.msg
		}
	}()
	w := newNextWorld(tm, seed, rollbacks, func(format string, args ...any) { panic(errViolation{fmt.Sprintf(format, args...)}) })
	counts = w.counts
	w.run(steps)
	return "", w.counts
}

// TestBreakNextWorld: three nodes, named handoffs (to backing-off nodes
// too), withdrawals, deferrals, daemon restarts and store rollbacks under
// a new identity: the unit never runs twice, and the lease settles.
func TestBreakNextWorld(t *testing.T) {
	seeds := 150
	if testing.Short() {
		seeds = 30
	}
	total := map[string]int{}
	for _, rollbacks := range []bool{false, true} {
		for seed := range uint64(seeds) {
			tm := worldTimings[int(seed)%len(worldTimings)]
			tm.LeaseSpan = tm.SafeMinimum() + time.Duration(seed%7)*300*time.Millisecond
			msg, counts := runNextWorld(tm, seed, 3000, rollbacks)
			if msg != "" {
				t.Fatalf("rollbacks %v, seed %d: %s", rollbacks, seed, msg)
			}
			for k, v := range counts {
				total[k] += v
			}
		}
	}
	t.Logf("%v", total)
	for _, k := range []string{"acquire from backoff", "rollback", "restart", "handoff to a backing-off node", string(JournalStopFailed)} {
		if total[k] == 0 {
			t.Errorf("no run saw %q", k)
		}
	}
}

// TestBreakNextWorldHasTeeth: with a lease span that leaves out most of
// stop_wait, the three-node world finds two nodes running the unit.
func TestBreakNextWorldHasTeeth(t *testing.T) {
	tm := worldTimings[2]
	tm.LeaseSpan = tm.Retry + tm.RenewDeadline + time.Second
	// Seed 120 finds it (about 8 s to search from 0 without rollbacks).
	for seed := uint64(115); seed < 400; seed++ {
		msg, _ := runNextWorld(tm, seed, 30000, false)
		if msg != "" {
			if !strings.Contains(msg, "the unit runs on") {
				t.Fatalf("seed %d: %.2000s", seed, msg)
			}
			t.Logf("seed %d: %.200s", seed, msg)
			return
		}
	}
	t.Fatal("no violation found with an unsafe lease span")
}

// Single-machine scenarios.

// backingOff is node "a" (Identified) in Backoff right after its own
// handoff to "b" under server S1, its own release's reply in: the first
// observation of the backoff is out.
func backingOff(t *testing.T) *driver {
	t.Helper()
	m, err := New(Config{Timing: DefaultTiming(), Seed: 1, Node: "a", Identified: true})
	if err != nil {
		t.Fatal(err)
	}
	d := &driver{t: t, m: m}
	d.at(0, ev(Tick)).want(Stopping, StopUnit)
	d.at(0, ev(UnitStopped)).want(Standby, Observe)
	d.at(0, seen(on(held("b", 1), "S1"))).want(Standby)
	d.wake().want(Standby, Observe)
	d.after(0, seen(on(released("b", 2), "S1"))).want(Acquiring, Acquire)
	d.after(s, with(AcquireOK, on(held("a", 3), "S1"))).want(Starting, StartUnit)
	d.after(s, ev(UnitStarted)).want(Leader)
	d.after(s, Event{Kind: HandoffRequested, To: "b"}).want(Stopping, StopUnit)
	d.after(s, ev(UnitStopped)).want(Releasing, Release)
	return d.after(0, ev(ReleaseOK)).want(Backoff, Observe)
}

// The backoff shortcut needs a witnessed release: the first value the
// backing-off node reads (it forgot what it saw when it left) is not
// one, even if it is a release offered to it by name, and neither is a
// release read first under another server (rule 8), nor an older state
// brought back into the same server (a version below one seen).
func TestBreakBackoffShortcutNeedsAWitnessedRelease(t *testing.T) {
	span := DefaultTiming()
	span.LeaseSpan = span.SafeMinimum()
	t.Run("first value after the release", func(t *testing.T) {
		d := backingOff(t)
		d.after(0, seen(on(offered("b", 5, "a"), "S1"))).want(Backoff)
		d.wake().want(Backoff, Observe)
		d.after(0, seen(on(offered("b", 5, "a"), "S1"))).want(Backoff)
	})
	t.Run("another server", func(t *testing.T) {
		d := backingOff(t)
		d.after(0, seen(on(held("b", 4), "S1"))).want(Backoff)
		d.wake().want(Backoff, Observe)
		d.after(0, seen(on(offered("b", 5, "a"), "S2"))).want(Backoff)
		d.wake().want(Backoff, Observe)
		d.after(0, seen(on(offered("b", 5, "a"), "S2"))).want(Backoff)
		// Until the record changes under S2: then a witnessed release.
		d.wake().want(Backoff, Observe)
		d.after(0, seen(on(held("b", 6), "S2"))).want(Backoff)
		d.wake().want(Backoff, Observe)
		d.after(0, seen(on(offered("b", 7, "a"), "S2"))).want(Acquiring, Acquire)
	})
	t.Run("an older state under the same server", func(t *testing.T) {
		// a saw its own tenure at version 3 and its release; a restore
		// into the running server brings back b's tenure at 1, then b's
		// release of it to a (a late release of b's, say): b's record
		// is older than what a saw, so the release is not witnessed.
		d := backingOff(t)
		d.after(0, seen(on(released("a", 4), "S1"))).want(Backoff)
		d.wake().want(Backoff, Observe)
		old := held("b", 1)
		d.after(0, seen(on(old, "S1"))).want(Backoff)
		d.wake().want(Backoff, Observe)
		d.after(0, seen(on(offered("b", 2, "a"), "S1"))).want(Backoff)
	})
	t.Run("withdrawn or ineligible", func(t *testing.T) {
		for _, k := range []EventKind{Withdraw, Ineligible} {
			d := backingOff(t)
			d.after(0, ev(k))
			d.after(0, seen(on(held("b", 4), "S1"))).want(Backoff)
			d.wake().want(Backoff, Observe)
			d.after(0, seen(on(offered("b", 5, "a"), "S1"))).want(Backoff)
		}
	})
}

// A withdrawal that races the acquisition the backoff shortcut sent:
// the acquisition is given back without a start.
func TestBreakWithdrawRacesTheBackoffShortcut(t *testing.T) {
	d := backingOff(t)
	d.after(0, seen(on(held("b", 4), "S1"))).want(Backoff)
	d.wake().want(Backoff, Observe)
	d.after(0, seen(on(offered("b", 5, "a"), "S1"))).want(Acquiring, Acquire)
	d.after(0, ev(Withdraw)).want(Acquiring)
	d.after(s, with(AcquireOK, on(held("a", 6), "S1")))
	if d.has(StartUnit) || d.m.State() != Stopping {
		t.Fatalf("a withdrawn node's acquisition: %v %v, want it given back without a start", d.m.State(), actionKinds(&d.out))
	}
}

// A restarted daemon on the named node (its first value is a release
// offered to it, from a store that tells its identity, as redislease's
// does) ages it for the lease span, like any unwitnessed value.
func TestBreakRestartedNamedNodeAgesTheOffer(t *testing.T) {
	m, err := New(Config{Timing: DefaultTiming(), Seed: 1, Node: "a", Identified: true})
	if err != nil {
		t.Fatal(err)
	}
	d := &driver{t: t, m: m}
	d.at(0, ev(Tick)).want(Stopping, StopUnit)
	d.at(0, ev(UnitStopped)).want(Standby, Observe)
	offer := on(offered("b", 5, "a"), "S1")
	d.after(0, seen(offer)).want(Standby)
	start := d.now
	for d.m.State() == Standby {
		d.wake().after(0, seen(offer))
	}
	if waited := d.now.Sub(start); waited < d.m.Timing().LeaseSpan {
		t.Fatalf("acquired %v after the first reading, before the lease span %v", waited, d.m.Timing().LeaseSpan)
	}
}

// A handoff to a node requested while the stop failed: nothing is
// released (the record stays stop_failed, renewed) until a stop
// succeeds; then the release names the node.
func TestBreakHandoffToDuringStopFailed(t *testing.T) {
	d := leader(t, DefaultTiming())
	d.after(s, ev(UnitFailed)).want(Stopping, StopUnit)
	d.after(s, ev(UnitStopFailed)).want(StopFailed, Renew)
	if !d.action(0).Record.StopFailed {
		t.Fatalf("renewal after a failed stop does not say stop_failed: %v", d.action(0).Record)
	}
	d.after(0, with(RenewOK, held("a", 3)))
	d.after(s, Event{Kind: HandoffRequested, To: "b"})
	if d.has(Release) {
		t.Fatal("released on a handoff while the stop failed")
	}
	for d.m.State() == StopFailed {
		d.wake()
		if d.has(Release) {
			t.Fatal("released while stop_failed")
		}
		stop := d.has(StopUnit)
		for a := range d.out.Actions() {
			if a.Kind == Renew {
				d.after(0, with(RenewOK, held("a", a.Record.Version+1)))
				break
			}
		}
		if stop {
			break
		}
	}
	d.after(s, ev(UnitStopped)).want(Releasing, Release)
	if got := d.action(0).Record.Next; got != "b" {
		t.Fatalf("release after the stop finally succeeded names %q, want b", got)
	}
}
