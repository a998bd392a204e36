package daemon

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/unitlease/unitlease/internal/logging"
	"github.com/unitlease/unitlease/internal/supervisor"
	"github.com/unitlease/unitlease/redislease"
)

// A unit that fails on a node counts against that node for its lease
// (FailureThreshold= failures within FailureWindow=, as Pacemaker's
// migration-threshold and failure-timeout): at the threshold the node
// withdraws from the lease (it acquires nothing, and announces itself
// excluded) until the oldest failure leaves the window, or `unitlease
// clear LEASE` is run. The counts live in the daemon's memory: a restart
// of the daemon forgets them.

// unitFailed counts a failure of lease's units on this node now (the
// supervisor's hook: never blocks on more than the count's own lock).
func (d *Daemon) unitFailed(lease string) {
	d.fmu.Lock()
	if d.failures == nil {
		d.failures = map[string][]time.Time{}
	}
	d.failures[lease] = append(d.failures[lease], time.Now())
	d.fmu.Unlock()
	d.noteFailures(lease)
	d.steerSoon()
}

// failCount is how many failures of lease fall within its window now;
// older ones are forgotten.
func (d *Daemon) failCount(lease string) int {
	st := d.settingsFor(lease)
	d.fmu.Lock()
	defer d.fmu.Unlock()
	fs := d.failures[lease]
	cut := time.Now().Add(-st.Window)
	i := 0
	for i < len(fs) && !fs[i].After(cut) {
		i++
	}
	fs = fs[i:]
	if len(fs) == 0 {
		delete(d.failures, lease)
	} else {
		d.failures[lease] = fs
	}
	return len(fs)
}

// excluded: lease's units failed here FailureThreshold= times within the
// window.
func (d *Daemon) excluded(lease string) bool {
	st := d.settingsFor(lease)
	return st.Threshold > 0 && d.failCount(lease) >= st.Threshold
}

// clearFailures forgets lease's failures here.
func (d *Daemon) clearFailures(lease string) bool {
	d.fmu.Lock()
	defer d.fmu.Unlock()
	_, had := d.failures[lease]
	delete(d.failures, lease)
	return had
}

// reexclude brings every supervisor's withdrawal in line with the
// failure counts, journals each change, and announces when one changed.
// A node that excludes itself looks whether any node is left that may
// take the lease: when none is, the lease rests released, and says so.
func (d *Daemon) reexclude(ctx context.Context) { d.round(ctx, true) }

// MarkerRounds is how many steer rounds pass between two reads of the
// disabled markers when no message says one changed: disable and enable
// publish on the lease's channel, and a resubscription (which may have
// missed one) reads them at once. The acquire script refuses a disabled
// lease whatever a daemon has read.
const MarkerRounds = 10

// round is reexclude that reads the disabled markers only if markers.
func (d *Daemon) round(ctx context.Context, markers bool) {
	toggled := false
	if markers {
		toggled = d.redisable(ctx)
	} else {
		d.stopDisabled(ctx)
	}
	d.wmu.Lock()
	changed := d.reexcludeLocked(ctx) || toggled
	d.wmu.Unlock()
	if changed {
		d.announce(ctx)
	}
	d.reportResting(ctx)
}

// reexcludeLocked is reexclude's part under d.wmu; it reports whether an
// exclusion changed.
func (d *Daemon) reexcludeLocked(ctx context.Context) bool {
	changed := false
	for _, r := range d.running() {
		if r.removing {
			continue
		}
		s := r.sup
		d.noteFailures(s.Lease) // the window may have let one go
		out := d.excluded(s.Lease)
		was := d.wasExcluded(s.Lease, out)
		if was == out {
			s.SetWithdrawn(ctx, d.withdrawn(s.Lease)) // a disable or an enable
			continue
		}
		changed = true
		st := d.settingsFor(s.Lease)
		units := strings.Join(s.Units, ", ")
		fields := append(logging.UnitFields(s.Units), logging.Lease, s.Lease)
		if out {
			d.log.Warn(fmt.Sprintf("%s: failed %d times on this node within %v: this node stops competing for lease %s until the window passes or `unitlease clear %s`",
				units, st.Threshold, st.Window, s.Lease, s.Lease), append(fields, logging.Event, "excluded")...)
		} else {
			d.log.Info(fmt.Sprintf("%s: fewer than %d failures within %v: this node competes for lease %s again", units, st.Threshold, st.Window, s.Lease),
				append(fields, logging.Event, "readmitted")...)
		}
		s.SetWithdrawn(ctx, d.withdrawn(s.Lease))
	}
	return changed
}

// wasExcluded records out as lease's exclusion and returns the one
// recorded before.
func (d *Daemon) wasExcluded(lease string, out bool) bool {
	d.fmu.Lock()
	defer d.fmu.Unlock()
	if d.excl == nil {
		d.excl = map[string]bool{}
	}
	was := d.excl[lease]
	if out {
		d.excl[lease] = true
	} else {
		delete(d.excl, lease)
	}
	if out != was {
		if d.resting == nil {
			d.resting = map[string]bool{}
		}
		delete(d.resting, lease) // a new exclusion, or none: journal its rest afresh
	}
	return was
}

// reportResting journals, once for each exclusion of this node from a
// lease, that the lease rests released when no other node announces
// itself ready for it. Each round looks again (another node's
// announcement may reach Redis a moment after this one looked).
func (d *Daemon) reportResting(ctx context.Context) {
	var due []*supervisor.Supervisor
	for _, s := range d.supervisors() {
		if d.excluded(s.Lease) && !d.restingReported(s.Lease) {
			due = append(due, s)
		}
	}
	if len(due) == 0 {
		return
	}
	as, err := d.store.Announcements(ctx)
	if err != nil {
		return
	}
	for _, s := range due {
		ready := false
		who := []string{d.cfg.Node + " excluded"}
		for _, a := range as {
			if a.Lease == s.Lease && a.Node != d.cfg.Node {
				who = append(who, a.Node+" "+a.State)
				ready = ready || a.State == redislease.AnnounceReady
			}
		}
		if ready {
			continue
		}
		d.fmu.Lock()
		d.resting[s.Lease] = true
		d.fmu.Unlock()
		d.log.Warn(fmt.Sprintf("lease %s rests released: no node that watches it may take it (%s); `unitlease clear %s` lets the nodes compete again",
			s.Lease, strings.Join(who, ", "), s.Lease),
			append(logging.UnitFields(s.Units), logging.Lease, s.Lease, logging.Event, "resting")...)
	}
}

// restingReported: the lease's rest was journalled since this node last
// excluded itself from it.
func (d *Daemon) restingReported(lease string) bool {
	d.fmu.Lock()
	defer d.fmu.Unlock()
	return d.resting[lease]
}

// redisable reads which of the leases managed here an operator disabled
// (one round trip), journals each change, and stops the units of a
// disabled lease this node holds (stop, confirm inactive, release: a
// stop that fails keeps the lease held stop_failed). It reports whether
// a lease was disabled or enabled. Without an answer it keeps what it
// read last: the acquire script refuses a disabled lease whatever the
// daemon believes.
func (d *Daemon) redisable(ctx context.Context) bool {
	var leases []string
	for _, s := range d.supervisors() {
		leases = append(leases, s.Lease)
	}
	dis, err := d.store.DisabledAmong(ctx, leases)
	if err != nil {
		return false
	}
	d.fmu.Lock()
	before := d.disabled
	d.disabled = dis
	d.fmu.Unlock()
	toggled := false
	for _, s := range d.supervisors() {
		on := dis[s.Lease]
		if on == before[s.Lease] {
			continue
		}
		toggled = true
		fields := append(logging.UnitFields(s.Units), logging.Lease, s.Lease)
		switch {
		case on:
			d.log.Warn(fmt.Sprintf("lease %s is disabled cluster-wide: this node takes it no more, and stops its units if it runs them (`unitlease enable %s` ends it)", s.Lease, s.Lease),
				append(fields, logging.Event, "disabled")...)
		default:
			d.log.Info(fmt.Sprintf("lease %s is enabled again", s.Lease), append(fields, logging.Event, "enabled")...)
		}
	}
	d.stopDisabled(ctx)
	return toggled
}

// stopDisabled stops the units of every disabled lease this node holds
// (as the last read of the markers says): an acquisition answered just
// before the disable was read is stopped at the next round.
func (d *Daemon) stopDisabled(ctx context.Context) {
	d.fmu.Lock()
	none := len(d.disabled) == 0
	d.fmu.Unlock()
	if none { // the common case, every round: no sort of a thousand leases
		return
	}
	for _, r := range d.running() {
		if s := r.sup; s.Holding() && d.isDisabled(s.Lease) {
			s.Disable(ctx)
		}
	}
}

// isDisabled: the last round read lease disabled.
func (d *Daemon) isDisabled(lease string) bool {
	d.fmu.Lock()
	defer d.fmu.Unlock()
	return d.disabled[lease]
}
