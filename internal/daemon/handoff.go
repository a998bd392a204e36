package daemon

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/unitlease/unitlease/internal/control"
	"github.com/unitlease/unitlease/internal/logging"
	"github.com/unitlease/unitlease/internal/supervisor"
	"github.com/unitlease/unitlease/policy"
	"github.com/unitlease/unitlease/redislease"
)

// Errors of a handoff.
var (
	ErrNotManaged = errors.New("not managed on this node")
	ErrNotHolder  = errors.New("this node does not hold the lease")
	ErrNoPeer     = errors.New("no peer is ready")
	ErrStopFailed = errors.New("the stop failed")
	ErrNotReady   = errors.New("that node is not ready to take it")
)

// Handoff stops the target's units here, waits for inactive, releases,
// and returns once a peer holds the lease. With to, the release offers
// the lease to that node, which must announce itself ready for it: it
// alone may take it at once, any node once the lease span passed.
func (d *Daemon) Handoff(ctx context.Context, target, to string) (control.HandoffResult, error) {
	s, err := d.target(target)
	if err != nil {
		return control.HandoffResult{}, err
	}
	if st := s.Status(); !st.Holding {
		return control.HandoffResult{}, fmt.Errorf("lease %s: %w (it is %s here; holder %s)", s.Lease, ErrNotHolder, st.Role, orNone(st.Holder))
	}
	if to != "" {
		if err := d.readyFor(ctx, s.Lease, to); err != nil {
			return control.HandoffResult{}, err
		}
	} else if peers, err := d.readyPeers(ctx, s.Lease); err != nil {
		return control.HandoffResult{}, err
	} else if len(peers) == 0 {
		return control.HandoffResult{}, fmt.Errorf("lease %s: %w: no other node announces itself ready to take it, so stopping here would leave it down", s.Lease, ErrNoPeer)
	}
	return d.handOver(ctx, s, to)
}

// handOver hands s's lease off (offered to to, if not "") and waits
// until a peer holds it.
func (d *Daemon) handOver(ctx context.Context, s *supervisor.Supervisor, to string) (control.HandoffResult, error) {
	if to == "" {
		s.Handoff(ctx)
	} else {
		s.HandoffTo(ctx, to)
	}
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
	case !done && to != "":
		return control.HandoffResult{}, fmt.Errorf("lease %s: released to %s, but it did not take it within %v; any node may take it once the lease span (%v) passed (this node is %s)",
			s.Lease, to, limit, t.LeaseSpan, s.Status().Role)
	case !done:
		return control.HandoffResult{}, fmt.Errorf("lease %s: released, but no peer took it within %v (this node is %s)", s.Lease, limit, s.Status().Role)
	}
	return control.HandoffResult{Lease: s.Lease, Holder: peer.Holder, Version: peer.Version}, nil
}

// readyFor checks that node announces itself ready for lease, and says
// why not.
func (d *Daemon) readyFor(ctx context.Context, lease, node string) error {
	if node == d.cfg.Node {
		return fmt.Errorf("lease %s: %s is this node", lease, node)
	}
	if err := redislease.ValidNode(node); err != nil {
		return fmt.Errorf("lease %s: --to: %w", lease, err)
	}
	state, err := d.store.Announced(ctx, lease, node)
	if err != nil {
		return err
	}
	why := ""
	switch state {
	case redislease.AnnounceReady:
		return nil
	case "":
		why = "it does not watch the lease (its daemon is not running, or the lease is not annotated there)"
	case redislease.AnnounceDrained:
		why = "it is drained (unitlease undrain on it ends that)"
	case redislease.AnnounceExcluded:
		why = "the unit failed there too often lately (unitlease clear " + lease + " lets it compete again)"
	case redislease.AnnounceDisabled:
		why = "the lease is disabled (unitlease enable " + lease + " ends that)"
	case redislease.AnnounceIneligible:
		why = "it cannot run the unit: a drop-in is defeated or a unit refused there (unitlease status on it says which)"
	default:
		why = "it announces " + state
	}
	return fmt.Errorf("lease %s: %w: %s: %s", lease, ErrNotReady, node, why)
}

// readyPeers are the other nodes that announce themselves ready for
// lease. With an ACL that cannot list announcements, a count of the
// daemons watching it stands in (one name per other watcher, unknown).
func (d *Daemon) readyPeers(ctx context.Context, lease string) ([]string, error) {
	as, err := d.store.Announcements(ctx)
	if err != nil {
		n, werr := d.store.Watchers(ctx, lease)
		if werr != nil {
			return nil, werr
		}
		return slices.Repeat([]string{"?"}, max(0, n-1)), nil
	}
	var peers []string
	for _, a := range as {
		if a.Lease == lease && a.State == redislease.AnnounceReady && a.Node != d.cfg.Node {
			peers = append(peers, a.Node)
		}
	}
	return peers, nil
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
	if p, ok := control.PeerOf(ctx); ok && !control.InUnitCgroup(p.PID, unit) {
		// Not where systemd puts a system unit's processes: ask systemd
		// where the unit's are (a busy systemd answers late, so the
		// common case above does without).
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
