package supervisor

import (
	"time"

	"github.com/unitlease/unitlease/policy"
)

// Status is a supervisor's state as of its last step: what `unitlease
// status` shows of one lease, and what the guard and a handoff read.
type Status struct {
	Lease string
	Units []string
	Node  string
	Role  string // the policy state: leader, standby, ...
	// Holding: this node holds the lease (it renews it and will release it).
	Holding bool
	Holder  string
	Version uint64
	// Token: for a holder, the fencing token of its tenure (the version
	// its acquisition wrote, as UNITLEASE_TOKEN); else 0.
	Token uint64
	// LeaseAge: for a standby, how long the record has been unchanged;
	// for a holder, the time since its last successful renewal was sent.
	LeaseAge time.Duration
	// DeadlineLeft: for a holder, the time left before it must stop.
	DeadlineLeft time.Duration
	// Reason is the last journal event and why the node last stopped;
	// for a standby kept out by a unit held under another lease, that.
	Reason string
	reason string    // the last journal event and cause alone
	Since  time.Time // when Role began, on the wall clock, for display only
	// At is the instant of the step this status is of: LeaseAge and
	// DeadlineLeft are as of then.
	At policy.Instant
}

// snapshot is what a step publishes, read back as a Status: without
// the lease's names, which Status adds, and with Since as a number. A
// step makes one and a lease keeps the last: 128 bytes, where a Status
// is 192.
type snapshot struct {
	role         string
	holder       string
	version      uint64
	token        uint64
	leaseAge     time.Duration
	deadlineLeft time.Duration
	reason       string // the last journal event and cause alone
	shown        string // Status.Reason
	since        int64  // Status.Since, in Unix nanoseconds
	at           policy.Instant
	holding      bool
}

// Status returns the latest snapshot.
func (s *Supervisor) Status() Status {
	p := s.status.Load()
	return Status{Lease: s.Lease, Units: s.Units, Node: s.Node, Role: p.role, Holding: p.holding,
		Holder: p.holder, Version: p.version, Token: p.token, LeaseAge: p.leaseAge, DeadlineLeft: p.deadlineLeft,
		Reason: p.shown, reason: p.reason, Since: time.Unix(0, p.since), At: p.at}
}

// Holding reports whether this node holds the lease, as of the last step.
func (s *Supervisor) Holding() bool { return s.status.Load().holding }

// publish stores a snapshot after a step.
func (s *Supervisor) publish(now policy.Instant, j policy.Journal) {
	m := s.machine
	st := snapshot{role: m.State().String(), since: time.Now().UnixNano(), at: now}
	if prev := s.status.Load(); prev != nil {
		st.reason = prev.reason
		if prev.role == st.role {
			st.since = prev.since
		}
	}
	if j != "" {
		st.reason = string(j)
		if c := m.Cause(); c != policy.CauseNone && stopRelated(j) {
			st.reason += " (" + c.String() + ")"
		}
	}
	st.shown = st.reason
	if held, holding := m.Held(); holding {
		st.holding = true
		st.holder, st.version = held.Holder, held.Version
		st.token, _ = m.Token()
		st.leaseAge = now.Sub(m.LastRenewal())
		t := m.Timing()
		st.deadlineLeft = max(0, t.Retry+t.RenewDeadline-st.leaseAge)
	} else if seen, _, ok := m.Seen(); ok {
		st.holder, st.version = seen.Holder, seen.Version
		st.leaseAge = m.Age(now)
		if o := seen.Other; o != nil {
			st.shown = o.Unit + " held under lease " + o.Lease
		}
	}
	s.status.Store(&st)
}
