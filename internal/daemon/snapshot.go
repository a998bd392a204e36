package daemon

import (
	"context"
	"slices"
	"time"

	"github.com/unitlease/unitlease/internal/control"
	"github.com/unitlease/unitlease/internal/supervisor"
	"github.com/unitlease/unitlease/redislease"
)

// Snapshot is this node's supervisors and the leases in Redis.
func (d *Daemon) Snapshot(ctx context.Context) control.Snapshot {
	t := d.cfg.Timing
	snap := control.Snapshot{Schema: control.Schema, Node: d.cfg.Node, Timing: control.TimingSummary{LeaseSpan: t.LeaseSpan, Retry: t.Retry, RenewDeadline: t.RenewDeadline, StopWait: t.StopWait}}
	for _, s := range d.supervisors() {
		l := leaseStatus(s.Status(), d.unitStates(ctx, s.Units))
		l.Failures, l.Excluded = d.failCount(s.Lease), d.excluded(s.Lease)
		snap.Leases = append(snap.Leases, l)
	}
	d.mu.Lock()
	snap.Errors = slices.Clone(d.problems)
	snap.Problems = slices.Clone(d.unitProblems)
	d.mu.Unlock()
	rows, err := ClusterView(ctx, d.store)
	if err != nil {
		snap.Errors = append(snap.Errors, err.Error())
	}
	snap.Cluster = rows
	snap.Drained = d.drained.Load()
	if as, err := d.store.Announcements(ctx); err != nil {
		snap.Errors = append(snap.Errors, err.Error())
	} else {
		snap.DrainedNodes = withAnnouncements(snap.Cluster, as)
	}
	d.withHistory(ctx, &snap)
	if ds, err := d.store.DisabledLeases(ctx); err != nil {
		snap.Errors = append(snap.Errors, err.Error())
	} else {
		for _, x := range ds {
			snap.DisabledLeases = append(snap.DisabledLeases, control.DisabledLease{Lease: x.Lease, By: x.By, At: x.At})
		}
	}
	return snap
}

// withAnnouncements adds to each row what every node announces of its
// lease, and returns the nodes that announce themselves drained.
func withAnnouncements(rows []control.ClusterRow, as []redislease.Announcement) (drained []string) {
	at := map[string]int{}
	for i, r := range rows {
		at[r.Lease] = i
	}
	for _, a := range as {
		if a.Lease == "" {
			drained = append(drained, a.Node)
			continue
		}
		if i, ok := at[a.Lease]; ok {
			rows[i].Nodes = append(rows[i].Nodes, control.NodeState{Node: a.Node, State: a.State})
		}
	}
	return drained
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
func ClusterView(ctx context.Context, store Lister) ([]control.ClusterRow, error) {
	entries, err := store.List(ctx)
	if err != nil {
		return nil, err
	}
	var rows []control.ClusterRow
	for _, e := range entries {
		row := control.ClusterRow{Lease: e.Name, Holder: e.Record.Holder, Version: e.Record.Version, State: redislease.StateOf(e.Record), Next: e.Record.Next}
		switch {
		case e.Err != nil:
			row.State, row.Error = "garbage", e.Err.Error()
		case !e.Record.Present:
			row.State = "missing"
		}
		row.Watchers, _ = store.Watchers(ctx, e.Name)
		rows = append(rows, row)
	}
	return rows, nil
}

// leaseStatus is a supervisor's status as the control socket sends it.
func leaseStatus(st supervisor.Status, unitStates []string) control.LeaseStatus {
	return control.LeaseStatus{
		Lease: st.Lease, Units: st.Units, Node: st.Node, Role: st.Role,
		Holding: st.Holding, Holder: st.Holder, Version: st.Version,
		LeaseAge: st.LeaseAge, DeadlineLeft: st.DeadlineLeft,
		Reason: st.Reason, UnitStates: unitStates, Since: st.Since,
	}
}

// withHistory adds to each cluster row its tenure's token, how long it
// has been held, its last transition and the nodes' failure counts.
func (d *Daemon) withHistory(ctx context.Context, snap *control.Snapshot) {
	var leases []string
	for _, r := range snap.Cluster {
		leases = append(leases, r.Lease)
	}
	ts, err := d.store.Transitions(ctx, leases)
	if err != nil {
		snap.Errors = append(snap.Errors, err.Error())
	}
	fs, err := d.store.Failures(ctx)
	if err != nil {
		snap.Errors = append(snap.Errors, err.Error())
	}
	var released []string
	for _, r := range snap.Cluster {
		if r.State == "released" {
			released = append(released, r.Lease)
		}
	}
	notes, err := d.store.Releases(ctx, released)
	if err != nil {
		snap.Errors = append(snap.Errors, err.Error())
	}
	now := time.Now()
	for i := range snap.Cluster {
		r := &snap.Cluster[i]
		for _, f := range fs[r.Lease] {
			r.Failures = append(r.Failures, control.NodeFailures{Node: f.Node, Count: f.Count})
		}
		if n, ok := notes[r.Lease]; ok && n.Version == r.Version {
			r.Released = &control.ReleaseRow{At: time.UnixMilli(n.AtMS), By: n.By, Why: n.Why}
		}
		t, ok := ts[r.Lease]
		if !ok {
			continue
		}
		r.Last = &control.TransitionRow{At: t.At, From: t.From, To: t.To, Why: t.Why}
		if r.State != "released" && r.State != "missing" && r.Holder == t.To {
			r.Token, r.HeldFor = t.Token, max(0, now.Sub(t.At))
		}
	}
}
