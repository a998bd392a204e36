package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/unitlease/unitlease/internal/logging"
	"github.com/unitlease/unitlease/policy"
)

// Status is a supervisor's state for `unitlease status`.
type Status struct {
	Lease string   `json:"lease"`
	Units []string `json:"units"`
	Node  string   `json:"node"`
	Role  string   `json:"role"` // the policy state: leader, standby, ...
	// Holding: this node holds the lease (it renews it and will release it).
	Holding bool   `json:"holding"`
	Holder  string `json:"holder,omitempty"`
	Version uint64 `json:"version,omitempty"`
	// LeaseAge: for a standby, how long the record has been unchanged;
	// for a holder, the time since its last successful renewal was sent.
	LeaseAge time.Duration `json:"lease_age_ns"`
	// DeadlineLeft: for a holder, the time left before it must stop.
	DeadlineLeft time.Duration `json:"deadline_left_ns,omitempty"`
	// Reason is the last journal event and why the node last stopped.
	Reason string `json:"reason"`
	// UnitStates is each unit's ActiveState, read for the snapshot.
	UnitStates []string  `json:"unit_states,omitempty"`
	Since      time.Time `json:"since"` // wall clock, for display only
}

// Status returns the latest snapshot.
func (s *Supervisor) Status() Status { return *s.status.Load() }

// Holding reports whether this node holds the lease, as of the last step.
func (s *Supervisor) Holding() bool { return s.status.Load().Holding }

// publish stores a snapshot after a step.
func (s *Supervisor) publish(now policy.Instant, j policy.Journal) {
	m := s.machine
	st := Status{Lease: s.Lease, Units: s.Units, Node: s.Node, Role: m.State().String(), Since: time.Now()}
	if prev := s.status.Load(); prev != nil {
		st.Reason = prev.Reason
		if prev.Role == st.Role {
			st.Since = prev.Since
		}
	}
	if j != "" {
		st.Reason = string(j)
		if c := m.Cause(); c != policy.CauseNone && stopRelated(j) {
			st.Reason += " (" + c.String() + ")"
		}
	}
	if held, holding := m.Held(); holding {
		st.Holding = true
		st.Holder, st.Version = held.Holder, held.Version
		st.LeaseAge = now.Sub(m.LastRenewal())
		t := m.Timing()
		st.DeadlineLeft = max(0, t.Retry+t.RenewDeadline-st.LeaseAge)
	} else if seen, _, ok := m.Seen(); ok {
		st.Holder, st.Version = seen.Holder, seen.Version
		st.LeaseAge = m.Age(now)
	}
	s.status.Store(&st)
}

// journal writes one entry for a transition, with the DESIGN.md fields.
func (s *Supervisor) journal(j policy.Journal, before policy.State, ev policy.Event) {
	m := s.machine
	rec, holding := m.Held()
	if !holding {
		rec, _, _ = m.Seen()
	}
	event := string(j)
	if event == "" {
		event = "state"
	}
	msg := s.message(j, before, ev, rec)
	s.logger().Log(context.Background(), priority(j), msg, append(unitFields(s.Units),
		logging.Event, event,
		logging.Holder, rec.Holder,
		logging.Version, rec.Version,
		"UNITLEASE_STATE", m.State().String(),
		"UNITLEASE_CAUSE", m.Cause().String())...)
}

// unitFields is one UNITLEASE_UNIT field per unit of a group: the journal
// keeps them all, so `journalctl UNITLEASE_UNIT=db.service` finds an entry
// of db.service's group.
func unitFields(units []string) []any {
	f := make([]any, 0, 2*len(units)+12)
	for _, u := range units {
		f = append(f, logging.Unit, u)
	}
	return f
}

func (s *Supervisor) message(j policy.Journal, before policy.State, ev policy.Event, rec policy.Record) string {
	units := strings.Join(s.Units, ", ")
	switch j {
	case policy.JournalAcquired:
		return fmt.Sprintf("%s: acquired lease %s at version %d", units, s.Lease, rec.Version)
	case policy.JournalStarted:
		return fmt.Sprintf("%s: started; this node holds lease %s", units, s.Lease)
	case policy.JournalRenewFailed:
		return fmt.Sprintf("%s: no renewal of lease %s within renew_deadline: stopping", units, s.Lease)
	case policy.JournalLost:
		return fmt.Sprintf("%s: lease %s is %s: stopping at once", units, s.Lease, ev.Record)
	case policy.JournalStopping:
		return fmt.Sprintf("%s: stopping (%s)", units, s.machine.Cause())
	case policy.JournalStopped:
		return fmt.Sprintf("%s: confirmed inactive", units)
	case policy.JournalKilled:
		return fmt.Sprintf("%s: confirmed inactive after SIGKILL", units)
	case policy.JournalStopFailed:
		return fmt.Sprintf("%s: still not inactive after SIGKILL; lease %s will not be released", units, s.Lease)
	case policy.JournalReleased:
		return fmt.Sprintf("%s: released lease %s", units, s.Lease)
	case policy.JournalRefused:
		return fmt.Sprintf("%s: handoff refused: this node does not run it", units)
	case policy.JournalUnitFailed:
		return fmt.Sprintf("%s: failed while this node held lease %s: stopping, releasing, backing off", units, s.Lease)
	}
	return fmt.Sprintf("%s: %s -> %s after %s", units, before, s.machine.State(), ev)
}

func priority(j policy.Journal) slog.Level {
	switch j {
	case policy.JournalStopFailed:
		return slog.LevelError
	case policy.JournalRenewFailed, policy.JournalLost, policy.JournalKilled, policy.JournalUnitFailed, policy.JournalRefused:
		return slog.LevelWarn
	}
	return slog.LevelInfo // a state change without an event of its own too: DESIGN.md wants every one
}

// stopRelated reports whether a journal event follows from a stop, whose
// cause is worth showing beside it.
func stopRelated(j policy.Journal) bool {
	switch j {
	case policy.JournalStopping, policy.JournalStopped, policy.JournalKilled, policy.JournalStopFailed, policy.JournalReleased:
		return true
	}
	return false
}
