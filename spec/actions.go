package spec

// One function per action of Lease.tla, in the module's order and with its
// names. Each takes the current state and calls next for every successor
// state the action allows (none when its guard is false). Variables an
// action does not assign keep their value: that is the module's UNCHANGED.

// Commit: the leader's final renewal commits in Redis.
func (l Lease) Commit(s State, next func(State)) {
	if s.Committed {
		return
	}
	s.Committed = true
	s.Version = 1
	next(s)
}

// Reply: the successful renewal's reply arrives within ReplyMax.
// RenewDeadline bounds this successful response; the next retry starts
// afterward.
func (l Lease) Reply(s State, next func(State)) {
	if !s.Committed || s.Leader != Pending || int(s.Now) > l.ReplyMax {
		return
	}
	s.Leader = Retry
	s.Remaining = int32(l.Retry)
	next(s)
}

// BeginRenew: the retry pause is over; renewals are attempted for Renew.
func (l Lease) BeginRenew(s State, next func(State)) {
	if s.Leader != Retry || s.Remaining != 0 {
		return
	}
	s.Leader = Renew
	s.Remaining = int32(l.Renew)
	next(s)
}

// Cancel: the renew deadline passed without success; stopping begins.
func (l Lease) Cancel(s State, next func(State)) {
	if s.Leader != Renew || s.Remaining != 0 {
		return
	}
	s.Leader = Stopping
	s.Remaining = int32(l.StopWait)
	next(s)
}

// Signal: the unit is told to stop.
func (l Lease) Signal(s State, next func(State)) {
	if s.Leader != Stopping || s.Signalled {
		return
	}
	s.Signalled = true
	next(s)
}

// Reap: the old process is gone.
func (l Lease) Reap(s State, next func(State)) {
	if s.Leader != Stopping || !s.Signalled || !s.OldAlive {
		return
	}
	s.OldAlive = false
	next(s)
}

// Return: the leader loop returns once the old process is gone.
func (l Lease) Return(s State, next func(State)) {
	if s.Leader != Stopping || s.OldAlive {
		return
	}
	s.Leader = LeaderDone
	s.Remaining = 0
	next(s)
}

// Observe: the standby reads the record. An unchanged Lease does not reset
// the contender's local observation age.
func (l Lease) Observe(s State, next func(State)) {
	if s.Standby != Poll || s.PollLeft != 0 {
		return
	}
	if s.Seen != s.Version {
		s.Age = 0
	}
	s.Seen = s.Version
	s.Standby = Check
	next(s)
}

// Defer: the record is too young or changed; poll again after a jittered
// interval in PollLow..PollHigh.
func (l Lease) Defer(s State, next func(State)) {
	if s.Standby != Check || !(int(s.Age) < l.LeaseSpan || s.Seen != s.Version) {
		return
	}
	s.Standby = Poll
	for p := l.PollLow; p <= l.PollHigh; p++ {
		s.PollLeft = int32(p)
		next(s)
	}
}

// Acquire: the record stayed unchanged for LeaseSpan; compare-and-set it.
func (l Lease) Acquire(s State, next func(State)) {
	if s.Standby != Check || int(s.Age) != l.LeaseSpan || s.Seen != s.Version {
		return
	}
	s.Version = 2
	s.Seen = 2
	s.Age = 0
	s.Standby = Acquired
	next(s)
}

// Start: the guard admits the start.
func (l Lease) Start(s State, next func(State)) {
	if s.Standby != Acquired {
		return
	}
	s.Standby = Callback
	next(s)
}

// Spawn: the new process is alive.
func (l Lease) Spawn(s State, next func(State)) {
	if s.Standby != Callback {
		return
	}
	s.Standby = Running
	s.NewAlive = true
	next(s)
}

// Urgent: deadlines and local callbacks run before the next one-second
// clock step.
func (l Lease) Urgent(s State) bool {
	return !s.Committed ||
		(s.Leader == Pending && int(s.Now) == l.ReplyMax) ||
		((s.Leader == Retry || s.Leader == Renew) && s.Remaining == 0) ||
		(s.Leader == Stopping && (!s.Signalled || !s.OldAlive || s.Remaining == 0)) ||
		(s.Standby == Poll && s.PollLeft == 0) ||
		s.Standby == Check || s.Standby == Acquired || s.Standby == Callback
}

// Tick: one second passes on both (equal) clocks.
func (l Lease) Tick(s State, next func(State)) {
	if Done(s) || l.Urgent(s) {
		return
	}
	s.Now++
	if s.Leader == Retry || s.Leader == Renew || s.Leader == Stopping {
		s.Remaining--
	}
	if s.Standby == Poll && int(s.Age) < l.LeaseSpan {
		s.Age++
	}
	if s.Standby == Poll {
		s.PollLeft--
	}
	next(s)
}

// Action is one disjunct of Next. The remaining disjunct,
// Done /\ UNCHANGED vars, only stutters and adds no edge to the state graph.
type Action struct {
	Name string
	Next func(Lease, State, func(State))
}

// Actions lists Next's disjuncts in the module's order. Every one of them
// is weakly fair in Spec, and every step of every one changes some variable.
var Actions = []Action{
	{"Commit", Lease.Commit},
	{"Reply", Lease.Reply},
	{"BeginRenew", Lease.BeginRenew},
	{"Cancel", Lease.Cancel},
	{"Signal", Lease.Signal},
	{"Reap", Lease.Reap},
	{"Return", Lease.Return},
	{"Observe", Lease.Observe},
	{"Defer", Lease.Defer},
	{"Acquire", Lease.Acquire},
	{"Start", Lease.Start},
	{"Spawn", Lease.Spawn},
	{"Tick", Lease.Tick},
}
