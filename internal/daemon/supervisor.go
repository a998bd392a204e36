// Package daemon runs one supervisor per lease: it executes what the
// policy's state machine asks (store requests and unit jobs), feeds their
// results back as events, and logs every transition to the journal.
package daemon

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/unitlease/unitlease/internal/logging"
	"github.com/unitlease/unitlease/policy"
	"github.com/unitlease/unitlease/redislease"
)

// Store is what a supervisor needs of the lease store.
type Store interface {
	Observe(ctx context.Context, name string) (redislease.Observation, error)
	Acquire(ctx context.Context, seen redislease.Observation) (redislease.Lease, error)
	Renew(ctx context.Context, l redislease.Lease) (redislease.Lease, error)
	Release(ctx context.Context, l redislease.Lease) (redislease.Record, error)
}

// Units starts and stops a lease's units.
type Units interface {
	// Start starts the unit and returns once it is active.
	Start(ctx context.Context, unit string) error
	// Stop stops the unit within stop_wait, with SIGKILL if needed, and
	// returns once it is confirmed inactive; killed says SIGKILL was used.
	// An error means it is not confirmed inactive.
	Stop(ctx context.Context, unit string) (killed bool, err error)
}

// Clock reads the monotonic clock (rule 5).
type Clock func() policy.Instant

// MonotonicClock counts from now on the monotonic clock.
func MonotonicClock() Clock {
	start := time.Now()
	return func() policy.Instant { return policy.Instant(time.Since(start)) }
}

// Supervisor keeps one lease: its units run on this node only while the
// policy says it holds the lease.
type Supervisor struct {
	Lease string
	Units []string // started in this order, stopped together
	Node  string

	store   Store
	units   Units
	clock   Clock
	log     *slog.Logger // without the lease's fields: see logger
	machine policy.Machine

	events  chan policy.Event
	nudges  chan struct{}
	busy    atomic.Int64 // 1 + the Instant the loop took an event, or 0 while it waits
	status  atomic.Pointer[Status]
	garbage string // the last garbage value reported, to report each once
}

// NewSupervisor returns a supervisor whose first step stops the units
// (a new daemon holds no lease: rule 6).
func NewSupervisor(lease string, units []string, node string, m policy.Machine, store Store, u Units, clock Clock, log *slog.Logger) *Supervisor {
	s := &Supervisor{
		Lease: lease, Units: units, Node: node,
		store: store, units: u, clock: clock, machine: m,
		log:    log,
		events: make(chan policy.Event, 4),
		nudges: make(chan struct{}, 1),
	}
	s.publish(s.clock(), "")
	return s
}

// Run steps the machine until ctx ends. It returns with the machine in
// whatever state it was; call Shutdown first for a clean handover.
func (s *Supervisor) Run(ctx context.Context) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	ev := policy.Event{Kind: policy.Tick}
	for {
		wake := s.step(ctx, ev)
		resetTimer(timer, s.clock(), wake)
		s.busy.Store(0)
		var ok bool
		if ev, ok = s.next(ctx, timer); !ok {
			return
		}
	}
}

// next waits for the next event.
func (s *Supervisor) next(ctx context.Context, timer *time.Timer) (policy.Event, bool) {
	select {
	case <-ctx.Done():
		return policy.Event{}, false
	case ev := <-s.events:
		return ev, true
	case <-timer.C:
		return policy.Event{Kind: policy.Tick}, true
	case <-s.nudges:
		return policy.Event{Kind: policy.Nudge}, true
	}
}

func resetTimer(t *time.Timer, now, wake policy.Instant) {
	if !t.Stop() {
		select {
		case <-t.C:
		default:
		}
	}
	if wake != policy.Never {
		t.Reset(max(0, wake.Sub(now)))
	}
}

// step feeds one event to the machine and starts what it asks.
func (s *Supervisor) step(ctx context.Context, ev policy.Event) policy.Instant {
	now := s.clock()
	s.busy.Store(int64(now) + 1)
	before := s.machine.State()
	next, out := s.machine.Step(now, ev)
	s.machine = next
	if out.Journal != "" || next.State() != before {
		s.journal(out.Journal, before, ev)
	}
	// Publish first: the guard of a start about to be issued reads it.
	s.publish(now, out.Journal)
	for a := range out.Actions() {
		go s.execute(ctx, a)
	}
	return out.Wake
}

// logger is the daemon's logger with the lease's fields. It is built for
// each entry, which are few, rather than kept: a thousand leases would
// each hold a copy of the journal handler's preformatted fields.
func (s *Supervisor) logger() *slog.Logger {
	return s.log.With(logging.Lease, s.Lease, logging.Node, s.Node)
}

// Nudge asks for an observation now: a release or acquisition was
// published. It never blocks.
func (s *Supervisor) Nudge() {
	select {
	case s.nudges <- struct{}{}:
	default:
	}
}

// Stuck reports whether the loop took an event more than within before
// now and has not finished with it: the watchdog's sign of a hang. A loop
// waiting for its next event is never stuck, however long it waits.
func (s *Supervisor) Stuck(now policy.Instant, within time.Duration) bool {
	b := s.busy.Load()
	return b != 0 && now.Sub(policy.Instant(b-1)) > within
}

// Handoff feeds a planned handoff (or a shutdown) to the machine.
func (s *Supervisor) Handoff(ctx context.Context) {
	s.send(ctx, policy.Event{Kind: policy.HandoffRequested})
}

// UnitFailed reports that a unit failed or stopped behind the daemon's back.
func (s *Supervisor) UnitFailed(ctx context.Context) {
	s.send(ctx, policy.Event{Kind: policy.UnitFailed})
}

func (s *Supervisor) send(ctx context.Context, ev policy.Event) {
	select {
	case s.events <- ev:
	case <-ctx.Done():
	}
}
