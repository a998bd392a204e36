// Package supervisor keeps one lease on this node: it steps the policy's
// state machine, carries out what each step asks (store requests and unit
// jobs) and feeds their results back as events, writes a journal entry for
// every transition, and publishes the lease's status for the control
// socket and the watchdog.
//
// It talks to the lease store and to systemd through two small
// interfaces, Records and Units: redislease's store satisfies the first
// (and UnitRecords, so that each unit belongs to one lease across the
// cluster), and the daemon adapts systemd to the second. It imports policy,
// redislease (the store's errors) and logging, and never unitctl or the
// daemon.
package supervisor

import (
	"context"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/unitlease/unitlease/policy"
)

// Records is what a supervisor needs of the lease store, the lease's
// record: *redislease.Store. Records travel as the policy has them,
// decoded once by the store and with their exact bytes; errors are
// redislease's.
type Records interface {
	// Observe reads the lease's record (policy.Absent: missing).
	Observe(ctx context.Context, name string) (policy.Record, error)
	// Acquire compare-and-sets exactly seen to a record this node holds.
	Acquire(ctx context.Context, name string, seen policy.Record) (policy.Record, error)
	// Renew writes held at its next version.
	Renew(ctx context.Context, name string, held policy.Record) (policy.Record, error)
	// Release writes held as released.
	Release(ctx context.Context, name string, held policy.Record) (policy.Record, error)
}

// UnitRecords is a Records that also keeps each unit to one lease across
// the cluster (*redislease.Store): the same requests, given the lease's
// units, read and write the units' keys with the lease's key. A record it
// observes may be another lease's (policy.Record.Other): one of the units
// is held under that lease. A supervisor whose store is one passes its
// units to every request; the daemon's is.
type UnitRecords interface {
	ObserveUnits(ctx context.Context, name string, units []string) (policy.Record, error)
	AcquireUnits(ctx context.Context, name string, units []string, seen policy.Record) (policy.Record, error)
	// RenewUnits and ReleaseUnits may return the record written together
	// with a *redislease.GarbageError: a unit key held garbage and was
	// left as it is.
	RenewUnits(ctx context.Context, name string, units []string, held policy.Record) (policy.Record, error)
	ReleaseUnits(ctx context.Context, name string, units []string, held policy.Record) (policy.Record, error)
}

// Units starts and stops a lease's units.
type Units interface {
	// StartOrder orders a group's units as systemd would start them
	// together (After=, Before=); an error leaves them as they were.
	StartOrder(ctx context.Context, units []string) ([]string, error)
	// Start starts the unit with env in its environment and returns once
	// it is active.
	Start(ctx context.Context, unit string, env Env) error
	// Stop stops the unit within stop_wait, with SIGKILL if needed, and
	// returns once it is confirmed inactive; killed says SIGKILL was used.
	// An error means it is not confirmed inactive. It calls queued, if
	// not nil, once systemd has the stop (its job is queued, or the unit
	// was found stopped): from then on systemd bounds the stop by itself,
	// even if the daemon dies.
	Stop(ctx context.Context, unit string, queued func()) (killed bool, err error)
}

// QueuedUnits is Units whose starts wait for their turn without a
// goroutine each (the daemon's, over unitctl's line of starts): a daemon
// that starts thousands of units a few at a time does not park a
// goroutine for each start waiting, whose descriptor the runtime would
// keep for good.
type QueuedUnits interface {
	Units
	// StartQueued is Start that returns at once: done is called, on a
	// goroutine of its own, with what Start would have returned.
	StartQueued(ctx context.Context, unit string, env Env, done func(error))
}

// QueuedStops is Units whose stops that no deadline bounds (a new
// daemon's stops of the units it does not hold, rule 6; a stop tried
// again after a failed one) wait for their turn without a goroutine
// each (the daemon's, over unitctl's StopQueued): a daemon that starts
// with thousands of leases stops every unit at once.
type QueuedStops interface {
	Units
	// StopQueued is Stop that returns at once, for a stop with no
	// pending deadline: done is called, on a goroutine of its own, with
	// what Stop would have returned.
	StopQueued(ctx context.Context, unit string, done func(killed bool, err error))
}

// Env is what a unit's environment carries of the tenure it runs in.
type Env struct {
	Lease string
	Node  string
	// Token is the fencing token: the version this node acquired the
	// lease at, fixed for the tenure and larger for every later one.
	Token uint64
}

// Pairs is env as UNITLEASE_LEASE, UNITLEASE_NODE and UNITLEASE_TOKEN.
func (e Env) Pairs() [][2]string {
	return [][2]string{{"UNITLEASE_LEASE", e.Lease}, {"UNITLEASE_NODE", e.Node}, {"UNITLEASE_TOKEN", strconv.FormatUint(e.Token, 10)}}
}

// Supervisor keeps one lease: its units run on this node only while the
// policy says it holds the lease.
//
// A supervisor owns no goroutine while it waits: its timer is a runtime
// timer, and each event (the timer, an action's result, a nudge, a
// handoff) steps the machine on the goroutine that brought it, one at a
// time under mu. The goroutine that ran a step goes on to carry out the
// step's first action and feeds its result back, so a renewal is one
// goroutine from the timer to the step that takes its answer; a step's
// other actions get goroutines of their own. A thousand idle leases cost
// a thousand timers, not a thousand parked stacks for the collector to
// scan and shrink.
type Supervisor struct {
	Lease string
	Units []string // by name; started in systemd's order, stopped together
	Node  string

	store Records // if a UnitRecords too, every request names the units
	units Units
	clock Clock
	log   *slog.Logger // without the lease's fields: see logger

	mu      sync.Mutex
	machine policy.Machine  // guarded by mu
	ctx     context.Context // &life once started; actions run on it
	life    lifetime        // its done is closed once ended is set
	timer   *time.Timer     // steps a Tick at wake; guarded by mu
	wake    policy.Instant  // guarded by mu
	started bool            // Start ran: s.ctx and s.timer are set; guarded by mu
	ended   bool            // the supervisor ended: events are dropped; guarded by mu

	nudges      atomic.Uint32               // the nudges on their way to a step: nudgeLined, nudgeNow
	ineligible  atomic.Bool                 // the last SetEligible said no
	eligibility atomic.Bool                 // SetEligibleSoon changed ineligible: the next deliver steps it
	withdrawn   atomic.Bool                 // the last SetWithdrawn said yes (or the machine began withdrawn)
	delay       atomic.Int64                // the last SetDelay's
	busy        atomic.Int64                // 1 + the Instant a step began, or 0 between steps
	due         atomic.Int64                // 1 + the Instant of the next wake-up, or 0 for none
	stopping    atomic.Pointer[pendingStop] // a stop due by a deadline that systemd does not have yet
	status      atomic.Pointer[snapshot]
	hooks       Hooks // SetHooks; nil: nobody is told
	meter       Meter // SetMeter; nil: nothing is counted

	reported *reported // nil until a record is reported (see report)
}

// Hooks is told of a lease's events by the steps that journal them:
// UnitFailed of unit_failed (a unit failed while held, or its start
// failed), Acquired of acquired (with the record aged and the one
// written), Released of released (with the released record and why the
// node stopped). Its methods are called under the supervisor's lock:
// they must not block, nor call back into the supervisor.
type Hooks interface {
	UnitFailed()
	Acquired(seen, got policy.Record)
	Released(released policy.Record, cause policy.Cause)
}

// SetHooks sets the supervisor's hooks; before Start only.
func (s *Supervisor) SetHooks(h Hooks) { s.hooks = h }

// New returns a supervisor whose first step stops the units
// (a new daemon holds no lease: rule 6). log must never block its caller
// (the daemon's is a logging.Async): steps write their journal entries
// under the supervisor's lock, before the stop they ask for is issued.
func New(lease string, units []string, node string, m policy.Machine, store Records, u Units, clock Clock, log *slog.Logger) *Supervisor {
	s := &Supervisor{
		Lease: lease, Units: units, Node: node,
		store: store, units: u, clock: clock, machine: m,
		log: log,
	}
	s.life.done = make(chan struct{})
	s.withdrawn.Store(m.Withdrawn())
	s.ineligible.Store(m.Ineligible())
	s.publish(s.clock(), "")
	return s
}

// Start takes the first step (the startup's stop of the units) on the
// caller's goroutine, and steps the machine on every event until ctx
// ends; events before Start are dropped (the first step stops the units
// and observes whatever is there anyway). It returns once the first
// step has put its stop in systemd's line or on a goroutine of its own,
// never waiting for the stop (see launch);
// Done is closed once ctx ended and the step under way, if any, is over.
// Actions under way then finish on their own, and their results are
// dropped. Call Shutdown first for a clean handover.
func (s *Supervisor) Start(ctx context.Context) {
	s.begin(ctx)
	context.AfterFunc(ctx, s.end)
}

// Launch is Start ended by a call: the supervisor ends when the
// returned end is called (or parent ends), as it would with Start and
// context.WithCancel. end may be called more than once. A daemon with
// thousands of leases launches them on a parent that never ends
// (context.WithoutCancel): a supervisor ended by a call, not watched,
// needs no callback registered with the parent, nor a place in a set
// of its children (about 350 bytes a lease).
func (s *Supervisor) Launch(parent context.Context) (end func()) {
	s.begin(parent)
	unwatch := func() bool { return false }
	if parent.Done() != nil {
		unwatch = context.AfterFunc(parent, s.end) // its stop lets go of s
	}
	return func() {
		unwatch()
		s.end()
	}
}

// begin starts the supervisor on a lifetime of its own (see lifetime)
// with ctx's values and deadline; whoever ends ctx calls s.end.
func (s *Supervisor) begin(ctx context.Context) {
	s.mu.Lock()
	s.life.parent, s.life.values = ctx, context.WithoutCancel(ctx)
	s.ctx, s.started = &s.life, true
	s.timer = time.AfterFunc(math.MaxInt64, s.tick) // the first step sets it
	s.mu.Unlock()
	s.launch()
}

// launch takes the first step, and the eligibility set before it, on
// the caller's goroutine. A timer firing at once gave each its own
// goroutine: a daemon that launches thousands of supervisors in one
// pass had over two thousand running together, and the runtime keeps
// every goroutine descriptor it ever made (a megabyte at 5,000 leases,
// for the process's life). The first step asks for the startup's stop,
// which carry puts in systemd's line, or on a goroutine of its own, and
// returns: a step in line never waits for systemd. Any other first
// action (a store request, which may wait for Redis) is carried out on
// a goroutine of its own, as the timer's would have been.
//
// An eligibility step, taken, is the first step: it ran the machine at
// this instant and set the timer, and a Tick after it would do nothing,
// but might wait for a step that the stop's result brought meanwhile.
//
// SetEligible and SetWithdrawn before Start changed their flags, and
// their events were dropped (as every event before Start): the machine
// takes the flags' last word here, where they differ from its own.
func (s *Supervisor) launch() {
	s.mu.Lock()
	eligibility := s.eligibility.Swap(false) || s.ineligible.Load() != s.machine.Ineligible()
	withdrawal := s.withdrawn.Load() != s.machine.Withdrawn()
	s.mu.Unlock()
	taken := false
	if withdrawal {
		taken = s.stepInLine(policy.Event{Kind: policy.Withdraw}) // lastWord: the flag's
	}
	if eligibility {
		taken = s.stepInLine(policy.Event{Kind: policy.Eligible}) || taken
	}
	if !taken {
		s.stepInLine(policy.Event{Kind: policy.Tick})
	}
}

// stepInLine steps ev and carries out what it asks without waiting on
// this goroutine for anything but the step itself; it reports whether
// the step was taken. A supervisor started on a context already ended
// ends here, before its stop is carried out: the stop goes on (a stop
// is never abandoned) and its result takes no step. Its end would
// otherwise come only from context.AfterFunc, which Start and Launch
// register after this step, on a goroutine of its own, which the stop's
// result could outrun to an acquisition and a start.
func (s *Supervisor) stepInLine(ev policy.Event) bool {
	var out policy.Output
	if !s.step(ev, &out) {
		return false
	}
	if s.life.parent.Err() != nil {
		s.end()
	}
	if out.Len() == 0 {
		return true
	}
	if k := out.At(0).Kind; k == policy.StartUnit || k == policy.StopUnit {
		s.carry(&out) // a unit's job waits in a line or on its own goroutine
		return true
	}
	o := out
	go s.carry(&o)
	return true
}

// Done is closed once the supervisor took its last step.
func (s *Supervisor) Done() <-chan struct{} { return s.life.done }

func (s *Supervisor) end() {
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return
	}
	s.ended = true
	if s.timer != nil {
		s.timer.Stop()
	}
	s.due.Store(0) // no step comes any more, and none is overdue
	s.life.ended()
	close(s.life.done) // under mu: an end that finds it ended finds it closed
	s.mu.Unlock()
	s.life.end() // the actions' contexts end with it
}

// tick is the timer's event. A timer reset while it was firing may
// bring one early; the machine takes a Tick at any moment, but an early
// one is dropped as the work of nothing.
func (s *Supervisor) tick() {
	s.deliver(policy.Event{Kind: policy.Tick})
}

// A tick runs on a new goroutine (the timer's), on the runtime's small
// starting stack, and a step and its request fit in it: the machine steps
// in place (policy.Machine.StepTo) and the output is filled in where the
// caller keeps it, so neither half-kilobyte value is copied through the
// frames. When a step returned both by value, its frames came to over 7
// KiB and a renewal's past 8: each tick's goroutine had its stack grown
// and copied, a fifth to a quarter of the daemon's CPU at a thousand
// leases, and growing it at once on a new goroutine still cost the
// zeroing of 8 KiB and a 16 KiB stack per tick.

// deliver steps the machine with ev and carries out what it asks.
func (s *Supervisor) deliver(ev policy.Event) {
	s.flushEligibility()
	var out policy.Output
	if s.step(ev, &out) {
		s.carry(&out)
	}
}

// carry carries out a step's first action on this goroutine and steps
// with its result, and so on until a step asks for nothing; the other
// actions of a step run on goroutines of their own.
func (s *Supervisor) carry(out *policy.Output) {
	for out.Len() > 0 {
		for i := 1; i < out.Len(); i++ {
			a := out.At(i)
			go func() {
				if ev, ok := s.execute(a); ok {
					s.deliver(ev)
				}
			}()
		}
		if first := out.At(0); first.Kind == policy.StartUnit || first.Kind == policy.StopUnit {
			// A start of one unit over QueuedUnits waits for its turn
			// as an entry in a line, with no goroutine (startQueued).
			if first.Kind == policy.StartUnit && s.startQueued(first) {
				return
			}
			// So does a stop of one unit that no deadline bounds
			// (stopQueued).
			if first.Kind == policy.StopUnit && s.stopQueued(first) {
				return
			}
			// Any other unit's job may wait long for its turn (a daemon
			// that starts with thousands of leases stops them all at
			// once, then starts them two at a time): it waits on a goroutine
			// of its own, whose stack holds the job's frames only, not
			// the deepest this one reached in the steps and the store's
			// requests before it. Each parked stack was 16 KiB otherwise:
			// 31 MB of them while 2,000 starts waited their turn.
			// Its result is stepped as the job's step's own goroutine
			// would have: without first taking an eligibility change
			// (deliver's), which would come before it.
			go func() {
				if ev, ok := s.execute(first); ok {
					var next policy.Output
					if s.step(ev, &next) {
						s.carry(&next)
					}
				}
			}()
			return
		}
		ev, ok := s.execute(out.At(0))
		if !ok {
			return
		}
		if !s.step(ev, out) {
			return
		}
	}
}

// step feeds one event to the machine, publishes the new state and sets
// the timer; it reports false if the supervisor has not started or has
// ended, or ev is a Tick that came before its time.
func (s *Supervisor) step(ev policy.Event, out *policy.Output) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ev.Kind == policy.Nudge {
		// Taken: a nudge from now on asks again. Cleared here, not
		// before waiting for mu, so that nudges while a step hangs are
		// one. Both kinds: this step observes for the other too, which
		// only makes a nudge still in the line the work of nothing.
		s.nudges.Store(0)
	}
	now := s.clock()
	if !s.started || s.ended || (ev.Kind == policy.Tick && now < s.wake) {
		*out = policy.Output{}
		return false
	}
	ev = s.lastWord(ev)
	s.busy.Store(int64(now) + 1)
	defer s.busy.Store(0)
	before := s.machine.State()
	s.machine.StepTo(now, ev, out)
	if out.Journal != "" || s.machine.State() != before {
		s.journal(out.Journal, before, ev)
	}
	// Publish first: the guard of a start about to be issued reads it.
	s.publish(now, out.Journal)
	for a := range out.Actions() {
		if a.Kind == policy.StopUnit && a.By != 0 && s.stopping.Load() == nil {
			// Before the step ends: the watchdog sees the stop as due
			// from the moment it is decided.
			s.stopping.Store(newPendingStop(a.By, s.Units))
		}
	}
	if p := s.stopping.Load(); p != nil {
		// Renewals that still succeed while the stop is under way (a
		// handoff) move the deadline, and the stop's with it.
		if d, ok := s.machine.Deadline(); ok {
			p.extend(d)
		}
	}
	s.wake = out.Wake
	if out.Wake == policy.Never {
		s.due.Store(0)
	} else {
		s.due.Store(int64(out.Wake) + 1)
	}
	if out.Wake == policy.Never {
		s.timer.Stop()
	} else {
		s.timer.Reset(max(0, out.Wake.Sub(now)))
	}
	return true
}

// Wake re-arms the timer from the clock: to fire at once if the
// machine's wake-up has come, else when it comes on the clock; then the
// timer steps a Tick on its own goroutine, as always. The runtime's timers
// run on CLOCK_MONOTONIC, which stands still while the machine is
// suspended, so after a resume a timer fires as much later as the suspend
// was long; the clock counted the suspend (BootClock), and Wake
// brings the timer back in line with it. The daemon calls it on every
// supervisor when it notices a resume.
//
// It never steps on the caller's goroutine and never waits for an action,
// only for a step under way to finish. Before Start, after the end, and
// while the machine wants no wake-up, it does nothing.
func (s *Supervisor) Wake() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.started || s.ended || s.wake == policy.Never {
		return
	}
	s.timer.Reset(max(0, s.wake.Sub(s.clock())))
}

// Nudge asks for an observation now: a release or acquisition was
// published. It never blocks, and nudges that come while one is on its
// way are one.
//
// A supervisor that holds the lease, as of its last step, is not nudged:
// only a standby observes, and the step would do nothing but take a
// goroutine. A daemon that subscribes to its leases' events once it has
// acquired them nudges every lease at once (the subscription's resync):
// 5,000 goroutines together at 5,000 leases, whose descriptors the
// runtime keeps for the process's life. A nudge is only a hurry: a
// supervisor that stops holding polls, and nothing waits on a nudge.
// But a supervisor whose wake-up is overdue (a resume that the suspend
// check has not seen yet: its timer runs late by as long as the machine
// slept), a holder included, is nudged as before: the step acts on its
// deadline at once, as its timer would have.
func (s *Supervisor) Nudge() { s.NudgeVia(goNow) }

// goNow runs f on a goroutine of its own.
func goNow(f func()) { go f() }

// The kinds of nudge on their way (Supervisor.nudges): each kind is one
// at a time.
const (
	nudgeLined uint32 = 1 << iota // a step that run (NudgeVia) took
	nudgeNow                      // a step of an overdue supervisor, on a goroutine of its own
)

// NudgeVia is Nudge whose step runs where run puts it: a caller that
// nudges thousands of standbys together (a resubscription's resync)
// puts the steps in a line that a few goroutines work through, not one
// goroutine each. run must not call the step before it returns, and it
// must call it: until then, nudges of this supervisor are that one.
// Only a supervisor whose wake-up is overdue does not wait in the line,
// nor for a step of its own still in it: its step runs at once on a
// goroutine of its own, as with Nudge, since it may stop the unit of a
// lease that expired while the machine slept (a holder's, or a retry of
// a stop that failed).
func (s *Supervisor) NudgeVia(run func(step func())) {
	if s.overdue() {
		if s.nudges.Or(nudgeNow)&nudgeNow == 0 {
			go s.nudge()
		}
		return
	}
	if p := s.status.Load(); p != nil && p.holding {
		return
	}
	if s.nudges.Or(nudgeLined)&nudgeLined == 0 {
		run(s.nudge)
	}
}

// nudge steps a Nudge and carries out what it asks.
func (s *Supervisor) nudge() { s.deliver(policy.Event{Kind: policy.Nudge}) }

// overdue reports whether the supervisor's wake-up has come on its
// clock and no step has taken it yet.
func (s *Supervisor) overdue() bool {
	d := s.due.Load()
	return d != 0 && policy.Instant(d-1) <= s.clock()
}

// Stuck reports whether the loop took an event more than within before
// now and has not finished with it, or its wake-up passed more than
// within before now and no step took it (its timer did not fire: a
// starved runtime, or a resume not yet noticed): the watchdog's sign that
// the daemon does not act on its deadlines. A loop waiting for an event
// before its wake-up is never stuck, however long it waits.
func (s *Supervisor) Stuck(now policy.Instant, within time.Duration) bool {
	return s.Busy(now, within) || s.Overdue(now, within) || s.StopLate(now, within)
}

// Busy reports whether the loop took an event more than within before now
// and has not finished with it.
func (s *Supervisor) Busy(now policy.Instant, within time.Duration) bool {
	b := s.busy.Load()
	return b != 0 && now.Sub(policy.Instant(b-1)) > within
}

// Overdue reports whether the wake-up passed more than within before now
// with no step taken. Wake makes an overdue supervisor step at once.
func (s *Supervisor) Overdue(now policy.Instant, within time.Duration) bool {
	d := s.due.Load()
	return d != 0 && now.Sub(policy.Instant(d-1)) > within
}

// StopLate reports whether a stop due by a deadline (policy.Action.By)
// is not yet in systemd's hands more than within after that deadline:
// the step was taken, but the D-Bus call that queues the stop job has not
// returned (systemd slow to answer, the connection stuck), or it failed
// and the stop tried again has not got through either. The lease span
// counts stop_wait from the deadline, so this is a daemon that did not
// act in time, as a stuck loop is; once the watchdog has the daemon
// killed, BindsTo= has systemd stop the unit, within stop_wait, on its own.
// It holds after the supervisor ended, until the stop got through.
func (s *Supervisor) StopLate(now policy.Instant, within time.Duration) bool {
	p := s.stopping.Load()
	return p != nil && now.Sub(policy.Instant(p.by.Load())) > within
}

// StopPending reports whether a stop due by a deadline is not yet in
// systemd's hands, however late.
func (s *Supervisor) StopPending() bool { return s.stopping.Load() != nil }

// pendingStop is a stop due by a deadline, until systemd has it for
// every unit of the lease. A stop that failed without systemd ever taking
// it stays pending: the stop tried again adopts it.
type pendingStop struct {
	by   atomic.Int64 // a policy.Instant; later while renewals extend the lease
	mu   sync.Mutex
	left map[string]bool // units whose stop systemd does not have yet
}

func newPendingStop(by policy.Instant, units []string) *pendingStop {
	p := &pendingStop{left: make(map[string]bool, len(units))}
	p.by.Store(int64(by))
	for _, u := range units {
		p.left[u] = true
	}
	return p
}

// extend moves the deadline to d if d is later.
func (p *pendingStop) extend(d policy.Instant) {
	for {
		cur := p.by.Load()
		if int64(d) <= cur || p.by.CompareAndSwap(cur, int64(d)) {
			return
		}
	}
}

// pending is the number of units whose stop systemd does not have yet.
func (p *pendingStop) pending() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.left)
}

// taken marks unit's stop as in systemd's hands (or done); once every
// unit's is, nothing is pending.
func (s *Supervisor) taken(p *pendingStop, unit string) {
	p.mu.Lock()
	delete(p.left, unit)
	done := len(p.left) == 0
	p.mu.Unlock()
	if done {
		s.stopping.CompareAndSwap(p, nil)
	}
}

// Handoff feeds a planned handoff (or a shutdown) to the machine. It
// returns once a step took it; what the step asked (the stop) goes on.
func (s *Supervisor) Handoff(ctx context.Context) {
	s.send(ctx, policy.Event{Kind: policy.HandoffRequested})
}

// HandoffTo is Handoff whose release offers the lease to node: it alone
// may take it at once, any node after the lease span.
func (s *Supervisor) HandoffTo(ctx context.Context, node string) {
	s.send(ctx, policy.Event{Kind: policy.HandoffRequested, To: node})
}

// lastWord turns a Withdraw or Compete, an Eligible or Ineligible, or a
// Defer into the state its setter holds now: each setter's event steps
// on a goroutine of its own, and two of them (a drain and an undrain,
// one whose caller gave up waiting) may reach the machine in either
// order. Whatever the order, the machine ends on the last word.
func (s *Supervisor) lastWord(ev policy.Event) policy.Event {
	switch ev.Kind {
	case policy.Withdraw, policy.Compete:
		ev.Kind = policy.Compete
		if s.withdrawn.Load() {
			ev.Kind = policy.Withdraw
		}
	case policy.Eligible, policy.Ineligible:
		ev.Kind = policy.Eligible
		if s.ineligible.Load() {
			ev.Kind = policy.Ineligible
		}
	case policy.Defer:
		ev.Delay = time.Duration(s.delay.Load())
	}
	return ev
}

// SetWithdrawn says whether this node stays out of the competition for
// the lease (drained, or the unit failed here too often): it acquires
// nothing, and what runs keeps running. Only a change reaches the
// machine.
func (s *Supervisor) SetWithdrawn(ctx context.Context, out bool) {
	if s.withdrawn.Swap(out) == out {
		return
	}
	kind := policy.Compete
	if out {
		kind = policy.Withdraw
	}
	s.send(ctx, policy.Event{Kind: kind})
}

// SetDelay makes the standby wait delay longer before it acquires (a
// more preferred node is ready); zero ends it.
func (s *Supervisor) SetDelay(ctx context.Context, delay time.Duration) {
	if time.Duration(s.delay.Swap(int64(delay))) == delay {
		return
	}
	s.send(ctx, policy.Event{Kind: policy.Defer, Delay: delay})
}

// Ineligible reports whether the last SetEligible said no.
func (s *Supervisor) Ineligible() bool { return s.ineligible.Load() }

// Withdrawn reports whether the node stays out of the competition.
func (s *Supervisor) Withdrawn() bool { return s.withdrawn.Load() }

// Unmanage is Handoff when the daemon stops managing the lease on this
// node (its annotation was removed, changed, or refused): the journal
// says "stopping (unmanaged)", not a handoff nobody asked for.
func (s *Supervisor) Unmanage(ctx context.Context) {
	s.send(ctx, policy.Event{Kind: policy.HandoffRequested, Cause: policy.CauseUnmanaged})
}

// Disable is Handoff when an operator disabled the lease cluster-wide:
// stop, confirm inactive, release, journalled "stopping (disabled)". The
// daemon withdraws the node from the lease too, so it takes it no more.
func (s *Supervisor) Disable(ctx context.Context) {
	s.send(ctx, policy.Event{Kind: policy.HandoffRequested, Cause: policy.CauseDisabled})
}

// SetEligible says whether this node may run the lease's units (a
// drop-in whose protections were defeated makes it ineligible): an
// ineligible node hands the lease off and acquires it no more until it
// is eligible again. Only a change reaches the machine; like every event,
// it is dropped before Start.
func (s *Supervisor) SetEligible(ctx context.Context, ok bool) {
	if s.ineligible.Swap(!ok) == !ok {
		return
	}
	kind := policy.Eligible
	if !ok {
		kind = policy.Ineligible
	}
	s.send(ctx, policy.Event{Kind: kind})
}

// SetEligibleSoon is SetEligible without an event of its own: it sets
// the flag and returns at once; the supervisor's next step of its own
// (its timer's tick, or an action's result) first steps the machine with
// it. Nothing is lost by the wait: a standby acquires only on an
// observation, and the tick that asks for the next one comes first. The
// first discovery makes a thousand leases eligible at once with it,
// without a goroutine each, and a supervisor whose step hangs holds
// none of the others back. A later SetEligible has the last word.
func (s *Supervisor) SetEligibleSoon(ok bool) {
	if s.ineligible.Swap(!ok) != !ok {
		s.eligibility.Store(true)
	}
}

// flushEligibility steps the machine with the eligibility that
// SetEligibleSoon set, if any.
func (s *Supervisor) flushEligibility() {
	if s.eligibility.Swap(false) {
		var out policy.Output
		if s.step(policy.Event{Kind: policy.Eligible}, &out) { // lastWord: the flag's
			s.carry(&out)
		}
	}
}

// UnitFailed reports that a unit failed or stopped behind the daemon's back.
func (s *Supervisor) UnitFailed(ctx context.Context) {
	s.send(ctx, policy.Event{Kind: policy.UnitFailed})
}

// send delivers ev on a goroutine of its own (the step's actions may
// take a while) and returns once the step took it, or ctx ended.
func (s *Supervisor) send(ctx context.Context, ev policy.Event) {
	taken := make(chan struct{})
	go func() {
		var out policy.Output
		ok := s.step(ev, &out)
		close(taken)
		if ok {
			s.carry(&out)
		}
	}()
	select {
	case <-taken:
	case <-ctx.Done():
	}
}
