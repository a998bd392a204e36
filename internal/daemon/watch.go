package daemon

import (
	"context"
	"fmt"
	"time"

	"github.com/unitlease/unitlease/internal/logging"
	"github.com/unitlease/unitlease/unitctl"
)

// UnitPoll is how often a unit's state is re-read when no event came: the
// backstop behind systemd's signals (which are resynchronised after every
// reconnect or overflow anyway). The re-read lists every managed unit in
// one call, whose cost grows with them, so past 250 units its period grows
// too: unitPollPerUnit per unit.
const (
	UnitPoll        = 5 * time.Second
	unitPollPerUnit = 20 * time.Millisecond
)

// unitPoll is the backstop's period for n units.
func unitPoll(n int) time.Duration { return max(UnitPoll, time.Duration(n)*unitPollPerUnit) }

// rewatch restarts the wake-up subscription and the unit watch for the
// current set of leases.
func (d *Daemon) rewatch(ctx context.Context) {
	d.mu.Lock()
	if d.watchers != nil {
		d.watchers()
	}
	wctx, cancel := context.WithCancel(ctx)
	d.watchers = cancel
	var leases, units []string
	for lease, r := range d.sups {
		leases = append(leases, lease)
		units = append(units, r.sup.Units...)
	}
	d.mu.Unlock()
	go d.wakeups(wctx, leases)
	go d.watchUnits(wctx, ctx, units)
}

// wakeups nudges a supervisor whenever its lease is released or acquired
// elsewhere, and every supervisor after a resubscription.
func (d *Daemon) wakeups(ctx context.Context, leases []string) {
	for w := range d.store.Wakeups(ctx, leases) {
		if w.ClearFailures {
			cleared := d.clearFailures(w.Lease)
			d.noteFailures(w.Lease)
			if cleared {
				d.log.Info(fmt.Sprintf("lease %s: failures on this node cleared (unitlease clear)", w.Lease),
					logging.Event, "failures_cleared", logging.Lease, w.Lease)
			}
			d.steerSoon()
			continue
		}
		if w.Toggled || w.Resync {
			// Disabled or enabled, or messages may have been missed:
			// the next round reads the markers.
			d.markersDue.Store(true)
			d.steerSoon()
		}
		if w.Toggled {
			continue
		}
		if w.Resync {
			for _, s := range d.supervisors() {
				s.NudgeVia(d.nudgeLater)
			}
			continue
		}
		d.mu.Lock()
		r := d.sups[w.Lease] // a lookup, not a scan: thousands of acquisitions at a start each wake
		d.mu.Unlock()
		if r != nil {
			r.sup.NudgeVia(d.nudgeLater)
		}
	}
}

// watchUnits turns systemd's news about managed units into supervisor
// events: a failure or a stop behind the daemon's back while it runs the
// unit is unit_failed; a start behind its back on a node that does not
// hold the lease is stopped at once.
//
// ctx ends when the set of units changes (a reload) or the daemon stops;
// daemon when the daemon stops (SIGTERM), and news then goes to
// supervisors on daemon.
func (d *Daemon) watchUnits(ctx, daemon context.Context, units []string) {
	for ev := range d.sd.Watch(ctx, units, unitPoll(len(units))) {
		s := d.supervisorOf(ev.Unit)
		if s == nil {
			continue
		}
		switch ev.Kind {
		case unitctl.StoppedBehind, unitctl.Failed:
			// A unit that exits non-zero on SIGTERM (a JVM's 143) is
			// failed, not inactive, after the same planned stop.
			if daemon.Err() != nil {
				// A SIGTERM: Shutdown hands every lease off, this
				// one included.
				continue
			}
			if d.daemonStopping(daemon) {
				// systemd stops the bound units before it signals the
				// daemon: a planned stop, handed off as such.
				s.Handoff(daemon)
				continue
			}
			s.UnitFailed(daemon)
		case unitctl.StartedBehind:
			// Activating: the guard is deciding (and refuses a
			// non-holder); only a unit that got past it is stopped here.
			if ev.State.Running() {
				s.StartedBehind(daemon, ev.Unit)
			}
		}
	}
}

// daemonStopping reports whether systemd is stopping unitlease.service
// itself: deactivating, or still active with a stop (or restart) job
// queued. systemd stops the units bound to it first (they are ordered
// after it), so while they stop the daemon is still active, its job
// waiting: a clean `systemctl stop unitlease` or a package upgrade.
func (d *Daemon) daemonStopping(ctx context.Context) bool {
	// Not on ctx alone: a SIGTERM that arrives meanwhile ends it, and a
	// read that fails would call a planned stop a failure.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	st, err := d.sd.State(ctx, d.daemonUnit())
	return err == nil && (st.ActiveState == "deactivating" || st.JobType == "stop" || st.JobType == "restart")
}

func (d *Daemon) daemonUnit() string {
	if d.ucfg.DaemonUnit != "" {
		return d.ucfg.DaemonUnit
	}
	return "unitlease.service"
}

// nudgeWorkers is how many nudged standbys step at once. A nudge's step
// is an observation, one Redis read, and the acquisition that may follow
// (a start waits in systemd's line, not in this one). A resubscription
// nudges every standby: thousands together on a node that watches
// thousands of leases another node holds, and a goroutine each, as
// before, had one Redis read per lease in flight at once and left their
// descriptors to the runtime for the process's life. A nudge is a
// hurry, never needed: each standby polls on its own.
const nudgeWorkers = 8

// nudgeLater puts a nudged supervisor's step in the daemon's line of
// nudges.
func (d *Daemon) nudgeLater(step func()) { d.nudges.add(nudgeWorkers, step) }
