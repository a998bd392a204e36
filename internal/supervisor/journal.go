package supervisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/unitlease/unitlease/internal/logging"
	"github.com/unitlease/unitlease/policy"
	"github.com/unitlease/unitlease/redislease"
)

// journal writes one entry for a transition, with the fields the
// journal promises (logging's field names).
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
	switch {
	case s.hooks == nil:
	case j == policy.JournalUnitFailed:
		s.hooks.UnitFailed()
	case j == policy.JournalAcquired:
		seen, _, _ := m.Seen()
		s.hooks.Acquired(seen, rec)
	case j == policy.JournalReleased:
		s.hooks.Released(ev.Record, m.Cause())
	}
	if s.meter != nil && j != "" {
		s.meter.Journaled(j, m.Cause())
	}
	msg := s.message(j, before, ev, rec)
	s.logger().Log(context.Background(), priority(j), msg, append(logging.UnitFields(s.Units),
		logging.Event, event,
		logging.Holder, rec.Holder,
		logging.Version, rec.Version,
		"UNITLEASE_STATE", m.State().String(),
		"UNITLEASE_CAUSE", m.Cause().String())...)
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
	return slog.LevelInfo // a state change without an event of its own too: every one is journalled
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

// logger is the daemon's logger with the lease's fields. It is built for
// each entry, which are few, rather than kept: a thousand leases would
// each hold a copy of the journal handler's preformatted fields.
func (s *Supervisor) logger() *slog.Logger {
	return s.log.With(logging.Lease, s.Lease, logging.Node, s.Node)
}

// reported is what was last reported of a lease's record, to report
// each once: most leases never have any, and keep a nil pointer.
type reported struct {
	garbage   string // the last garbage reported (its message)
	elsewhere string // the unit and other lease last reported as holding it, or ""
}

// report is the lease's reported, made on first use. Only the store's
// requests use it, one at a time.
func (s *Supervisor) report() *reported {
	if s.reported == nil {
		s.reported = new(reported)
	}
	return s.reported
}

// reportGarbage logs a value that is not a record, once per value. The
// standby cannot age it, so it never acquires over it.
func (s *Supervisor) reportGarbage(err error) {
	var g *redislease.GarbageError
	if !errors.As(err, &g) {
		s.logger().Warn("observing the lease failed: "+err.Error(), "UNITLEASE_EVENT", "observe_failed")
		return
	}
	// Once per message: key, reason and value (a key of another type
	// than a string has no value, but a reason that says which).
	msg := g.Error()
	if r := s.reported; r != nil && msg == r.garbage {
		return
	}
	s.report().garbage = msg
	if s.meter != nil {
		s.meter.Garbage()
	}
	s.logger().Error(err.Error()+"; it is left alone: remove or overwrite it by hand", "UNITLEASE_EVENT", "garbage")
}

// reportElsewhere journals a change in whether one of the lease's units
// is held under another lease, by the observations that say so: the
// standby does not acquire while it is, and ages that lease's record
// instead. Once per unit, lease and whether that record is released, and
// once when it ends.
func (s *Supervisor) reportElsewhere(rec policy.Record) {
	key := ""
	if o := rec.Other; o != nil {
		key = o.Unit + "\x00" + o.Lease
		if o.Released {
			key += "\x00released"
		}
	}
	prev := ""
	if s.reported != nil {
		prev = s.reported.elsewhere
	}
	if key == prev {
		return
	}
	s.report().elsewhere = key
	if o := rec.Other; o != nil {
		msg := fmt.Sprintf("%s: held under lease %s by %s at version %d; lease %s is not acquired until that record is released or stays unchanged for the lease span",
			o.Unit, o.Lease, rec.Holder, rec.Version, s.Lease)
		if o.Released {
			msg = fmt.Sprintf("%s: released under lease %s by %s at version %d; lease %s is acquired once that record stays unchanged for the lease span",
				o.Unit, o.Lease, rec.Holder, rec.Version, s.Lease)
		}
		s.logger().Warn(msg,
			logging.Event, eventElsewhere, logging.Unit, o.Unit, otherLease, o.Lease, logging.Holder, rec.Holder, logging.Version, rec.Version)
		return
	}
	unit, lease, _ := strings.Cut(prev, "\x00")
	lease, _, _ = strings.Cut(lease, "\x00")
	s.logger().Info(fmt.Sprintf("%s: no longer held under lease %s", unit, lease),
		logging.Event, eventElsewhere, logging.Unit, unit, otherLease, lease)
}

// reportClaimed journals an acquisition the store refused because a unit
// is held under another lease.
func (s *Supervisor) reportClaimed(e *redislease.ClaimedError) {
	c := e.Current
	s.logger().Warn(fmt.Sprintf("%s: acquiring lease %s refused: %v", e.Unit, s.Lease, e),
		logging.Event, eventElsewhere, logging.Unit, e.Unit, otherLease, e.OtherLease(), logging.Holder, c.Holder, logging.Version, c.Version)
}

// The journal's event and field for a unit held under another lease.
const (
	eventElsewhere = "unit_elsewhere"
	otherLease     = "UNITLEASE_OTHER_LEASE"
)
