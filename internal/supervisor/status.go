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

// Status returns the latest snapshot.
func (s *Supervisor) Status() Status { return *s.status.Load() }

// Holding reports whether this node holds the lease, as of the last step.
func (s *Supervisor) Holding() bool { return s.status.Load().Holding }

// publish stores a snapshot after a step.
func (s *Supervisor) publish(now policy.Instant, j policy.Journal) {
	m := s.machine
	st := Status{Lease: s.Lease, Units: s.Units, Node: s.Node, Role: m.State().String(), Since: time.Now(), At: now}
	if prev := s.status.Load(); prev != nil {
		st.reason = prev.reason
		if prev.Role == st.Role {
			st.Since = prev.Since
		}
	}
	if j != "" {
		st.reason = string(j)
		if c := m.Cause(); c != policy.CauseNone && stopRelated(j) {
			st.reason += " (" + c.String() + ")"
		}
	}
	st.Reason = st.reason
	if held, holding := m.Held(); holding {
		st.Holding = true
		st.Holder, st.Version = held.Holder, held.Version
		st.Token, _ = m.Token()
		st.LeaseAge = now.Sub(m.LastRenewal())
		t := m.Timing()
		st.DeadlineLeft = max(0, t.Retry+t.RenewDeadline-st.LeaseAge)
	} else if seen, _, ok := m.Seen(); ok {
		st.Holder, st.Version = seen.Holder, seen.Version
		st.LeaseAge = m.Age(now)
		if o := seen.Other; o != nil {
			st.Reason = o.Unit + " held under lease " + o.Lease
		}
	}
	s.status.Store(&st)
}
