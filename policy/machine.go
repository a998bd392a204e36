package policy

import (
	"fmt"
	"time"
	"unique"
)

// Config configures a Machine.
type Config struct {
	Timing Timing // validated by New; a zero LeaseSpan is derived
	Seed   uint64 // seeds the poll jitter; the daemon passes a random value

	// RenewGrid, if not zero, brings each renewal forward to the latest
	// multiple of it on the machine's clock that is still after the last
	// successful send, so the many leases of one daemon renew at the same
	// few instants and their requests can share a round trip. A renewal
	// sent early never weakens the bound: the deadline still counts from
	// the last successful send, so in the spec's terms Retry shrinks by
	// exactly what Renew grows, and the law depends on their sum only.
	// Past the first renewal each is exactly retry apart when retry is a
	// multiple of the grid. At most Retry.
	RenewGrid time.Duration

	// Identified says the store names the server of every answer
	// (Record.Server), as redislease does: an answer without a name is
	// then from an unknown server, trusted no more than another one. A
	// store that never names one (a test's) leaves it false.
	Identified bool

	// Node is this node's name: a released record that names it
	// (Record.Next) is offered to it.
	Node string
	// Withdrawn starts the machine withdrawn (see Withdraw): the node
	// was drained before the daemon started.
	Withdrawn bool
	// Ineligible starts the machine ineligible (see Ineligible): it
	// stops the unit and observes the record, so the lease span ages,
	// but acquires nothing until an Eligible event (the daemon still
	// writes and checks the unit's drop-in).
	Ineligible bool
}

// Machine is one node's policy for one lease: standby and leader in one
// state machine. It is a value: Step returns the next one and leaves the
// receiver as it was. It does no I/O, reads no clock and starts no
// goroutine; the zero Machine is not valid, use New.
//
// What it promises, given a daemon that carries out its actions and
// reports their results as the event kinds say: it starts the unit only
// while it holds the lease by a definitive reply; it begins to stop no
// later than retry + renew_deadline after it sent its last successful
// renewal; it releases only after the unit is confirmed inactive; it
// acquires only over a record that stayed byte for byte the same for the
// lease span on its own clock, or over a released one.
//
// What it does not promise: fencing. If systemd cannot stop the unit it
// reports stop_failed, keeps renewing while it may hold the lease, and
// never releases; a partition that also stops those renewals lets a peer
// start. Clocks that drift more than DriftPPM, a daemon that acts on a
// deadline more than SchedulingDelay late, and a store that loses an
// acknowledged write other than by dropping the key (rule 7)
// are outside the bound too.
type Machine struct {
	// t is shared by every machine of the same timing: a daemon's
	// thousands of leases keep one copy, not 64 bytes each.
	t     unique.Handle[Timing]
	grid  Instant // Config.RenewGrid
	state State
	cause Cause
	req   ActionKind // the outstanding store request, or 0
	job   ActionKind // the outstanding unit job, or 0
	// The flags, together and next to the four small fields above: the
	// machine is copied into every supervisor, and they fill one word
	// between them.

	haveSeen bool // false after a reset: the next value starts a new age
	// witnessed: the node saw seen replace an earlier value under that
	// same server: a release it shows happened in that server's history,
	// after what the node saw before. Only a witnessed release is taken
	// at once.
	witnessed  bool
	identified bool // Config.Identified
	holding    bool // this node may hold the lease: renew it, release it
	// blocked: a stop failed while holding, and none has succeeded since:
	// renewals write the record stop_failed, which no standby acquires
	// over, so that the lease stays blocked even if this daemon dies.
	// blockSent: the last renewal sent carried it; blockShown: one that
	// carried it succeeded.
	blocked, blockSent, blockShown bool
	// marked: a renewal that carried stop_failed was sent this tenure,
	// and none without it succeeded since: the record may say
	// stop_failed, which no standby ever takes. A release that fails
	// then is tried again (every reply_max) until it is written or the
	// record is found not to be this node's (ReleaseLost): left behind,
	// it would keep the lease from every node for the record's TTL,
	// though the units are confirmed inactive.
	marked bool

	ineligible bool    // this node must not run the unit: it never acquires
	withdrawn  bool    // Withdraw: the node does not compete for the lease
	now        Instant // the latest instant seen; Step never goes back
	rng        uint64
	reqAt      Instant // when the outstanding store request was sent

	seen   Record  // the value being aged
	seenAt Instant // when seen was first received: its age's origin
	// server is the identity of the Redis server that gave the last
	// answer with one (Record.Server), "" before any.
	server string
	top    uint64 // the highest version of this lease's own record seen
	// writerSpan is the lease span of the last record seen present.
	writerSpan time.Duration
	lastSent   Instant // when the last successful observation was sent
	pollAt     Instant

	held     Record  // this node's record as last written
	token    uint64  // the version of the acquisition that began this tenure (Action.Token)
	anchor   Instant // send of the last successful acquire or renewal (rule 1)
	attempts int     // renewals failed since anchor
	tried    Instant // send of the last failed renewal

	node  string
	delay time.Duration // Defer: how much longer the standby waits
	next  string        // the node a planned handoff under way offers the lease to

	confirmAt Instant // Confirming: start after a renewal sent from here on
	until     Instant // Backoff: its end; StopFailed: the next stop attempt
}

// New returns a node's machine in Stopping: its first Step (a Tick) asks
// for the unit to be stopped, since a new daemon holds no lease.
func New(c Config) (Machine, error) {
	t, err := c.Timing.Resolved()
	if err != nil {
		return Machine{}, err
	}
	if c.RenewGrid < 0 || c.RenewGrid > t.Retry {
		return Machine{}, fmt.Errorf("policy: renew grid %v must be between 0 and retry (%v)", c.RenewGrid, t.Retry)
	}
	return Machine{t: unique.Make(t), grid: Instant(c.RenewGrid), state: Stopping, cause: CauseStartup, rng: c.Seed, identified: c.Identified,
		node: c.Node, withdrawn: c.Withdrawn, ineligible: c.Ineligible}, nil
}

// handle dispatches e to its transition. Each first checks that the event
// answers what is outstanding; anything else changes nothing. (A switch,
// not a table of funcs: calls through a func value would move the machine
// to the heap on every step.)
func (m *Machine) handle(e Event, o *Output) {
	switch e.Kind {
	case Observed:
		m.observed(e.Record, o)
	case ObserveFailed:
		m.observeFailed()
	case AcquireOK:
		m.acquired(e.Record, o)
	case AcquireLost, AcquireUnknown:
		m.acquireFailed()
	case RenewOK:
		m.renewed(e.Record)
	case RenewLost, RenewMissing:
		m.lost(e, o)
	case RenewFailed:
		m.renewFailed()
	case ReleaseOK, ReleaseFailed, ReleaseLost:
		m.releaseDone(e, o)
	case UnitStarted:
		m.unitStarted(e.Token, o)
	case UnitStartFailed:
		m.unitStartFailed(e.Token, o)
	case UnitFailed:
		m.unitFailed(o)
	case UnitStopped:
		m.unitStopped(e.Killed, o)
	case UnitStopFailed:
		m.unitStopFailed(o)
	case HandoffRequested:
		m.handoff(e, o)
	case Nudge:
		m.nudge()
	case Ineligible, Eligible:
		m.eligible(e.Kind == Eligible, o)
	case Withdraw, Compete:
		m.withdraw(e.Kind == Withdraw, o)
	case Defer:
		m.delay = max(0, e.Delay)
	}
}

// Step is the policy: at now, after e, the next machine and what to do.
// It first acts on every timer that ran out by now (an earlier now than a
// previous step's is taken as that one), then on e, then starts whatever
// is due and not outstanding.
func (m Machine) Step(now Instant, e Event) (Machine, Output) {
	var o Output
	m.StepTo(now, e, &o)
	return m, o
}

// StepTo is Step in place: m becomes the next machine, and *o (which it
// overwrites) what to do. A caller that keeps one machine saves the
// copies of two values of half a kilobyte each, and the stack they take.
//
//go:noinline
func (m *Machine) StepTo(now Instant, e Event, o *Output) {
	*o = Output{}
	m.now = max(m.now, now)
	again := m.state == StopFailed // a stop this step issues is tried again
	m.expire(o)
	m.handle(e, o)
	m.advance(o, again)
	o.Wake = m.wake()
}

// expire acts on the timer of the current state if it ran out.
func (m *Machine) expire(o *Output) {
	switch {
	case m.leading() && m.now >= m.deadline():
		m.cancel(o)
	case m.state == Backoff && m.now >= m.until:
		m.state = Standby
	case m.state == StopFailed && m.now >= m.until:
		m.state = Stopping
	}
}

// advance starts the unit job and the store request that are due. A
// stop is due by the deadline (Action.By) unless it is the startup's, or
// tried again after a failed one (again): no deadline bounds those.
func (m *Machine) advance(o *Output, again bool) {
	m.expire(o)
	switch {
	case m.state == Stopping && m.job != StopUnit:
		m.job = StopUnit
		o.do(StopUnit, Absent)
		if !again && m.cause != CauseStartup {
			o.actions[o.n-1].By = m.deadline()
		}
	case m.state == Starting && m.job == 0:
		m.job = StartUnit
		o.do(StartUnit, Absent)
		o.actions[o.n-1].Token = m.token
	}
	if m.state == Releasing && !m.holding {
		m.leave()
	}
	switch {
	case m.req != 0:
	case m.state == Releasing && m.now >= m.until:
		r := m.held
		r.Next = m.next
		m.send(Release, r, o)
	case m.renewing() && m.now >= m.renewDue():
		r := m.held
		r.StopFailed, m.blockSent = m.blocked, m.blocked
		m.marked = m.marked || m.blocked
		m.send(Renew, r, o)
	case m.observing() && m.now >= m.pollAt:
		m.send(Observe, Absent, o)
	}
}

// wake is the earliest timer the machine waits on.
func (m *Machine) wake() Instant {
	w := Never
	switch {
	case m.leading():
		w = m.deadline()
	case m.state == Backoff || m.state == StopFailed:
		w = m.until
	}
	switch {
	case m.req != 0:
	case m.state == Releasing && m.holding: // a failed release tried again
		w = min(w, m.until)
	case m.renewing():
		w = min(w, m.renewDue())
	case m.observing():
		w = min(w, m.pollAt)
	}
	return w
}

func (m *Machine) send(k ActionKind, r Record, o *Output) {
	m.req, m.reqAt = k, m.now
	o.do(k, r)
}

// answer reports whether the outstanding request is k, and ends it.
func (m *Machine) answer(k ActionKind) bool {
	if m.req != k {
		return false
	}
	m.req = 0
	return true
}

// late reports whether the answer to the request came after reply_max.
func (m *Machine) late() bool { return m.now.Sub(m.reqAt) > m.t.Value().ReplyMax }

// State is the control state.
func (m Machine) State() State { return m.state }

// Withdrawn reports whether the node stays out of the competition for
// the lease (Withdraw, or Config.Withdrawn).
func (m Machine) Withdrawn() bool { return m.withdrawn }

// Ineligible reports whether the node must not acquire the lease
// (Ineligible, or Config.Ineligible).
func (m Machine) Ineligible() bool { return m.ineligible }

// Cause is why the node last began to stop.
func (m Machine) Cause() Cause { return m.cause }

// Timing is the timing in force, its lease span resolved.
func (m Machine) Timing() Timing { return m.t.Value() }

// Held returns this node's record as last written, and whether the node
// may still hold it (it renews and will release it).
func (m Machine) Held() (Record, bool) { return m.held, m.holding }

// Token is the fencing token of the tenure this node holds (the version
// its acquisition wrote), and whether it holds one.
func (m Machine) Token() (uint64, bool) { return m.token, m.holding }

// Seen returns the value a standby is aging and when it first received
// it; ok is false when there is none (nothing observed since the last
// reset).
func (m Machine) Seen() (r Record, since Instant, ok bool) {
	return m.seen, m.seenAt, m.haveSeen
}

// LastRenewal is the send of the last successful acquire or renewal.
func (m Machine) LastRenewal() Instant { return m.anchor }

// Deadline is the renew deadline of the lease this node holds (the last
// successful renewal's send + retry + renew_deadline), and whether it
// holds one.
func (m Machine) Deadline() (Instant, bool) { return m.deadline(), m.holding }

// Age is how long the seen value has been unchanged at now.
func (m Machine) Age(now Instant) time.Duration {
	if !m.haveSeen {
		return 0
	}
	return now.Sub(m.seenAt)
}
