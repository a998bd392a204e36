package daemon

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/unitlease/unitlease/internal/control"
	"github.com/unitlease/unitlease/internal/logging"
	"github.com/unitlease/unitlease/policy"
)

// Errors of a handoff.
var (
	ErrNotManaged = errors.New("not managed on this node")
	ErrNotHolder  = errors.New("this node does not hold the lease")
	ErrNoPeer     = errors.New("no peer is waiting")
	ErrStopFailed = errors.New("the stop failed")
)

// Handoff stops the target's units here, waits for inactive, releases,
// and returns once a peer holds the lease.
func (d *Daemon) Handoff(ctx context.Context, target string) (control.HandoffResult, error) {
	s, err := d.target(target)
	if err != nil {
		return control.HandoffResult{}, err
	}
	if st := s.Status(); !st.Holding {
		return control.HandoffResult{}, fmt.Errorf("lease %s: %w (it is %s here; holder %s)", s.Lease, ErrNotHolder, st.Role, orNone(st.Holder))
	}
	if n, err := d.store.Watchers(ctx, s.Lease); err != nil {
		return control.HandoffResult{}, err
	} else if n < 2 {
		return control.HandoffResult{}, fmt.Errorf("lease %s: %w: no other node's daemon manages it, so stopping here would leave it down", s.Lease, ErrNoPeer)
	}
	s.Handoff(ctx)
	t := d.cfg.Timing
	limit := t.StopWait + t.PollMax + 4*t.ReplyMax + time.Second
	wctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	var peer policy.Record
	done := d.waitFor(wctx, func() bool {
		if s.Status().Role == policy.StopFailed.String() {
			return true
		}
		var err error
		peer, err = d.store.Observe(wctx, s.Lease)
		return err == nil && peer.Present && !peer.Released && peer.Holder != d.cfg.Node
	})
	switch {
	case s.Status().Role == policy.StopFailed.String():
		return control.HandoffResult{}, fmt.Errorf("lease %s: %w: the units are not confirmed inactive, so the lease is not released", s.Lease, ErrStopFailed)
	case !done:
		return control.HandoffResult{}, fmt.Errorf("lease %s: released, but no peer took it within %v (this node is %s)", s.Lease, limit, s.Status().Role)
	}
	return control.HandoffResult{Lease: s.Lease, Holder: peer.Holder, Version: peer.Version}, nil
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// Guard admits a start of unit only while this node's supervisor of its
// lease is starting it.
// Over the control socket, the caller must run inside unit (the guard is
// its ExecStartPre=): no other process, a root one included, can have a
// start admitted, or learn more than that it was refused.
func (d *Daemon) Guard(ctx context.Context, unit string) error {
	if p, ok := control.PeerOf(ctx); ok {
		cg, err := d.sd.ControlGroup(ctx, unit)
		if err != nil || cg == "" || !control.InCgroup(p.PID, cg) {
			return fmt.Errorf("%s: the caller (pid %d) does not run in %s's cgroup %q: only the unit's own ExecStartPre= may ask", unit, p.PID, unit, cg)
		}
	}
	s := d.supervisorOf(unit) // a unit's name only: a lease may be named like another lease's unit
	if s == nil {
		return fmt.Errorf("%s: not managed by this node's unitlease daemon", unit)
	}
	st := s.Status()
	if st.Role == policy.Starting.String() && st.Holding {
		return nil
	}
	d.log.Warn(fmt.Sprintf("%s: start refused: this node is %s for lease %s (holder %s)", unit, st.Role, s.Lease, orNone(st.Holder)),
		logging.Event, "refused", logging.Unit, unit, logging.Lease, s.Lease, logging.Node, s.Node,
		logging.Holder, st.Holder, logging.Version, st.Version)
	return fmt.Errorf("%s: this node is %s for lease %s (holder %s), not starting it", unit, st.Role, s.Lease, orNone(st.Holder))
}
