package unitctl

import (
	"context"
	"errors"
	"sync"
	"time"

	sd "github.com/coreos/go-systemd/v22/dbus"
)

// Start starts unit and returns nil once systemd reports it active (or
// reloading) with our start job finished: its job result arrived as
// "done", or, as a backstop for a JobRemoved that never comes
// (coreos/fleet#903), a re-read shows it active with no job queued.
//
// A job result other than "done", or a unit left inactive or failed, is a
// *JobError wrapping ErrStartFailed with the job result, the state and the
// service's Result=. Start has no deadline of its own: bound it with ctx.
// If ctx ends first the start job goes on in systemd; stop the unit to be
// sure it is not running. Lost connections and systemd re-executing are
// retried, never reported as a result.
//
// A unit that hit its start rate limit (StartLimitBurst=, Result
// start-limit-hit) has its failed state reset and is started once more:
// starts refused by the guard on a node without the lease count against
// that limit, and must not keep the node that acquired it from starting.
func (s *Systemd) Start(ctx context.Context, unit string) error {
	// Until Start returns, a watch reads the unit's inactive or
	// activating states as the start on its way, not a stop behind our
	// back: with many starts queued, a unit waits a while for its job.
	s.setIntent(unit, intentStarting)
	err := s.start(ctx, unit, nil)
	if err == nil {
		s.setIntent(unit, intentRunning)
	}
	return err
}

// StartQueued is Start for a caller that does not wait for the start's
// turn on a goroutine of its own: it returns at once, and done is
// called, on a goroutine of its own, with what Start would have
// returned. Until its turn comes (a place among the maxStarts, after the
// starts, queued or not, that came before it) the start is an entry in
// a line, not a parked goroutine; a ctx that ends meanwhile takes it out of the line, and
// done gets the *JobError of a Start whose ctx ended while it waited.
// The unit is marked as starting at once, as by Start.
func (s *Systemd) StartQueued(ctx context.Context, unit string, done func(error)) {
	s.setIntent(unit, intentStarting)
	s.starts.wait(ctx, func(sl *slot) {
		err := s.start(ctx, unit, sl)
		if err == nil {
			s.setIntent(unit, intentRunning)
		}
		done(err)
	}, func(err error) {
		done(&JobError{Unit: unit, Op: "start", Err: ctx.Err(), Cause: err})
	})
}

// start starts unit; sl, if not nil, is the place its first start call
// holds already (StartQueued's turn), else it waits for one.
func (s *Systemd) start(ctx context.Context, unit string, sl *slot) error {
	w := s.watchers.add(unit)
	defer s.watchers.remove(w)
	err := s.startOnce(ctx, unit, w, sl)
	var je *JobError
	if errors.As(err, &je) && je.Result == "start-limit-hit" {
		s.opts.Logf("unitctl: %s hit its start rate limit; resetting it and starting once more", unit)
		if rerr := s.with(ctx, func(c *sd.Conn) error { return c.ResetFailedUnitContext(ctx, unit) }); rerr != nil {
			return err
		}
		err = s.startOnce(ctx, unit, w, nil)
	}
	return err
}

func (s *Systemd) startOnce(ctx context.Context, unit string, w *watcher, sl *slot) error {
	st := &starting{s: s, unit: unit, w: w}
	done, err := st.run(ctx, sl)
	if done {
		return nil
	}
	je := &JobError{Unit: unit, Op: "start", JobResult: st.jobResult, State: st.state, Err: ErrStartFailed, Cause: err}
	if ctx.Err() != nil {
		je.Err = ctx.Err()
		return je
	}
	je.Result = s.serviceResult(ctx, unit)
	return je
}

// starting is one Start in progress.
type starting struct {
	s         *Systemd
	unit      string
	w         *watcher
	job       <-chan string
	jobResult string
	state     UnitState
}

// run reports whether the unit started; an error says why waiting ended
// otherwise (nil when systemd answered with failure). sl, if not nil, is
// its place, taken for it; else it waits for one.
func (st *starting) run(ctx context.Context, sl *slot) (bool, error) {
	if sl == nil {
		var err error
		sl, err = st.s.starts.take(ctx) // for this start's hold, and its call's
		if err != nil {
			return false, err
		}
	}
	release := sync.OnceFunc(sl.release)
	defer release()
	hold := time.NewTimer(startSlotHold)
	defer hold.Stop()
	job, forget, err := st.s.queueJob(ctx, st.unit, true, sl)
	if err != nil {
		return false, err
	}
	defer forget()
	st.job = job
	poll := st.s.ticker()
	defer poll.Stop()
	for read := true; ; {
		if read {
			st.state, err = st.s.state(ctx, st.unit)
			if err != nil {
				return false, err
			}
			if ok, over := st.outcome(); over {
				if !ok {
					st.awaitJobResult(ctx)
				}
				return ok, nil
			}
		}
		read = true
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case r := <-st.job:
			st.jobResult = r
			release()
		case <-hold.C:
			release()
		case c := <-st.w.changes:
			queued := allShowJob(st.w.changes) // takes them all, as one wake
			read = !queued || !showsJob(c)
		case <-st.w.resync:
		case <-poll.C:
		}
	}
}

// showsJob reports whether a change of the unit shows a job queued for
// it (systemd sends the Unit interface's Job with every change, as (id,
// path), id 0 for none). Until the job result comes, such a state can
// only mean "still queued" (outcome), however old the change: a start
// reads the state again only for a change that shows none, or lacks the
// property. A unit with a process before its main one (the guard) sees
// three changes with the job queued in every start, and systemd answered
// a ListUnitsByNames for each.
func showsJob(c change) bool { return c.job == jobQueued }

// allShowJob takes the changes queued in ch and reports whether each
// shows a job queued (showsJob).
func allShowJob(ch <-chan change) bool {
	all := true
	for {
		select {
		case c := <-ch:
			all = all && showsJob(c)
		default:
			return all
		}
	}
}

// outcome decides from the job result (if it arrived) and the state just
// read.
func (st *starting) outcome() (started, over bool) {
	switch {
	case st.jobResult == "done":
		return st.state.Running(), true
	case st.jobResult != "":
		return false, true
	case st.state.JobID != 0:
		return false, false // our job (or one that replaced it) is still queued
	case st.state.Running():
		return true, true
	case st.state.Stopped():
		return false, true // the job ended and its result was lost
	}
	return false, false
}

// jobResultGrace bounds the wait for the result of a job that systemd has
// already removed, for the error message.
const jobResultGrace = 250 * time.Millisecond

// awaitJobResult waits briefly for the job result after the state showed
// the job gone: JobRemoved was sent before that answer, on the other
// connection.
func (st *starting) awaitJobResult(ctx context.Context) {
	if st.jobResult != "" {
		return
	}
	t := time.NewTimer(jobResultGrace)
	defer t.Stop()
	select {
	case st.jobResult = <-st.job:
	case <-t.C:
	case <-ctx.Done():
	}
}
