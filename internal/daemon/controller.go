package daemon

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/unitlease/unitlease/internal/logging"
	"github.com/unitlease/unitlease/policy"
	"github.com/unitlease/unitlease/redislease"
)

// Snapshot is this node's supervisors and the leases in Redis.
func (d *Daemon) Snapshot(ctx context.Context) Snapshot {
	t := d.cfg.Timing
	snap := Snapshot{Node: d.cfg.Node, Timing: TimingSummary{LeaseSpan: t.LeaseSpan, Retry: t.Retry, RenewDeadline: t.RenewDeadline, StopWait: t.StopWait}}
	for _, s := range d.supervisors() {
		st := s.Status()
		st.UnitStates = d.unitStates(ctx, s.Units)
		snap.Leases = append(snap.Leases, st)
	}
	d.mu.Lock()
	snap.Errors = slices.Clone(d.problems)
	d.mu.Unlock()
	rows, err := ClusterView(ctx, d.store)
	if err != nil {
		snap.Errors = append(snap.Errors, err.Error())
	}
	snap.Cluster = rows
	return snap
}

func (d *Daemon) unitStates(ctx context.Context, units []string) []string {
	var states []string
	for _, u := range units {
		st, err := d.sd.ActiveState(ctx, u)
		if err != nil {
			st = "unknown"
		}
		states = append(states, st)
	}
	return states
}

// Lister is what ClusterView needs of the store.
type Lister interface {
	List(ctx context.Context) ([]redislease.Entry, error)
	Watchers(ctx context.Context, name string) (int, error)
}

// ClusterView lists every lease in Redis with its holder and how many
// daemons watch it.
func ClusterView(ctx context.Context, store Lister) ([]ClusterRow, error) {
	entries, err := store.List(ctx)
	if err != nil {
		return nil, err
	}
	var rows []ClusterRow
	for _, e := range entries {
		row := ClusterRow{Lease: e.Name, Holder: e.Record.Holder, Version: e.Record.Version, State: e.Record.State}
		switch {
		case e.Err != nil:
			row.State, row.Error = "garbage", e.Err.Error()
		case e.Absent:
			row.State = "missing"
		}
		row.Watchers, _ = store.Watchers(ctx, e.Name)
		rows = append(rows, row)
	}
	return rows, nil
}

// find returns the supervisor of a lease, or of the lease a unit belongs to.
func (d *Daemon) find(target string) *Supervisor {
	for _, s := range d.supervisors() {
		if s.Lease == target || slices.Contains(s.Units, target) {
			return s
		}
	}
	return nil
}

// Errors of a handoff.
var (
	ErrNotManaged = errors.New("not managed on this node")
	ErrNotHolder  = errors.New("this node does not hold the lease")
	ErrNoPeer     = errors.New("no peer is waiting")
	ErrStopFailed = errors.New("the stop failed")
)

// Handoff stops the target's units here, waits for inactive, releases,
// and returns once a peer holds the lease.
func (d *Daemon) Handoff(ctx context.Context, target string) (HandoffResult, error) {
	s := d.find(target)
	if s == nil {
		return HandoffResult{}, fmt.Errorf("%s: %w", target, ErrNotManaged)
	}
	if st := s.Status(); !st.Holding {
		return HandoffResult{}, fmt.Errorf("lease %s: %w (it is %s here; holder %s)", s.Lease, ErrNotHolder, st.Role, orNone(st.Holder))
	}
	if n, err := d.store.Watchers(ctx, s.Lease); err != nil {
		return HandoffResult{}, err
	} else if n < 2 {
		return HandoffResult{}, fmt.Errorf("lease %s: %w: no other node's daemon manages it, so stopping here would leave it down", s.Lease, ErrNoPeer)
	}
	s.Handoff(ctx)
	t := d.cfg.Timing
	limit := t.StopWait + t.PollMax + 4*t.ReplyMax + time.Second
	wctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	var peer redislease.Record
	done := d.waitFor(wctx, func() bool {
		if s.Status().Role == policy.StopFailed.String() {
			return true
		}
		o, err := d.store.Observe(wctx, s.Lease)
		peer = o.Record
		return err == nil && !o.Absent && peer.Held() && peer.Holder != d.cfg.Node
	})
	switch {
	case s.Status().Role == policy.StopFailed.String():
		return HandoffResult{}, fmt.Errorf("lease %s: %w: the units are not confirmed inactive, so the lease is not released", s.Lease, ErrStopFailed)
	case !done:
		return HandoffResult{}, fmt.Errorf("lease %s: released, but no peer took it within %v (this node is %s)", s.Lease, limit, s.Status().Role)
	}
	return HandoffResult{Lease: s.Lease, Holder: peer.Holder, Version: peer.Version}, nil
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// Guard admits a start of unit only while this node's supervisor of its
// lease is starting it.
func (d *Daemon) Guard(unit string) error {
	s := d.find(unit)
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
