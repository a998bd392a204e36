package unitctl

import (
	"context"
	"errors"
	"time"

	sd "github.com/coreos/go-systemd/v22/dbus"
)

// Stop stops unit and returns nil only once systemd reports it inactive or
// failed with no job queued and no process is left in its cgroup.
//
// It queues a stop job ("replace": it cancels a queued start), then waits
// on events, the job result and a periodic re-read. If the unit is not
// stopped KillMargin(stopWait) before stopWait runs out, it sends SIGKILL
// to the whole cgroup, and again whenever the unit moves on while still
// not stopped (an ExecStopPost= command is a new process). systemd reports
// a unit failed (or, after reset-failed, inactive) even when a process
// survived its final SIGKILL (a task in uninterruptible sleep); so once
// the unit is stopped, Stop lists what is left in its cgroup
// (GetUnitProcesses), sends SIGKILL to the whole cgroup while anything is,
// and confirms only an empty cgroup. If stopWait runs out without
// confirmation it returns a *JobError wrapping ErrStopFailed (with the
// processes left, if any). Any error means the stop is not confirmed and
// the caller must not release the lease; if ctx ends first the error wraps
// ctx's error. A stop job queued by someone else that replaces ours is
// answered with a new stop job. Lost connections and systemd re-executing
// are retried within stopWait, never reported as a stop.
//
// A function set on ctx with OnQueued is called once systemd has the stop:
// the stop job is queued, or the unit was found stopped.
func (s *Systemd) Stop(ctx context.Context, unit string, stopWait time.Duration) error {
	s.setIntent(unit, intentStopped)
	w := s.watchers.add(unit)
	defer s.watchers.remove(w)
	wctx, cancel := context.WithTimeout(ctx, stopWait)
	defer cancel()
	st := &stopping{s: s, unit: unit, w: w, killAt: time.Now().Add(stopWait - KillMargin(stopWait))}
	// Already stopped with nothing queued and nothing left in its cgroup
	// (the common case when a daemon starts and stops every unit it does
	// not hold): no job to wait for. The intent is set and the watcher
	// added first, so a start that slips in afterwards is seen.
	if st.stoppedAlready(wctx) {
		queuedFrom(ctx)()
		return nil
	}
	err := st.run(wctx)
	if err == nil {
		return nil
	}
	sentinel := ErrStopFailed
	if ctx.Err() != nil {
		sentinel = ctx.Err()
	}
	return &JobError{Unit: unit, Op: "stop", JobResult: st.jobResult, State: st.state, Killed: st.killed, Left: st.left, Err: sentinel, Cause: err}
}

// stoppedAlready reports whether the unit is stopped, with no job queued
// and an empty cgroup, before any job is issued. The reads give up at the
// kill time.
func (st *stopping) stoppedAlready(ctx context.Context) bool {
	rctx, cancel := context.WithDeadline(ctx, st.killAt)
	defer cancel()
	cur, err := st.s.state(rctx, st.unit)
	if err != nil || !cur.Stopped() || cur.JobID != 0 {
		return false
	}
	left, err := st.s.unitProcesses(rctx, st.unit)
	return err == nil && len(left) == 0
}

// stopping is one Stop in progress.
type stopping struct {
	s         *Systemd
	unit      string
	w         *watcher
	job       chan string // result of the queued stop job; nil once it arrived
	jobResult string
	state     UnitState
	killAt    time.Time
	killed    bool
	left      []UnitProcess // processes last seen in the cgroup of the stopped unit
	recheck   time.Duration // the delay before the cgroup is listed again
}

func (st *stopping) run(ctx context.Context) error {
	if err := st.issue(ctx); err != nil {
		if stopped, ferr := st.issueFailed(ctx, err); !stopped {
			return ferr
		}
	}
	queuedFrom(ctx)()
	kill := time.NewTimer(time.Until(st.killAt))
	defer kill.Stop()
	poll := st.s.ticker()
	defer poll.Stop()
	var recheck <-chan time.Time // armed while processes are left in the stopped unit
	for {
		if err := st.refresh(ctx); err != nil {
			return err
		}
		if st.state.Stopped() && st.state.JobID == 0 {
			empty, err := st.emptied(ctx)
			if err != nil {
				return err
			}
			if empty {
				return nil
			}
			recheck = st.nextRecheck()
		} else {
			st.left, st.recheck, recheck = nil, 0, nil
			if st.job == nil { // our job ended, yet the unit runs or a start is queued
				if err := st.issue(ctx); err != nil {
					return err
				}
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case r := <-st.job:
			st.jobResult, st.job = r, nil
		case <-st.w.changes:
			drain(st.w.changes)
		case <-st.w.resync:
		case <-poll.C:
		case <-recheck:
		case <-kill.C:
			st.kill(ctx)
		}
	}
}

// emptied lists the processes left in the cgroup of the stopped unit. If
// there are any, systemd has given up on them (its stop, final SIGKILL
// included, is over), so emptied sends SIGKILL to the whole cgroup
// itself; the caller lists again shortly. Before the kill time the read
// gives up at the kill time, as refresh's does.
func (st *stopping) emptied(ctx context.Context) (bool, error) {
	rctx := ctx
	if !st.killed {
		var cancel context.CancelFunc
		rctx, cancel = context.WithDeadline(ctx, st.killAt)
		defer cancel()
	}
	left, err := st.s.unitProcesses(rctx, st.unit)
	switch {
	case err == nil:
	case ctx.Err() != nil:
		return false, ctx.Err()
	case rctx.Err() != nil:
		return false, nil // kill time: the loop kills, then reads again
	default:
		return false, err
	}
	if len(left) == 0 {
		return true, nil
	}
	if len(st.left) == 0 {
		st.s.opts.Logf("unitctl: %s is %s with %d process(es) left in its cgroup: %v; sending SIGKILL", st.unit, st.state, len(left), left)
	}
	st.left = left
	st.kill(ctx)
	return false, nil
}

// nextRecheck is when to list the cgroup again after a kill of what was
// left: no event says when it is empty. 10ms, doubling up to the poll
// interval.
func (st *stopping) nextRecheck() <-chan time.Time {
	st.recheck = min(max(2*st.recheck, 10*time.Millisecond), st.s.opts.PollInterval)
	return time.After(st.recheck)
}

// issue queues a stop job. Its result channel is buffered: go-systemd
// blocks every signal of the connection until a result is taken.
func (st *stopping) issue(ctx context.Context) error {
	job := make(chan string, 1)
	err := st.s.with(ctx, func(c *sd.Conn) error {
		_, err := c.StopUnitContext(ctx, st.unit, "replace", job)
		return err
	})
	if err == nil {
		st.job = job
	}
	return err
}

// issueFailed decides after systemd refused the stop job: a unit it does
// not know (or cannot load) is stopped all the same, and the loop then
// confirms that its cgroup is empty. It returns whether the unit is
// stopped, and otherwise the error to return.
func (st *stopping) issueFailed(ctx context.Context, err error) (bool, error) {
	if ctx.Err() != nil {
		return false, err
	}
	if rerr := st.refresh(ctx); rerr != nil {
		return false, errors.Join(err, rerr)
	}
	if st.state.Stopped() && st.state.JobID == 0 {
		return true, nil
	}
	return false, err
}

// refresh re-reads the state. Before the kill, the read gives up at the
// kill time, so that a hung systemd does not delay the SIGKILL; the loop
// then sends it. After the kill, a change of state that is not yet
// stopped gets another SIGKILL.
func (st *stopping) refresh(ctx context.Context) error {
	rctx := ctx
	if !st.killed {
		var cancel context.CancelFunc
		rctx, cancel = context.WithDeadline(ctx, st.killAt)
		defer cancel()
	}
	prev := st.state
	state, err := st.s.state(rctx, st.unit)
	switch {
	case err == nil:
		st.state = state
	case ctx.Err() != nil:
		return ctx.Err()
	case rctx.Err() != nil:
		return nil // kill time: the loop kills, then reads again
	default:
		return err
	}
	if st.killed && !state.Stopped() && state != prev {
		st.kill(ctx)
	}
	return nil
}

// kill sends SIGKILL to every process of the unit's cgroup. An error (no
// process left, for one) is not a result: the state decides.
func (st *stopping) kill(ctx context.Context) {
	st.killed = true
	err := st.s.with(ctx, func(c *sd.Conn) error {
		return c.KillUnitWithTarget(ctx, st.unit, sd.All, st.s.killSignal)
	})
	if err != nil {
		st.s.opts.Logf("unitctl: SIGKILL to %s: %v", st.unit, err)
	}
}

// OnQueued returns a context on which Stop calls queued once systemd has
// the stop (its job is queued, or the unit was found stopped): from then
// on systemd carries the stop out within the unit's stop timeouts even if
// the caller dies. A caller that must account for the time systemd takes
// to accept a stop (a watchdog) uses it.
func OnQueued(ctx context.Context, queued func()) context.Context {
	return context.WithValue(ctx, queuedKey{}, queued)
}

type queuedKey struct{}

// queuedFrom is the function set with OnQueued, or one that does nothing.
func queuedFrom(ctx context.Context) func() {
	if f, _ := ctx.Value(queuedKey{}).(func()); f != nil {
		return f
	}
	return func() {}
}

// drain empties ch without blocking.
func drain[T any](ch <-chan T) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}
