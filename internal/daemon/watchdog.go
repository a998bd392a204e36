package daemon

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"time"

	sdaemon "github.com/coreos/go-systemd/v22/daemon"

	"github.com/unitlease/unitlease/internal/logging"
	"github.com/unitlease/unitlease/internal/supervisor"
	"github.com/unitlease/unitlease/policy"
)

// watchdog sends WATCHDOG=1 every third of the watchdog interval (the
// check) while no supervisor's loop has been busy with one event for more
// than half the check, nor has left its wake-up unheeded that long, and
// only if the ping goes out within half the check of that verdict: a
// loop that hangs, or a daemon that does not act on its deadlines, has
// its last ping at most a check later, lets systemd kill the daemon, and
// BindsTo= then stops the units. The first tick that finds a loop
// overdue wakes every loop and withholds its ping; if the loops stepped
// by the next tick, that one pings, two checks after the last, in time.
// It reads each loop's state and wakes none of them unless one is
// overdue. KillAllowance is what this costs.
func (d *Daemon) watchdog(ctx context.Context, interval time.Duration) {
	if interval <= 0 {
		return
	}
	check := watchdogCheck(interval)
	t := time.NewTicker(check)
	defer t.Stop()
	for tick := 0; ; tick++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		ok, at := d.mayPing(check / 2)
		if !ok {
			continue
		}
		if late := d.clock().Sub(at); late > check/2 {
			// The verdict is stale: a loop may have hung since.
			d.log.Warn("the watchdog's check is "+late.String()+" old: withholding its ping", logging.Event, "watchdog")
			continue
		}
		d.notify("WATCHDOG=1")
		if tick%15 == 0 {
			d.updateStatus()
		}
	}
}

// watchdogCheck is the watchdog's tick, a third of the interval: half of
// it is how long a loop may be busy with one event, or overdue, before
// the daemon withholds its ping, and half how old that verdict may be when
// the ping goes out.
func watchdogCheck(interval time.Duration) time.Duration { return interval / 3 }

// KillAllowance is how late a daemon with watchdog interval WatchdogSec
// and TimeoutAbortSec abort may act on a deadline before systemd has
// killed it: a loop stuck at the deadline (or the whole daemon frozen
// there) has its last ping at most a third of the interval later (half of
// it to be found stuck, half for the verdict to reach the ping), systemd
// sends SIGABRT the interval after that ping and SIGKILL abort later (each
// up to SystemdTimerSlack late); then
// BindsTo= stops the units. A live daemon is never later than this either:
// a timer later than a third of the interval is woken by the watchdog's
// tick, and is killed if that does not move it. The lease span covers it
// (policy.Timing.Allowance).
func KillAllowance(watchdog, abort time.Duration) time.Duration {
	third := ((watchdog+2)/3 + time.Millisecond - 1).Truncate(time.Millisecond) // at least the check, whole ms
	return watchdog + third + abort + 2*SystemdTimerSlack
}

// SystemdTimerSlack is how late systemd's own timers may fire: it arms
// the watchdog's and the abort's with its event loop's default accuracy,
// 250 ms, so each may come that much after its time. KillAllowance
// counts it twice.
const SystemdTimerSlack = 250 * time.Millisecond

// updateStatus sends STATUS= when the summary changed. It also has the
// collector's target set for the number of leases (gcTarget, if set),
// and hands free heap memory back to the kernel,
// rather than over the scavenger's minutes, the first time it finds the
// summary as it was after a change
// (a burst has ended: the start, a reload, many leases moving at once,
// whose garbage the steady state never makes again). In the steady state
// the runtime's scavenger alone returns memory: a FreeOSMemory whenever
// more than 4 MB lay free returned, among the rest, the stacks that the
// next ticks' goroutines took again, each page faulted back in (at a
// thousand leases it cost more CPU than the steps).
func (d *Daemon) updateStatus() {
	if d.starting.Load() {
		d.notify("STATUS=starting: " + d.startProgress())
		return
	}
	status := d.summary()
	if status != d.lastStatus {
		d.lastStatus, d.settling = status, true
		d.notify("STATUS=" + status)
		return
	}
	if d.settling {
		d.settling = false
		if d.gcTarget != nil {
			d.mu.Lock()
			leases := len(d.sups)
			d.mu.Unlock()
			d.gcTarget(leases)
		}
		debug.FreeOSMemory()
	}
}

// GCPercent is the collector's target (GOGC) for a daemon of n leases in
// its steady state. Its live heap grows with the leases, a few kilobytes
// each: half the default target keeps the memory near it up to 2,000
// leases; past them the headroom stays what it is at 2,000, about 5 MB,
// and the target falls, to 20 at 5,000 (the floor). The collector then
// runs as often at 5,000 leases as at 2,000, over a heap 2.5 times as
// large: its CPU per lease grows with the count, by a part of the
// daemon's whole that the scale benchmark shows.
func GCPercent(n int) int {
	if n <= 2000 {
		return 50
	}
	return max(20, 50*2000/n)
}

// mayPing decides a watchdog tick (see pingVerdict) and wakes every
// loop when one is newly overdue: its timer did not fire, most often
// after a resume the suspend check has not seen yet. at is when the
// loops were read.
func (d *Daemon) mayPing(within time.Duration) (ok bool, at policy.Instant) {
	busy, overdue, late, at := d.stuck(within)
	ping, wake := pingVerdict(busy || late, overdue, d.lastOverdue)
	d.lastOverdue = overdue
	switch {
	case late:
		d.log.Error("systemd has not taken a stop more than "+within.String()+" after the lease's deadline: withholding the watchdog ping, so that systemd kills this daemon and stops the unit itself (BindsTo=)", logging.Event, "watchdog")
	case wake:
		d.log.Warn("a lease loop has not acted on its wake-up for more than "+within.String()+": waking every loop and withholding one watchdog ping", logging.Event, "watchdog")
		supervisor.Resumed()
		d.wakeAll()
	case busy:
		d.log.Error("a lease loop has been busy with one event for more than "+within.String()+": withholding the watchdog ping", logging.Event, "watchdog")
	case !ping:
		d.log.Error("a lease loop has not acted on its wake-up for more than "+within.String()+", even when woken: withholding the watchdog ping", logging.Event, "watchdog")
	}
	return ping, at
}

// pingVerdict is a watchdog tick's decision: ping only when no loop is
// busy or overdue; wake every loop when one is overdue and was not at the
// last tick. A tick that pings is never more than the check after a loop
// got stuck, which is what KillAllowance counts on.
func pingVerdict(busy, overdue, lastOverdue bool) (ping, wake bool) {
	return !busy && !overdue, overdue && !lastOverdue
}

// stuck reports whether some supervisor's loop is busy with one event,
// whether some supervisor is overdue, and whether some stop due by a
// deadline is not in systemd's hands yet, by more than within.
func (d *Daemon) stuck(within time.Duration) (busy, overdue, late bool, now policy.Instant) {
	d.mu.Lock()
	defer d.mu.Unlock()
	now = d.clock() // after the lock: a verdict is as old as its reading
	for _, r := range d.sups {
		busy = busy || r.sup.Busy(now, within)
		overdue = overdue || r.sup.Overdue(now, within)
		late = late || r.sup.StopLate(now, within)
	}
	// A supervisor ended by a reload (its lease lost, no longer
	// annotated) whose stop systemd does not have yet still counts.
	d.ended = slices.DeleteFunc(d.ended, func(s *supervisor.Supervisor) bool { return !s.StopPending() })
	for _, s := range d.ended {
		late = late || s.StopLate(now, within)
	}
	return busy, overdue, late, now
}

// ErrNoWatchdog is returned by Run when the daemon runs without a
// watchdog: nothing would bound how late a daemon that stopped acting
// stops its units.
var ErrNoWatchdog = errors.New("no watchdog")

// watchdogAllowance reads the watchdog interval systemd gave this daemon
// (WATCHDOG_USEC), and its unit's WatchdogSec= and TimeoutAbortSec= as
// systemd has them loaded, and returns the interval to ping within and
// the allowance (KillAllowance) of the longer of the two intervals:
// systemd may kill the daemon that much later. It refuses a daemon with
// no watchdog, or with an abort timeout of infinity.
func watchdogAllowance(ctx context.Context, sd Manager, unit string) (interval, allowance time.Duration, err error) {
	interval, err = sdaemon.SdWatchdogEnabled(false)
	if err != nil {
		return 0, 0, fmt.Errorf("%s: reading the watchdog: %w", unit, err)
	}
	if interval <= 0 {
		return 0, 0, noWatchdog(unit)
	}
	w, err := UnitWatchdog(ctx, sd, unit, interval)
	return interval, w.Allowance, err
}

// WatchdogReader is what reading a daemon unit's watchdog needs of
// systemd (*unitctl.Systemd).
type WatchdogReader interface {
	ServiceWatchdogs(ctx context.Context) (bool, error)
	Watchdog(ctx context.Context, unit string) (time.Duration, error)
	TimeoutAbort(ctx context.Context, unit string) (time.Duration, error)
}

// WatchdogSettings are a daemon unit's watchdog as systemd has it loaded.
type WatchdogSettings struct {
	Interval  time.Duration // the longer of WatchdogSec= and the interval enforced
	Abort     time.Duration // TimeoutAbortSec=
	Allowance time.Duration // KillAllowance of the two
}

// UnitWatchdog reads unit's watchdog as systemd has it loaded, with
// enforced the interval systemd gave the running daemon (WATCHDOG_USEC;
// 0 when there is none, for `check`), and the allowance of the longer of
// the two: systemd may kill the daemon that much later. It refuses no
// watchdog at all, service watchdogs turned off, and an abort timeout of
// infinity. `run` and `check` both read it here.
func UnitWatchdog(ctx context.Context, sd WatchdogReader, unit string, enforced time.Duration) (WatchdogSettings, error) {
	if err := watchdogsEnforced(ctx, sd); err != nil {
		return WatchdogSettings{}, fmt.Errorf("%s: %w", unit, err)
	}
	loaded, err := sd.Watchdog(ctx, unit)
	if err != nil {
		return WatchdogSettings{}, fmt.Errorf("%s: reading WatchdogSec=: %w", unit, err)
	}
	w := WatchdogSettings{Interval: max(enforced, loaded)}
	if w.Interval <= 0 {
		return WatchdogSettings{}, noWatchdog(unit)
	}
	if w.Abort, err = sd.TimeoutAbort(ctx, unit); err != nil {
		return WatchdogSettings{}, fmt.Errorf("%s: reading TimeoutAbortSec=: %w", unit, err)
	}
	if err := CheckAllowance(w.Interval, w.Abort); err != nil {
		return WatchdogSettings{}, fmt.Errorf("%s: %w", unit, err)
	}
	w.Allowance = KillAllowance(w.Interval, w.Abort)
	return w, nil
}

func noWatchdog(unit string) error {
	return fmt.Errorf("%s: %w: set WatchdogSec= in its [Service] section (the packaged unit sets 2s), or nothing bounds how late a daemon that hangs stops its units", unit, ErrNoWatchdog)
}

// watchdogsEnforced refuses a systemd that ignores service watchdogs
// (`systemctl service-watchdogs no`): it would never kill a hung daemon.
func watchdogsEnforced(ctx context.Context, sd WatchdogReader) error {
	on, err := sd.ServiceWatchdogs(ctx)
	switch {
	case err != nil:
		return err
	case !on:
		return fmt.Errorf("%w enforced: systemd ignores every service's watchdog (systemctl service-watchdogs no), so nothing bounds how late a daemon that hangs stops its units; run systemctl service-watchdogs yes", ErrNoWatchdog)
	}
	return nil
}

// allowanceGrew reads the daemon unit's watchdog settings again (systemd
// reloaded: a drop-in may have changed them; or the watchdog's check
// found service watchdogs turned off) and returns an error when they now
// let systemd kill a hung daemon later than the lease span in force
// allows for, or never. A setting that could not be read changes nothing.
func (d *Daemon) allowanceGrew(ctx context.Context) error {
	_, allowance, err := watchdogAllowance(ctx, d.sd, d.daemonUnit())
	if errors.Is(err, ErrNoWatchdog) {
		return fmt.Errorf("%w; handing every lease off and exiting", err)
	}
	if err != nil || allowance <= d.cfg.Timing.Allowance {
		return nil
	}
	return fmt.Errorf("%s: its WatchdogSec= or TimeoutAbortSec= changed under the running daemon: a hung daemon may now be killed %v after its deadline, and the lease span %v allows for %v; handing every lease off and exiting, so that systemd restarts the daemon with them",
		d.daemonUnit(), allowance, d.cfg.Timing.LeaseSpan, d.cfg.Timing.Allowance)
}

// CheckAllowance refuses a watchdog or an abort timeout over
// policy.MaxDuration (a TimeoutAbortSec of infinity, say).
func CheckAllowance(interval, abort time.Duration) error {
	if interval > policy.MaxDuration || abort > policy.MaxDuration {
		return fmt.Errorf("WatchdogSec %v and TimeoutAbortSec %v: each must be at most %v, for a daemon that hangs is stopped within them", interval, abort, policy.MaxDuration)
	}
	return nil
}
