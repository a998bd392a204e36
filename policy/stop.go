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
	m.state = Releasing // advance releases, or leaves if not holding
}

// unitStopFailed: even SIGKILL did not make the unit inactive. Never
// release; keep renewing while holding; try the stop again after stop_wait.
func (m *Machine) unitStopFailed(o *Output) {
	if m.job != StopUnit {
		return
	}
	m.job = 0
	o.note(JournalStopFailed)
	m.state, m.until = StopFailed, m.now.Add(m.t.StopWait)
	m.blocked = m.holding
}

func (m *Machine) releaseDone(ok bool, o *Output) {
	if !m.answer(Release) {
		return
	}
	if ok {
		o.note(JournalReleased)
	}
	m.leave()
}

// leave ends a stop: the node holds nothing and observes at once, in
// Backoff if it gave the lease up itself, so that a peer takes it.
func (m *Machine) leave() {
	m.holding = false
	m.forget()
	if m.cause.backsOff() {
		m.state, m.until = Backoff, m.now.Add(m.t.backoff())
	}
}

// handoff: stop, confirm inactive, release, back off; a waiting peer
// acquires the released record at once. Refused where nothing runs. c is
// CauseUnmanaged when the daemon stops managing the lease here (its
// annotation was removed or refused), CauseHandoff otherwise.
func (m *Machine) handoff(c Cause, o *Output) {
	if c != CauseUnmanaged {
		c = CauseHandoff
	}
	if !m.giveUp(c, o) {
		o.note(JournalRefused)
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
		m.state, m.cause = Releasing, c
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
