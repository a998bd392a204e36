package unitctl

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
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
// and confirms only an empty cgroup.
//
// A failed stop is one systemd says so of: once stopWait has passed and
// the SIGKILL was delivered, a listing of the unit's cgroup still shows
// processes. Stop then returns a *JobError wrapping ErrStopFailed with the
// processes left. A systemd that is slow to answer (busy with thousands of
// jobs, or its bus hung) is no such answer: a read or a kill it does not
// answer in time is asked again, for as long as ctx lasts, and a unit it
// reports not yet stopped whose cgroup is empty is waited for. Any error
// means the stop is not confirmed and the caller must not release the
// lease; if ctx ends first the error wraps ctx's error. A stop job queued
// by someone else that replaces ours is answered with a new stop job. Lost
// connections and systemd re-executing are retried, never reported as a
// stop.
//
// A function set on ctx with OnQueued is called once systemd has the stop:
// the stop job is queued, or the unit was found stopped.
func (s *Systemd) Stop(ctx context.Context, unit string, stopWait time.Duration) error {
	s.setIntent(unit, intentStopped)
	return s.stop(ctx, unit, stopWait, func() {})
}

// StopQueued is Stop for a stop that no deadline bounds (a daemon's
// stops, at its start, of the units it does not hold): it returns at
// once, and done is called, on a goroutine of its own, with what Stop
// would have returned. A daemon that starts with thousands of leases
// stops every unit at once, nearly all of them stopped already: each
// such Stop waited on a goroutine of its own for its reads of the
// unit's state and cgroup, thousands parked at once (a peak of 200 MB
// at 5,000 leases), and the runtime keeps every goroutine's descriptor
// for good. A queued stop waits as an entry in a line until one of
// maxStopChecks places is free (after the queued stops that came before
// it), and holds its place only while it checks whether the unit is
// stopped already: a unit found running gives it back and is stopped
// at once, as by Stop, however many stops wait behind it. Its stop_wait
// counts from its turn. The unit is marked as stopped at once, as by
// Stop. A ctx that ends while it waits takes it out of the line, and
// done gets the *JobError of a Stop whose ctx ended.
func (s *Systemd) StopQueued(ctx context.Context, unit string, stopWait time.Duration, done func(error)) {
	s.setIntent(unit, intentStopped)
	s.checks.wait(ctx, func(sl *slot) {
		done(s.stop(ctx, unit, stopWait, sync.OnceFunc(sl.release)))
	}, func(err error) {
		done(&JobError{Unit: unit, Op: "stop", Err: ctx.Err(), Cause: err})
	})
}

// stop is Stop, the intent set; checked is called once it knows whether
// the unit was stopped already (StopQueued's place is given back then).
func (s *Systemd) stop(ctx context.Context, unit string, stopWait time.Duration, checked func()) error {
	w := s.watchers.add(unit)
	defer s.watchers.remove(w)
	begun := time.Now()
	st := &stopping{s: s, unit: unit, w: w, stopWait: stopWait,
		killAt: begun.Add(stopWait - KillMargin(stopWait)), failAt: begun.Add(stopWait)}
	// Already stopped with nothing queued and nothing left in its cgroup
	// (the common case when a daemon starts and stops every unit it does
	// not hold): no job to wait for. The intent is set and the watcher
	// added first, so a start that slips in afterwards is seen.
	already := st.stoppedAlready(ctx)
	checked()
	if already {
		queuedFrom(ctx)()
		return nil
	}
	err := st.run(ctx)
	st.forgetJob()
	if err == nil {
		if st.hit || st.sigkilled {
			killedFrom(ctx)()
		}
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
	stopWait  time.Duration
	job       <-chan string // result of the queued stop job; nil once it arrived
	forget    func()        // drops the wait for job's result
	jobResult string
	state     UnitState
	killAt    time.Time
	failAt    time.Time // stopWait after Stop began
	killed    bool      // SIGKILL was sent
	// hit: a SIGKILL was sent other than to a cgroup listed empty just
	// before. A SIGKILL at the kill time to a unit that a busy systemd
	// was slow to show stopped, its cgroup listed empty, hit nothing: the
	// stop needed no SIGKILL.
	hit  bool
	due  bool          // failAt has passed
	slow atomic.Bool   // a call systemd did not answer in time was logged
	left []UnitProcess // processes last seen in the unit's cgroup
	// killedAt is, for each process listed in the cgroup, when systemd
	// answered the first SIGKILL sent after it was listed. One still
	// listed KillMargin after that, once stopWait has passed, is a failed
	// stop: it survived a SIGKILL that had the time to end it.
	killedAt map[uint32]time.Time
	leftSeen bool // processes left in the stopped unit were logged
	// sigkilled: systemd was seen sending SIGKILL itself (a stop phase
	// ran out of its TimeoutStopSec=, SendSIGKILL=yes): a change or a
	// read showed the unit in stop-sigkill or final-sigkill.
	sigkilled bool
	recheck   time.Duration // the delay before the cgroup is listed again
}

func (st *stopping) run(ctx context.Context) error {
	if err := st.issue(ctx); err != nil {
		if stopped, ferr := st.issueFailed(ctx, err); !stopped && ferr != nil {
			return ferr
		}
	}
	if st.job != nil || st.state.Stopped() && st.state.JobID == 0 {
		queuedFrom(ctx)()
	}
	kill := time.NewTimer(time.Until(st.killAt))
	defer kill.Stop()
	fail := time.NewTimer(time.Until(st.failAt))
	defer fail.Stop()
	poll := st.s.ticker()
	defer poll.Stop()
	var recheck <-chan time.Time // armed while processes are left to be confirmed gone
	for {
		if err := st.refresh(ctx); err != nil {
			return err
		}
		again := false
		if st.state.Stopped() && st.state.JobID == 0 {
			empty, err := st.emptied(ctx)
			if err != nil {
				return err
			}
			if empty {
				return nil
			}
			again = true
		} else {
			st.leftSeen = false
			var err error
			if again, err = st.notStopped(ctx); err != nil {
				return err
			}
		}
		if st.failed() {
			return errProcessesLeft
		}
		if again {
			recheck = st.nextRecheck()
		} else {
			st.recheck, recheck = 0, nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case r := <-st.job:
			st.jobResult, st.job = r, nil
		case c := <-st.w.changes:
			st.note(c.sub)
			for len(st.w.changes) > 0 {
				st.note((<-st.w.changes).sub)
			}
		case <-st.w.resync:
		case <-poll.C:
		case <-recheck:
		case <-kill.C:
			// What runs now is listed first (from now on a call waits
			// for systemd's answer), so that the verdict at failAt,
			// KillMargin later, needs no further kill.
			st.killed = true
			left, err := st.processes(ctx)
			if err != nil {
				return err
			}
			st.kill(ctx, left != nil && len(left) == 0)
		case <-fail.C:
			st.due = true
		}
	}
}

// notStopped acts on a unit systemd does not report stopped: a stop job
// is queued when none is (ours ended, systemd did not take it in time, or
// its result was lost with a connection), and once stopWait has passed
// the cgroup is listed, and whatever is in it that no SIGKILL was sent
// since is sent one. again asks for another look soon (a recheck).
func (st *stopping) notStopped(ctx context.Context) (again bool, err error) {
	if st.job == nil || st.state.ActiveState != "" && st.state.JobType != "stop" {
		if err := st.issue(ctx); err != nil {
			if _, ferr := st.issueFailed(ctx, err); ferr != nil {
				return false, ferr
			}
		} else {
			queuedFrom(ctx)()
		}
	}
	if !st.due {
		return false, nil
	}
	left, err := st.processes(ctx)
	if err != nil || len(left) == 0 {
		return false, err // an empty cgroup: systemd has yet to say stopped
	}
	if st.unkilled() {
		st.kill(ctx, false)
	}
	return true, nil
}

// failed reports a failed stop: stopWait has passed and a process listed
// last survived a SIGKILL systemd answered KillMargin ago or more.
func (st *stopping) failed() bool {
	if !st.due {
		return false
	}
	margin := KillMargin(st.stopWait)
	for _, p := range st.left {
		if at, ok := st.killedAt[p.PID]; ok && time.Since(at) >= margin {
			return true
		}
	}
	return false
}

// unkilled reports whether a process listed last was sent no SIGKILL
// since it was first listed.
func (st *stopping) unkilled() bool {
	for _, p := range st.left {
		if _, ok := st.killedAt[p.PID]; !ok {
			return true
		}
	}
	return false
}

// errProcessesLeft is the cause of a failed stop that systemd answered.
var errProcessesLeft = errors.New("processes left in its cgroup survived SIGKILL, stop_wait over")

// unanswered logs, once per stop, that systemd did not answer a call in
// time: the stop goes on, and is not a failed one.
func (st *stopping) unanswered(what string) {
	if !st.slow.CompareAndSwap(false, true) {
		return
	}
	st.s.opts.Logf("unitctl: stopping %s: systemd has not answered %s within %v; still waiting (a busy systemd is not a failed stop)", st.unit, what, st.stopWait)
}

// emptied lists the processes left in the cgroup of the stopped unit. If
// there are any, systemd has given up on them (its stop, final SIGKILL
// included, is over), so emptied sends SIGKILL to the whole cgroup
// itself; the caller lists again shortly.
func (st *stopping) emptied(ctx context.Context) (bool, error) {
	left, err := st.processes(ctx)
	if err != nil || left == nil {
		return false, err
	}
	if len(left) == 0 {
		return true, nil
	}
	if !st.leftSeen {
		st.leftSeen = true
		st.s.opts.Logf("unitctl: %s is %s with %d process(es) left in its cgroup: %v; sending SIGKILL", st.unit, st.state, len(left), left)
	}
	st.kill(ctx, false)
	return false, nil
}

// processes lists the unit's cgroup: nil if systemd did not answer before
// the kill time (the loop kills, then asks again), else the processes,
// none as an empty slice.
func (st *stopping) processes(ctx context.Context) ([]UnitProcess, error) {
	rctx, done := st.callCtx(ctx, "the list of its processes")
	defer done()
	left, err := st.s.unitProcesses(rctx, st.unit)
	switch {
	case err == nil:
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case rctx.Err() != nil:
		return nil, nil
	default:
		return nil, err
	}
	if left == nil {
		left = []UnitProcess{}
	}
	st.left = left
	return left, nil
}

// callCtx bounds one call to systemd. Before the SIGKILL it gives up at
// the kill time, so that a hung systemd does not delay the kill. After
// it, the call waits for systemd's answer for as long as ctx lasts: one
// that took longer than stopWait is logged (unanswered), and one given up
// on would only leave its request in systemd's queue, to be asked again.
func (st *stopping) callCtx(ctx context.Context, what string) (context.Context, func()) {
	if !st.killed {
		return context.WithDeadline(ctx, st.killAt)
	}
	t := time.AfterFunc(st.stopWait, func() { st.unanswered(what) })
	return ctx, func() { t.Stop() }
}

// nextRecheck is when to list the cgroup again after a kill of what was
// left: no event says when it is empty. 10ms, doubling up to the poll
// interval.
func (st *stopping) nextRecheck() <-chan time.Time {
	st.recheck = min(max(2*st.recheck, 10*time.Millisecond), st.s.opts.PollInterval)
	return time.After(st.recheck)
}

// issue queues a stop job, whose result replaces the wait for an earlier
// one's.
func (st *stopping) issue(ctx context.Context) error {
	rctx, done := st.callCtx(ctx, "the stop job")
	defer done()
	sl, err := takeSlot(rctx, st.s.stopCalls, 1)
	var job <-chan string
	var forget func()
	if err == nil {
		job, forget, err = st.s.queueJob(rctx, st.unit, false, sl)
	}
	if err == nil {
		st.forgetJob()
		st.job, st.forget = job, forget
	}
	if err != nil && ctx.Err() == nil && rctx.Err() != nil {
		return errUnanswered
	}
	return err
}

// forgetJob drops the wait for the last stop job's result, if any.
func (st *stopping) forgetJob() {
	if st.forget != nil {
		st.forget()
		st.forget = nil
	}
}

// errUnanswered is a call systemd did not answer before the kill time.
var errUnanswered = errors.New("unitctl: systemd did not answer in time")

// issueFailed decides after systemd did not take the stop job. A call it
// did not answer before the kill time is asked again after it (no
// error). A unit it does not know (or cannot load) is stopped all the
// same, and the loop then confirms that its cgroup is empty. It returns
// whether the unit is stopped, and otherwise the error to return, if any.
func (st *stopping) issueFailed(ctx context.Context, err error) (bool, error) {
	if ctx.Err() != nil {
		return false, err
	}
	if errors.Is(err, errUnanswered) {
		return false, nil
	}
	if rerr := st.refresh(ctx); rerr != nil {
		return false, errors.Join(err, rerr)
	}
	if st.state.Stopped() && st.state.JobID == 0 {
		return true, nil
	}
	return false, err
}

// refresh re-reads the state (see callCtx for how long it waits). After
// the kill, a change of state that is not yet stopped gets another
// SIGKILL.
func (st *stopping) refresh(ctx context.Context) error {
	rctx, done := st.callCtx(ctx, "a read of its state")
	defer done()
	prev := st.state
	state, err := st.s.state(rctx, st.unit)
	switch {
	case err == nil:
		st.state = state
		st.note(state.SubState)
	case ctx.Err() != nil:
		return ctx.Err()
	case rctx.Err() != nil:
		return nil // kill time: the loop kills, then reads again
	default:
		return err
	}
	if st.killed && !state.Stopped() && state != prev {
		st.kill(ctx, false)
	}
	return nil
}

// kill sends SIGKILL to every process of the unit's cgroup, and notes
// when systemd answered for each process listed last. An error (no
// process left, for one) is not a result: the state decides. empty: the
// cgroup was listed empty just before (the SIGKILL hits nothing).
//
// The SIGKILL goes out with the target all-fail, to which systemd
// answers NoSuchProcess when it reached no process: whether it hit
// anything is decided at the kill itself, not by a list taken before it,
// which a start behind the daemon's back may have outdated. A systemd
// that refuses the target (older than 252) gets the plain kill (all),
// from then on, and an empty list taken just before decides.
func (st *stopping) kill(ctx context.Context, empty bool) {
	st.killed = true
	rctx, done := st.callCtx(ctx, "the SIGKILL")
	defer done()
	sl, err := takeSlot(rctx, st.s.killCalls, 1)
	var tries atomic.Int32 // a retry follows a call whose SIGKILL may have gone out
	if err == nil {
		err = st.s.detached(rctx, sl, func(callCtx context.Context, c *sd.Conn) error {
			tries.Add(1)
			return st.s.killAll(callCtx, c, st.unit)
		})
	}
	if ctx.Err() != nil || errors.Is(err, ErrClosed) {
		return
	}
	switch {
	case err == nil:
		st.hit = true
	case errors.Is(err, errKillMissed) && tries.Load() == 1:
		err = nil
	case errors.Is(err, errKillMissed), errors.Is(err, errKillUnsure):
		err = nil
		st.hit = st.hit || !empty
	default:
		st.hit = st.hit || !empty
	}
	if err != nil {
		st.s.opts.Logf("unitctl: SIGKILL to %s: %v", st.unit, err)
	}
	now := time.Now()
	if st.killedAt == nil {
		st.killedAt = map[uint32]time.Time{}
	}
	for _, p := range st.left {
		if _, ok := st.killedAt[p.PID]; !ok {
			st.killedAt[p.PID] = now
		}
	}
}

// errKillMissed: systemd answered the SIGKILL (all-fail) with
// NoSuchProcess: it reached no process of the unit.
var errKillMissed = errors.New("unitctl: the SIGKILL reached no process")

// errKillUnsure: the SIGKILL went out with the target all, whose answer
// does not say whether it reached a process.
var errKillUnsure = errors.New("unitctl: the SIGKILL went out; whether it reached a process is not known")

const (
	noSuchProcess = "org.freedesktop.systemd1.NoSuchProcess"
	invalidArgs   = "org.freedesktop.DBus.Error.InvalidArgs"
)

// killAll sends the SIGKILL to every process of unit's cgroup: nil if it
// reached one, errKillMissed if none, errKillUnsure if systemd does not
// say (see stopping.kill), or the call's error. Any answer to all-fail
// but "sent", NoSuchProcess, NoSuchUnit or a failed call is followed by
// the plain kill: a SIGKILL is never left out for a target refused.
func (s *Systemd) killAll(ctx context.Context, c *sd.Conn, unit string) error {
	if !s.noAllFail.Load() {
		err := c.KillUnitWithTarget(ctx, unit, sd.Who("all-fail"), s.killSignal)
		switch name := dbusErrorName(err); {
		case name == noSuchProcess:
			return errKillMissed
		case name == "" || name == noSuchUnit:
			return err // sent, not sent for want of the unit, or no answer
		case name == invalidArgs:
			s.noAllFail.Store(true) // a systemd older than 252: all from now on
		}
	}
	if err := c.KillUnitWithTarget(ctx, unit, sd.All, s.killSignal); err != nil {
		return err
	}
	return errKillUnsure
}

// note takes a SubState the unit was seen in during the stop.
func (st *stopping) note(sub string) {
	if sub == "stop-sigkill" || sub == "final-sigkill" {
		st.sigkilled = true
	}
}

// OnKilled returns a context on which a Stop that succeeds calls killed
// (before it returns) if SIGKILL was needed: Stop sent it while
// processes were listed in the unit's cgroup (or before it could list
// them), or systemd was seen sending it (a stop phase ran out of its
// time, and the unit was seen in stop-sigkill or final-sigkill). A
// SIGKILL sent at the kill time to a cgroup listed empty (a busy
// systemd that was slow to show a stopped unit stopped) does not count. A failed stop says so in its
// *JobError's Killed instead.
func OnKilled(ctx context.Context, killed func()) context.Context {
	return context.WithValue(ctx, killedKey{}, killed)
}

type killedKey struct{}

// killedFrom is the function set with OnKilled, or one that does nothing.
func killedFrom(ctx context.Context) func() {
	if f, _ := ctx.Value(killedKey{}).(func()); f != nil {
		return f
	}
	return func() {}
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
