package supervisor

import (
	"context"
	"errors"
	"strconv"
	"sync"

	"github.com/unitlease/unitlease/internal/logging"
	"github.com/unitlease/unitlease/policy"
	"github.com/unitlease/unitlease/redislease"
)

// execute carries out one action and returns the one event that answers
// it (false: an action it does not know, which no event answers).
func (s *Supervisor) execute(a policy.Action) (policy.Event, bool) {
	ctx := s.ctx
	var ev policy.Event
	switch a.Kind {
	case policy.Observe:
		ev = s.request(a, func() policy.Event { return s.observe(ctx) })
	case policy.Acquire:
		ev = s.request(a, func() policy.Event { return s.acquire(ctx, a.Record) })
	case policy.Renew:
		ev = s.request(a, func() policy.Event { return s.renew(ctx, a.Record) })
	case policy.Release:
		ev = s.request(a, func() policy.Event { return s.release(ctx, a.Record) })
	case policy.StartUnit:
		ev = s.start(ctx, Env{Lease: s.Lease, Node: s.Node, Token: a.Token})
		ev.Token = a.Token // the tenure it answers
	case policy.StopUnit:
		ev = s.stop(ctx)
	default:
		return ev, false
	}
	return ev, true
}

func (s *Supervisor) observe(ctx context.Context) policy.Event {
	var rec policy.Record
	var err error
	if b, ok := s.store.(UnitRecords); ok {
		rec, err = b.ObserveUnits(ctx, s.Lease, s.Units)
	} else {
		rec, err = s.store.Observe(ctx, s.Lease)
	}
	if err != nil {
		s.reportGarbage(err)
		return policy.Event{Kind: policy.ObserveFailed}
	}
	s.reportElsewhere(rec)
	return policy.Event{Kind: policy.Observed, Record: rec}
}

func (s *Supervisor) acquire(ctx context.Context, seen policy.Record) policy.Event {
	var rec policy.Record
	var err error
	if b, ok := s.store.(UnitRecords); ok {
		rec, err = b.AcquireUnits(ctx, s.Lease, s.Units, seen)
	} else {
		rec, err = s.store.Acquire(ctx, s.Lease, seen)
	}
	var claimed *redislease.ClaimedError
	switch {
	case err == nil:
		if s.reported != nil {
			s.reported.elsewhere = "" // the units are this lease's now
		}
		return policy.Event{Kind: policy.AcquireOK, Record: rec}
	case errors.Is(err, redislease.ErrUnknown):
		return policy.Event{Kind: policy.AcquireUnknown}
	case errors.As(err, &claimed):
		s.reportClaimed(claimed)
	case errors.Is(err, redislease.ErrGarbage):
		s.reportGarbage(err)
	}
	return policy.Event{Kind: policy.AcquireLost}
}

func (s *Supervisor) renew(ctx context.Context, held policy.Record) policy.Event {
	var rec policy.Record
	var err error
	if b, ok := s.store.(UnitRecords); ok {
		rec, err = b.RenewUnits(ctx, s.Lease, s.Units, held)
	} else {
		rec, err = s.store.Renew(ctx, s.Lease, held)
	}
	var lost *redislease.LostError
	var garbage *redislease.GarbageError
	switch {
	case err == nil:
		return policy.Event{Kind: policy.RenewOK, Record: rec}
	case rec.Present && errors.As(err, &garbage):
		// Renewed; a unit key held garbage and was left alone.
		s.reportGarbage(err)
		return policy.Event{Kind: policy.RenewOK, Record: rec}
	case errors.As(err, &lost):
		return policy.Event{Kind: policy.RenewLost, Record: lost.Current}
	case errors.Is(err, redislease.ErrMissing):
		return policy.Event{Kind: policy.RenewMissing}
	case errors.As(err, &garbage):
		// Not ours any more, whatever it is: as definitive as a loss.
		return policy.Event{Kind: policy.RenewLost, Record: policy.Record{Present: true, Raw: garbage.Value}}
	}
	return policy.Event{Kind: policy.RenewFailed}
}

func (s *Supervisor) release(ctx context.Context, held policy.Record) policy.Event {
	// A release runs on its own bounded context: it must be tried even
	// while the daemon shuts down (STYLE.md 5).
	ctx = context.WithoutCancel(ctx)
	var rec policy.Record
	var err error
	if b, ok := s.store.(UnitRecords); ok {
		rec, err = b.ReleaseUnits(ctx, s.Lease, s.Units, held)
	} else {
		rec, err = s.store.Release(ctx, s.Lease, held)
	}
	if rec.Present && errors.Is(err, redislease.ErrGarbage) {
		s.reportGarbage(err) // released; a unit key held garbage and was left alone
		err = nil
	}
	if err != nil {
		var lost *redislease.LostError
		if errors.As(err, &lost) && lost.Current.Extends(held) {
			// This node's own later record (a renewal whose reply was
			// lost): no failure, the policy releases that one.
			s.logger().Info("release: the record is this node's own renewal at version " + strconv.FormatUint(lost.Current.Version, 10) + ", whose reply was lost: releasing it")
			return policy.Event{Kind: policy.ReleaseLost, Record: lost.Current}
		}
		s.logger().Warn("release failed: "+err.Error(), "UNITLEASE_EVENT", "release_failed")
		if lost != nil {
			// What the key holds: another's, or released.
			return policy.Event{Kind: policy.ReleaseLost, Record: lost.Current}
		}
		if errors.Is(err, redislease.ErrLost) || errors.Is(err, redislease.ErrMissing) || errors.Is(err, redislease.ErrGarbage) {
			return policy.Event{Kind: policy.ReleaseLost}
		}
		return policy.Event{Kind: policy.ReleaseFailed}
	}
	return policy.Event{Kind: policy.ReleaseOK, Record: rec}
}

// start starts the units one by one in systemd's order (each start is a
// job of its own, which After= would not order); the first failure ends
// it.
func (s *Supervisor) start(ctx context.Context, env Env) policy.Event {
	order, err := s.units.StartOrder(ctx, s.Units)
	if err != nil {
		s.logger().Warn("reading the units' order: "+err.Error()+"; starting them by name", "UNITLEASE_EVENT", "unit_warning")
	}
	for _, u := range order {
		if ctx.Err() != nil {
			// The supervisor ended (a shutdown out of time): the units
			// left are not started, and no step takes the result.
			return policy.Event{Kind: policy.UnitStartFailed}
		}
		if ev := s.startResult(u, s.units.Start(ctx, u, env)); ev.Kind != policy.UnitStarted {
			return ev
		}
	}
	return policy.Event{Kind: policy.UnitStarted}
}

// startResult is the event of one unit's start that ended with err, which
// it journals.
func (s *Supervisor) startResult(unit string, err error) policy.Event {
	if err != nil {
		s.logger().Error("starting "+unit+" failed: "+err.Error(), "UNITLEASE_UNIT", unit, "UNITLEASE_EVENT", "start_failed")
		return policy.Event{Kind: policy.UnitStartFailed}
	}
	return policy.Event{Kind: policy.UnitStarted}
}

// startQueued carries out a StartUnit through QueuedUnits, and reports
// whether it did: for a lease of one unit (most are) whose Units queue
// starts, the start waits for its turn with no goroutine of its own, and
// its result is stepped, and what that step asks carried out, on the
// goroutine done is called on, as the job's goroutine would have. A
// lease of several units starts them one by one in systemd's order on a
// goroutine, as start does; so does a supervisor already ended.
func (s *Supervisor) startQueued(a policy.Action) bool {
	q, ok := s.units.(QueuedUnits)
	if !ok || len(s.Units) != 1 || s.ctx.Err() != nil {
		return false
	}
	unit := s.Units[0]
	q.StartQueued(s.ctx, unit, Env{Lease: s.Lease, Node: s.Node, Token: a.Token}, func(err error) {
		ev := s.startResult(unit, err)
		ev.Token = a.Token // the tenure it answers
		var next policy.Output
		if s.step(ev, &next) {
			s.carry(&next)
		}
	})
	return true
}

// stopQueued carries out a StopUnit through QueuedStops, and reports
// whether it did: for a lease of one unit whose Units queue stops, a
// stop that no deadline bounds (By zero, and no stop due by one still
// pending: the startup's, rule 6, or one tried again after a failed
// one) waits for its turn with no goroutine of its own, and its result
// is stepped, and what that step asks carried out, on the goroutine
// done is called on. A stop due by a deadline never waits in a line:
// it goes to systemd at once (stop), and the watchdog watches that it
// does.
func (s *Supervisor) stopQueued(a policy.Action) bool {
	q, ok := s.units.(QueuedStops)
	if !ok || len(s.Units) != 1 || a.By != 0 || s.stopping.Load() != nil {
		return false
	}
	unit := s.Units[0]
	// As stop: never abandoned half way, whether or not s ends.
	q.StopQueued(context.WithoutCancel(s.ctx), unit, func(killed bool, err error) {
		ev := policy.Event{Kind: policy.UnitStopped, Killed: killed}
		if err != nil {
			s.stopFailed(unit, err)
			ev = policy.Event{Kind: policy.UnitStopFailed}
		}
		var next policy.Output
		if s.step(ev, &next) {
			s.carry(&next)
		}
	})
	return true
}

// stopFailed journals a unit's stop that ended with err.
func (s *Supervisor) stopFailed(unit string, err error) {
	s.logger().Error("stopping "+unit+" failed: "+err.Error(), "UNITLEASE_UNIT", unit, "UNITLEASE_EVENT", "stop_failed")
}

// stop stops every unit of the lease at once, each within stop_wait, and
// reports stopped only when all are confirmed inactive. It ignores ctx's
// end: a stop is never abandoned half way.
func (s *Supervisor) stop(ctx context.Context) policy.Event {
	ctx = context.WithoutCancel(ctx)
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		killed bool
		failed bool
	)
	// The stop due by a deadline that step marked pending; a stop tried
	// again after a failed one (by == 0) adopts what is still pending.
	p := s.stopping.Load()
	stopOne := func(u string) {
		var queued func()
		if p != nil {
			queued = func() { s.taken(p, u) }
		}
		k, err := s.units.Stop(ctx, u, queued)
		if err == nil && queued != nil {
			queued() // stopped, whether or not it said when systemd had it
		}
		mu.Lock()
		defer mu.Unlock()
		killed = killed || k
		if err != nil {
			failed = true
			s.stopFailed(u, err)
		}
	}
	// The last unit's stop runs on this goroutine: a lease of one unit
	// (most are) stops with no goroutine of its own, and a daemon
	// starting with thousands of leases, which stops every unit at once
	// (rule 6), does not park twice as many goroutines as it has leases
	// (the runtime keeps each goroutine's descriptor for good).
	last := len(s.Units) - 1
	for _, u := range s.Units[:max(last, 0)] {
		wg.Go(func() { stopOne(u) })
	}
	if last >= 0 {
		stopOne(s.Units[last])
	}
	wg.Wait()
	if failed {
		return policy.Event{Kind: policy.UnitStopFailed}
	}
	return policy.Event{Kind: policy.UnitStopped, Killed: killed}
}

// StartedBehind reacts to a unit that became active though this node does
// not run it: the guard should have made that impossible, so it is stopped
// and logged as refused. A unit the policy is starting or running is left
// alone.
func (s *Supervisor) StartedBehind(ctx context.Context, unit string) {
	st := s.Status()
	if st.Holding {
		return
	}
	s.logger().Warn(unit+": started although this node does not hold lease "+s.Lease+": stopping it",
		logging.Event, "refused", logging.Unit, unit, logging.Holder, st.Holder, logging.Version, st.Version)
	if _, err := s.units.Stop(context.WithoutCancel(ctx), unit, nil); err != nil {
		s.logger().Error(unit+": stopping it failed: "+err.Error(), logging.Event, "stop_failed", logging.Unit, unit)
	}
}
