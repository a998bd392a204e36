package spec

// One function per action of LeaseFailover.tla, in the module's order and
// with its names, written as those of Lease (actions.go) are: each calls
// next for every successor state the action allows, and variables it does
// not assign keep their value.

// Commit: the renewal after the pause commits on the old master. After the
// cut nobody but the leader reads the old master again: its later versions
// are not counted.
func (f Failover) Commit(s FailoverState, next func(FailoverState)) {
	if s.Leader != Retry || s.Remaining != 0 || !f.Accepts(s) || !s.LeaderHolds() {
		return
	}
	if !s.Cut {
		s.Top++
	}
	s.Leader = Retry
	s.Remaining = int16(f.Retry)
	next(s)
}

// BeginRenew: the renewal after the pause fails, and so does every attempt
// for Renew.
func (f Failover) BeginRenew(s FailoverState, next func(FailoverState)) {
	if s.Leader != Retry || s.Remaining != 0 {
		return
	}
	s.Leader = Renew
	s.Remaining = int16(f.Renew)
	next(s)
}

// Cancel: the renew deadline passed without success; stopping begins.
func (f Failover) Cancel(s FailoverState, next func(FailoverState)) {
	if s.Leader != Renew || s.Remaining != 0 {
		return
	}
	s.Leader = Stopping
	s.Remaining = int16(f.StopWait)
	next(s)
}

// Leave: at the end of the pause, before the cut, the leader hands the
// lease over instead: it stops its unit, then releases.
func (f Failover) Leave(s FailoverState, next func(FailoverState)) {
	if s.Leader != Retry || s.Remaining != 0 || s.Cut {
		return
	}
	s.Leader = Stopping
	s.Remaining = int16(f.StopWait)
	s.Leaving = true
	next(s)
}

// Signal: the unit is told to stop.
func (f Failover) Signal(s FailoverState, next func(FailoverState)) {
	if s.Leader != Stopping || s.Signalled {
		return
	}
	s.Signalled = true
	next(s)
}

// Reap: the old process is gone.
func (f Failover) Reap(s FailoverState, next func(FailoverState)) {
	if s.Leader != Stopping || !s.Signalled || !s.OldAlive {
		return
	}
	s.OldAlive = false
	next(s)
}

// Release: a leader that hands over writes a released record once its
// unit is gone.
func (f Failover) Release(s FailoverState, next func(FailoverState)) {
	if s.Leader != Stopping || !s.Leaving || s.OldAlive || !f.Accepts(s) || !s.LeaderHolds() {
		return
	}
	s.Top++
	s.RelVer = s.Top
	s.Leader = LeaderDone
	s.Remaining = 0
	next(s)
}

// Return: the loop returns without releasing (or the release failed).
func (f Failover) Return(s FailoverState, next func(FailoverState)) {
	if s.Leader != Stopping || s.OldAlive {
		return
	}
	s.Leader = LeaderDone
	s.Remaining = 0
	next(s)
}

// Cut: the old master is cut off from its replicas and sentinels. The
// replica to be promoted holds the state as of now or an earlier one.
func (f Failover) Cut(s FailoverState, next func(FailoverState)) {
	if s.Cut {
		return
	}
	s.Cut = true
	s.Clock = 0
	for v := int16(0); v <= s.Top; v++ {
		s.Frozen = v
		next(s)
	}
}

// Rollback: Detect after the cut, the standby's store comes back under a
// new identity, holding that earlier state.
func (f Failover) Rollback(s FailoverState, next func(FailoverState)) {
	if !s.Cut || s.Rolled || int(s.Clock) != f.Detect {
		return
	}
	s.Rolled = true
	next(s)
}

// Observe: the standby reads its master. A changed record, or with Rule an
// answer from another server, restarts the age; a change seen under the
// same server witnesses what it shows.
func (f Failover) Observe(s FailoverState, next func(FailoverState)) {
	if s.Standby != Poll || s.PollLeft != 0 || !s.Reachable() {
		return
	}
	cur, id := s.Current(), s.Ident()
	if cur != s.Seen || f.Rule && id != s.SeenID {
		s.Age = 0
		s.Witnessed = s.Seen != None && id == s.SeenID
	}
	s.Seen = cur
	s.SeenID = id
	s.Standby = Check
	next(s)
}

// Miss: no master answers; the read fails and the age goes on.
func (f Failover) Miss(s FailoverState, next func(FailoverState)) {
	if s.Standby != Poll || s.PollLeft != 0 || s.Reachable() {
		return
	}
	for p := f.PollLow; p <= f.PollHigh; p++ {
		s.PollLeft = int16(p)
		next(s)
	}
}

// Ready: the compare-and-set would find the record seen (with Rule, on the
// server that showed it), and it is old enough or a release the standby
// may take.
func (f Failover) Ready(s FailoverState) bool {
	return s.Reachable() && s.Seen == s.Current() &&
		(!f.Rule || s.SeenID == s.Ident()) &&
		(int(s.Age) == f.LeaseSpan || s.Released(s.Seen) && (!f.Rule || s.Witnessed))
}

// Defer: not ready; poll again after a jittered interval.
func (f Failover) Defer(s FailoverState, next func(FailoverState)) {
	if s.Standby != Check || f.Ready(s) {
		return
	}
	s.Standby = Poll
	for p := f.PollLow; p <= f.PollHigh; p++ {
		s.PollLeft = int16(p)
		next(s)
	}
}

// Acquire: compare-and-set. On the old master the standby's record is its
// next version; on the new master nobody reads it again in this module.
func (f Failover) Acquire(s FailoverState, next func(FailoverState)) {
	if s.Standby != Check || !f.Ready(s) {
		return
	}
	if !s.Rolled {
		s.Top++
	}
	s.Taken = !s.Rolled
	s.Age = 0
	s.Standby = Acquired
	next(s)
}

// Start: the guard admits the start.
func (f Failover) Start(s FailoverState, next func(FailoverState)) {
	if s.Standby != Acquired {
		return
	}
	s.Standby = Callback
	next(s)
}

// Spawn: the new process is alive.
func (f Failover) Spawn(s FailoverState, next func(FailoverState)) {
	if s.Standby != Callback {
		return
	}
	s.Standby = Running
	s.NewAlive = true
	next(s)
}

// Urgent: deadlines, local callbacks, the cut's latest time and the
// rollback run before the next one-second clock step.
func (f Failover) Urgent(s FailoverState) bool {
	return ((s.Leader == Retry || s.Leader == Renew) && s.Remaining == 0) ||
		(s.Leader == Stopping && (!s.Signalled || !s.OldAlive || s.Remaining == 0)) ||
		(s.Standby == Poll && s.PollLeft == 0) ||
		s.Standby == Check || s.Standby == Acquired || s.Standby == Callback ||
		(!s.Cut && int(s.Clock) == f.CutMax()) ||
		(s.Cut && !s.Rolled && int(s.Clock) == f.Detect)
}

// Tick: one second passes on both (equal) clocks.
func (f Failover) Tick(s FailoverState, next func(FailoverState)) {
	if FailoverDone(s) || f.Urgent(s) {
		return
	}
	if !s.Cut || int(s.Clock) < f.Settle() {
		s.Clock++
	}
	if s.Leader == Retry || s.Leader == Renew || s.Leader == Stopping {
		s.Remaining--
	}
	if s.Standby == Poll && int(s.Age) < f.LeaseSpan {
		s.Age++
	}
	if s.Standby == Poll {
		s.PollLeft--
	}
	next(s)
}

// FailoverAction is one disjunct of LeaseFailover's Next. The remaining
// disjunct, Done /\ UNCHANGED vars, only stutters.
type FailoverAction struct {
	Name string
	Next func(Failover, FailoverState, func(FailoverState))
}

// FailoverActions lists Next's disjuncts in the module's order. Every one
// of them is weakly fair in Spec, and every step of every one changes some
// variable.
var FailoverActions = []FailoverAction{
	{"Commit", Failover.Commit},
	{"BeginRenew", Failover.BeginRenew},
	{"Cancel", Failover.Cancel},
	{"Leave", Failover.Leave},
	{"Signal", Failover.Signal},
	{"Reap", Failover.Reap},
	{"Release", Failover.Release},
	{"Return", Failover.Return},
	{"Cut", Failover.Cut},
	{"Rollback", Failover.Rollback},
	{"Observe", Failover.Observe},
	{"Miss", Failover.Miss},
	{"Defer", Failover.Defer},
	{"Acquire", Failover.Acquire},
	{"Start", Failover.Start},
	{"Spawn", Failover.Spawn},
	{"Tick", Failover.Tick},
}
