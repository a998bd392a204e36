package supervisor

import (
	"time"

	"github.com/unitlease/unitlease/policy"
)

// Meter is told what a supervisor does, for the daemon's metrics: every
// answer of Redis to one of its requests, every journal event, every
// garbage value reported. It is called from steps and actions, must
// neither block nor call back into the supervisor, and decides nothing.
type Meter interface {
	// Answered: a request (Observe, Acquire, Renew or Release) ended with
	// ev after took on the supervisor's clock.
	Answered(a policy.ActionKind, ev policy.Event, took time.Duration)
	// Journaled: a step journalled j; c is why the node last began to stop.
	Journaled(j policy.Journal, c policy.Cause)
	// Garbage: a value that is not a record was reported (once per value).
	Garbage()
}

// SetMeter sets the supervisor's meter; before Start only.
func (s *Supervisor) SetMeter(m Meter) { s.meter = m }

// request runs one of the requests to Redis and tells the meter.
func (s *Supervisor) request(a policy.Action, do func() policy.Event) policy.Event {
	if s.meter == nil {
		return do()
	}
	t0 := s.clock()
	ev := do()
	s.meter.Answered(a.Kind, ev, s.clock().Sub(t0))
	return ev
}
