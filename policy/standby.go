package policy

import "time"

// The standby: Observe and Defer, then Acquire (rules 3 and 4).

func (m *Machine) observing() bool { return m.state == Standby || m.state == Backoff }

// observed ages the value read and acquires over it when it is old enough
// or released; otherwise it polls again after a jittered interval.
func (m *Machine) observed(r Record, o *Output) {
	if !m.answer(Observe) {
		return
	}
	m.see(r, m.answeredBy(r))
	m.top = max(m.top, r.ownVersion())
	if m.mayAcquire() {
		m.state = Acquiring
		m.send(Acquire, m.seen, o)
		return
	}
	m.pollAt = m.now.Add(m.pollDelay())
}

// see resets the age when r differs from the value being aged, when the
// key is missing again after a gap long enough that a record may have
// come and gone unseen, or when another server answered (moved: a
// restart, a restore or a failover, which may have brought back an older
// value, whatever this node saw of it). The age starts at the reply's
// receipt, which is after the value was written.
func (m *Machine) see(r Record, moved bool) {
	gap := m.now.Sub(m.lastSent) > m.t.Value().observeGap()
	// A version below one seen before is an older state brought back (a
	// backup written into the running server keeps its identity): a
	// release it shows is not witnessed. It is aged like any value (the
	// change of bytes restarts the age once, not at every reading).
	older := r.Present && r.Other == nil && r.Version < m.top
	if moved || !m.haveSeen || !r.Same(m.seen) || !r.Present && gap {
		// A change seen under one server (or from a store that never
		// tells) is witnessed; a first value, or one under a new or an
		// unknown server, or an older state, is not.
		// A release is its holder's, over its own record (same holder
		// and token; `unitlease clear` writes it so too, over a
		// stop_failed record). One that replaces a missing key, a value
		// that is no record, or another holder's record (`unitlease
		// reset`, perhaps after garbage came and went between two polls)
		// released nothing: the holder whose renewals failed may run its
		// unit until its own deadline.
		legacy := r.Server == "" && !m.identified // a store that never tells
		p := m.seen
		after := m.haveSeen && p.Present && p.Version > 0 && p.Other == nil &&
			(!r.Released || r.Holder == p.Holder && r.Token == p.Token)
		m.witnessed = !moved && !older && (legacy && (!m.haveSeen || after) || after && r.Server != "")
		m.seen, m.seenAt, m.haveSeen = r, m.now, true
	}
	if r.Present {
		// Kept when the key goes missing: its writer may still run the
		// unit for its span, and a missing key says nothing of it.
		m.writerSpan = r.LeaseSpan
	}
	m.lastSent = m.reqAt
}

// mayAcquire: a released record at once if the node witnessed the
// release (rule 8: a first value, or one a new server answered
// with, may be an older state brought back, whose holder's successor
// still runs) and it offers the lease to any node or to this one,
// anything else after the lease span unchanged (the longer of this
// node's and the last writer's); a deferring node (Defer) waits its
// delay longer, except for a release offered to it by name; never in
// backoff, nor while the node is ineligible or withdrawn, nor over a
// record whose holder could not stop its units (stop_failed), however
// old: a failed stop never leads to a start elsewhere. A release
// offered to this node by name is taken in Backoff too: the backoff
// leaves an unnamed release to the peers, and the operator named this
// node.
func (m *Machine) mayAcquire() bool {
	if m.ineligible || m.withdrawn || m.seen.StopFailed {
		return false
	}
	witnessedRelease := m.seen.Present && m.seen.Released && m.witnessed
	if witnessedRelease && m.node != "" && m.seen.Next == m.node {
		return m.state == Standby || m.state == Backoff
	}
	if m.state != Standby {
		return false
	}
	wait := max(m.t.Value().LeaseSpan, m.writerSpan)
	if witnessedRelease && m.seen.Next == "" {
		wait = 0
	}
	return m.now.Sub(m.seenAt) >= wait+m.delay
}

// answeredBy notes the server that answered with r and reports whether it
// is another than the one that answered before (both known).
func (m *Machine) answeredBy(r Record) (moved bool) {
	if r.Server == "" {
		// Unknown: from a store that never tells, nothing moved; from
		// one that does (Config.Identified), it may be any server.
		return m.identified
	}
	moved = m.server != "" && r.Server != m.server
	m.server = r.Server
	return moved
}

// ownVersion is the version of this lease's own record, 0 for a missing
// key or another lease's record.
func (r Record) ownVersion() uint64 {
	if !r.Present || r.Other != nil {
		return 0
	}
	return r.Version
}

// nudge moves the next poll to now.
func (m *Machine) nudge() {
	if m.observing() && m.req == 0 {
		m.pollAt = min(m.pollAt, m.now)
	}
}

func (m *Machine) observeFailed() {
	if m.answer(Observe) {
		m.pollAt = m.now.Add(m.pollDelay())
	}
}

// acquired: the node holds the lease from the acquire's send. Over a
// missing key it confirms first (see confirmWait); otherwise it starts.
// Over another lease's record of one of its units (Record.Other) it
// confirms too: the lease's own key may have been missing, and a standby
// whose annotation names other units (or none of the other lease's) ages
// that missing key, not what this node saw; should Redis lose this
// node's record, it would age on across it. Confirming lets every such
// standby read the record first. So does an acquisition that claimed a
// missing unit key (Record.Fresh): a standby of another lease naming
// that unit ages the same missing key.
func (m *Machine) acquired(r Record, o *Output) {
	if !m.answer(Acquire) {
		return
	}
	if m.late() {
		m.forget()
		return
	}
	moved := m.answeredBy(r)
	m.top = max(m.top, r.ownVersion())
	m.holding, m.held, m.anchor, m.attempts = true, r, m.reqAt, 0
	m.token = r.Version // fixed for the tenure: renewals raise the record's version, not this
	m.held.Fresh = false
	o.note(JournalAcquired)
	m.state = Starting
	switch {
	case moved:
		// Acquired from another server than the one whose record the
		// node aged: an older state brought back, perhaps, whose
		// holder's successor still runs its unit until its own deadline.
		// Hold, and start only after a lease span of renewals.
		m.state, m.confirmAt = Confirming, m.now.Add(m.t.Value().LeaseSpan)
	case !m.seen.Present || m.seen.Other != nil || r.Fresh:
		m.state, m.confirmAt = Confirming, m.now.Add(m.t.Value().confirmWait())
	}
	switch { // sent before the node became ineligible or withdrew: give it back
	case m.ineligible:
		m.giveUp(CauseIneligible, o)
	case m.withdrawn:
		m.giveUp(CauseWithdrawn, o)
	}
}

// acquireFailed: lost or unknown, the record changed or may have; observe
// again at once and age whatever is there from scratch. Never start.
func (m *Machine) acquireFailed() {
	if m.answer(Acquire) {
		m.forget()
	}
}

// forget returns to Standby with nothing seen, observing at once.
func (m *Machine) forget() {
	m.state, m.haveSeen, m.pollAt = Standby, false, m.now
}

// pollDelay draws the next poll interval, uniform in [poll_min, poll_max]
// (splitmix64 on the machine's own state, so Step stays a pure function).
func (m *Machine) pollDelay() time.Duration {
	m.rng += 0x9e3779b97f4a7c15
	z := m.rng
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	z ^= z >> 31
	span := uint64(m.t.Value().PollMax-m.t.Value().PollMin) + 1
	return m.t.Value().PollMin + time.Duration(z%span)
}
