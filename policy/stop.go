package policy

// Stopping: Signal, Reap and Return, then the release (rule 3),
// and the handoff.

// stop begins stopping the unit; advance issues the StopUnit.
func (m *Machine) stop(c Cause) {
	m.state, m.cause = Stopping, c
}

// unitStopped: the unit is confirmed inactive; release if the node may
// still hold the lease.
func (m *Machine) unitStopped(killed bool, o *Output) {
	if m.job != StopUnit {
		return
	}
	m.job = 0
	o.note(JournalStopped)
	if killed {
		o.Journal = JournalKilled
	}
	m.blocked, m.blockShown = false, false
	m.state, m.until = Releasing, m.now // advance releases, or leaves if not holding
}

// unitStopFailed: even SIGKILL did not make the unit inactive. Never
// release; keep renewing while holding; try the stop again after stop_wait.
func (m *Machine) unitStopFailed(o *Output) {
	if m.job != StopUnit {
		return
	}
	m.job = 0
	o.note(JournalStopFailed)
	m.state, m.until = StopFailed, m.now.Add(m.t.Value().StopWait)
	m.blocked = m.holding
}

// releaseDone: the release's result. One that failed over a record that
// may say stop_failed (marked) is tried again after reply_max. One lost to
// a record that extends this node's (its own renewal whose reply was lost,
// perhaps the one that wrote stop_failed) is not a loss: it is tried again
// at once over that record.
func (m *Machine) releaseDone(e Event, o *Output) {
	if !m.answer(Release) {
		return
	}
	switch k := e.Kind; {
	case k == ReleaseOK:
		o.note(JournalReleased)
	case k == ReleaseLost && e.Record.Extends(m.held):
		m.held, m.until = e.Record, m.now
		return
	case k == ReleaseFailed && m.marked:
		m.until = m.now.Add(m.t.Value().ReplyMax)
		return
	}
	m.leave()
}

// leave ends a stop: the node holds nothing and observes at once, in
// Backoff if it gave the lease up itself, so that a peer takes it.
func (m *Machine) leave() {
	m.holding, m.next, m.marked = false, "", false
	m.forget()
	if m.cause.backsOff() {
		m.state, m.until = Backoff, m.now.Add(m.t.Value().backoff())
	}
}

// handoff: stop, confirm inactive, release, back off; a waiting peer
// acquires the released record at once (only e.To, if it names one,
// until the lease span passed). Refused where nothing runs. The cause is
// CauseUnmanaged when the daemon stops managing the lease here (its
// annotation was removed or refused), CauseDisabled when an operator
// disabled the lease, CauseHandoff otherwise.
func (m *Machine) handoff(e Event, o *Output) {
	c := CauseHandoff
	if e.Cause == CauseUnmanaged || e.Cause == CauseDisabled {
		c, e.To = e.Cause, ""
	}
	if !m.giveUp(c, o) {
		o.note(JournalRefused)
		return
	}
	if m.holding && e.To != m.node {
		m.next = e.To
	}
}

// giveUp stops the unit if it may run, then releases and backs off, for
// c; it reports false where the node neither holds the lease nor stops.
func (m *Machine) giveUp(c Cause, o *Output) bool {
	switch m.state {
	case Starting, Leader:
		o.note(JournalStopping)
		m.stop(c)
	case Confirming: // never started: release at once
		m.state, m.cause, m.until = Releasing, c, m.now
	case Stopping, Releasing, StopFailed:
	default:
		return false
	}
	return true
}

// eligible: Eligible or Ineligible. An ineligible node gives up what it
// holds and acquires nothing until it is eligible again.
func (m *Machine) eligible(ok bool, o *Output) {
	if m.ineligible == !ok {
		return
	}
	m.ineligible = !ok
	if !ok {
		m.giveUp(CauseIneligible, o)
	}
}

// withdraw: Withdraw or Compete. A withdrawn node acquires nothing; an
// acquisition it made whose unit has not started (Confirming) is given
// back. A unit it runs keeps running.
func (m *Machine) withdraw(out bool, o *Output) {
	m.withdrawn = out
	if out && m.state == Confirming {
		m.giveUp(CauseWithdrawn, o)
	}
}
