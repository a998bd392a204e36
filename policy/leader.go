package policy

// The leader: Reply, BeginRenew, Renew and Cancel (rules 1 and 2),
// and the unit's start.

// leading reports whether the renew deadline binds: the node holds the
// lease and has not begun to stop.
func (m *Machine) leading() bool {
	return m.state == Confirming || m.state == Starting || m.state == Leader
}

// deadline is when a leader without a successful renewal begins to stop:
// retry + renew_deadline after the send of the last one that succeeded.
func (m *Machine) deadline() Instant {
	return m.anchor.Add(m.t.Value().Retry + m.t.Value().RenewDeadline)
}

// renewing reports whether the node keeps renewing: while it may hold the
// lease and its unit may be running. Renewing past the deadline is safe (a
// successful compare-and-set proves no peer took the lease, and only makes
// a standby wait longer) and keeps a peer out while a stop is stuck.
func (m *Machine) renewing() bool {
	return m.holding && (m.leading() || m.state == Stopping || m.state == StopFailed)
}

// renewDue is when the next renewal goes out: retry after the last
// success (brought forward to the renew grid), then every reply_max while
// they fail. A confirming node also renews as soon as its confirmation
// wait is over.
func (m *Machine) renewDue() Instant {
	if m.attempts > 0 {
		return m.tried.Add(m.t.Value().ReplyMax)
	}
	if m.blocked && !m.blockShown {
		return m.anchor // a failed stop is written at once
	}
	due := onGrid(m.anchor.Add(m.t.Value().Retry), m.grid)
	if m.state == Confirming {
		due = min(due, m.confirmAt)
	}
	return due
}

// onGrid is due brought back to the latest multiple of grid. With grid at
// most retry and due = anchor + retry, that is still after anchor.
func onGrid(due, grid Instant) Instant {
	if grid <= 0 {
		return due
	}
	return due - due%grid
}

// cancel: the deadline passed without a renewal.
func (m *Machine) cancel(o *Output) {
	o.note(JournalRenewFailed)
	if m.state == Confirming { // the unit never started: nothing to stop
		m.holding = false
		m.forget()
		return
	}
	m.stop(CauseRenewFailed)
}

// renewed moves the anchor to the renewal's send. A reply after reply_max
// counts as a failure, though the record it reports is kept for the next
// compare-and-set. A confirming node starts once a renewal sent after its
// wait succeeds.
func (m *Machine) renewed(r Record) {
	if !m.answer(Renew) || !m.holding {
		return
	}
	moved := m.answeredBy(r)
	m.top = max(m.top, r.ownVersion())
	if m.late() {
		m.held = r
		m.attemptFailed()
		return
	}
	m.held, m.anchor, m.attempts = r, m.reqAt, 0
	m.blockShown = m.blockShown || m.blockSent
	m.marked = m.marked && m.blockSent
	switch {
	case m.state == Confirming && moved:
		// Another server: what the node confirmed so far may be an
		// older state's. Confirm afresh, for a lease span, from here.
		m.confirmAt = m.now.Add(m.t.Value().LeaseSpan)
	case m.state == Confirming && m.reqAt >= m.confirmAt:
		m.state = Starting
	}
}

func (m *Machine) renewFailed() {
	if m.answer(Renew) {
		m.attemptFailed()
	}
}

func (m *Machine) attemptFailed() {
	m.attempts++
	m.tried = m.reqAt
}

// lost: the record is someone else's or missing. Definitive: stop at once,
// and never release (there is nothing of ours to release). A record with
// this node's token at a later version is not a loss but its own renewal
// whose reply was lost: the attempt failed, the next one compares against
// that record, and the anchor stays where it was.
func (m *Machine) lost(e Event, o *Output) {
	switch {
	case !m.answer(Renew) || !m.holding:
		return
	case e.Kind == RenewLost && e.Record.Extends(m.held):
		m.held = e.Record
		m.attemptFailed()
		return
	}
	m.holding, m.blocked, m.blockShown = false, false, false
	o.note(JournalLost)
	switch m.state {
	case Confirming:
		m.forget()
	case Starting, Leader:
		m.stop(lossCause(e.Kind))
	}
}

func lossCause(k EventKind) Cause {
	if k == RenewMissing {
		return CauseMissing
	}
	return CauseLost
}

// startAnswered reports whether a start's result with token answers
// the start outstanding: one is, and the result is not another tenure's.
func (m *Machine) startAnswered(token uint64) bool {
	return m.job == StartUnit && (token == 0 || token == m.token)
}

func (m *Machine) unitStarted(token uint64, o *Output) {
	if !m.startAnswered(token) {
		return
	}
	m.job = 0
	m.state = Leader
	o.note(JournalStarted)
}

func (m *Machine) unitStartFailed(token uint64, o *Output) {
	if !m.startAnswered(token) {
		return
	}
	m.job = 0
	o.note(JournalUnitFailed)
	m.stop(CauseStartFailed)
}

// unitFailed: the unit died while held. Stop it (confirm inactive),
// release, back off so a peer takes over.
func (m *Machine) unitFailed(o *Output) {
	if (m.state == Starting || m.state == Leader) && m.job != StopUnit {
		o.note(JournalUnitFailed)
		m.stop(CauseUnitFailed)
	}
}
