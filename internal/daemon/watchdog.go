package daemon

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"runtime/metrics"
	"time"

	sdaemon "github.com/coreos/go-systemd/v22/daemon"

	"github.com/unitlease/unitlease/internal/logging"
	"github.com/unitlease/unitlease/internal/supervisor"
	"github.com/unitlease/unitlease/policy"
)

// watchdog sends WATCHDOG=1 every third of the watchdog interval while
// no supervisor's loop has been busy with one event for more than a
// third of it, nor has left its wake-up unheeded that long: a loop that
// hangs, or a daemon that does not act on its deadlines, lets systemd
// kill the daemon, and BindsTo= then stops the units (rule 6). The
// first tick that finds a loop overdue wakes every loop and withholds
// its ping; if the loops stepped by the next tick, that one pings, two
// thirds of the interval after the last, in time. It reads each loop's
// state and wakes none of them unless one is overdue. KillAllowance is
// what this costs.
func (d *Daemon) watchdog(ctx context.Context, interval time.Duration) {
	if interval <= 0 {
		return
	}
	t := time.NewTicker(watchdogCheck(interval))
	defer t.Stop()
	for tick := 0; ; tick++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !d.mayPing(watchdogCheck(interval)) {
			continue
		}
		d.notify("WATCHDOG=1")
		if tick%15 == 0 {
			d.updateStatus()
		}
	}
}

// watchdogCheck is the watchdog's tick and how long a loop may be busy
// with one event, or overdue, before the daemon withholds its ping: a
// third of the interval.
func watchdogCheck(interval time.Duration) time.Duration { return interval / 3 }

// KillAllowance is how late a daemon with watchdog interval WatchdogSec
// and TimeoutAbortSec abort may act on a deadline before systemd has
// killed it: a loop stuck at the deadline (or the whole daemon frozen
// there) has its last ping at most a third of the interval later, systemd
// sends SIGABRT the interval after that ping and SIGKILL abort later; then
// BindsTo= stops the units. A live daemon is never later than this either:
// a timer later than a third of the interval is woken by the watchdog's
// tick, and is killed if that does not move it. The lease span covers it
// (policy.Timing.Allowance).
func KillAllowance(watchdog, abort time.Duration) time.Duration {
	third := ((watchdog+2)/3 + time.Millisecond - 1).Truncate(time.Millisecond) // at least the check, whole ms
	return watchdog + third + abort
}

// updateStatus sends STATUS= when the summary changed. It also hands
// free heap memory back to the kernel, rather than over the scavenger's
// minutes: the first time it finds the summary as it was after a change
// (a burst has ended: the start, a reload, many leases moving at once,
// whose garbage the steady state never makes again), and whenever more
// than freeSlack of the heap lies free.
func (d *Daemon) updateStatus() {
	status := d.summary()
	if status != d.lastStatus {
		d.lastStatus, d.settling = status, true
		d.notify("STATUS=" + status)
		return
	}
	if d.settling || heapFree() > freeSlack {
		d.settling = false
		debug.FreeOSMemory()
	}
}

// freeSlack is how much free heap the daemon keeps from the kernel.
const freeSlack = 4 << 20

// heapFree is the heap memory that is free but not yet returned.
func heapFree() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/free:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

// mayPing decides a watchdog tick (see pingVerdict) and wakes every
// loop when one is newly overdue: its timer did not fire, most often
// after a resume the suspend check has not seen yet.
func (d *Daemon) mayPing(within time.Duration) bool {
	busy, overdue := d.stuck(within)
	ping, wake := pingVerdict(busy, overdue, d.lastOverdue)
	d.lastOverdue = overdue
	switch {
	case wake:
		d.log.Warn("a lease loop has not acted on its wake-up for more than "+within.String()+": waking every loop and withholding one watchdog ping", logging.Event, "watchdog")
		supervisor.Resumed()
		d.wakeAll()
	case busy:
		d.log.Error("a lease loop has been busy with one event for more than "+within.String()+": withholding the watchdog ping", logging.Event, "watchdog")
	case !ping:
		d.log.Error("a lease loop has not acted on its wake-up for more than "+within.String()+", even when woken: withholding the watchdog ping", logging.Event, "watchdog")
	}
	return ping
}

// pingVerdict is a watchdog tick's decision: ping only when no loop is
// busy or overdue; wake every loop when one is overdue and was not at the
// last tick. A tick that pings is never more than the check after a loop
// got stuck, which is what KillAllowance counts on.
func pingVerdict(busy, overdue, lastOverdue bool) (ping, wake bool) {
	return !busy && !overdue, overdue && !lastOverdue
}

// stuck reports whether some supervisor's loop is busy with one event,
// and whether some supervisor is overdue, by more than within.
func (d *Daemon) stuck(within time.Duration) (busy, overdue bool) {
	now := d.clock()
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, r := range d.sups {
		busy = busy || r.sup.Busy(now, within)
		overdue = overdue || r.sup.Overdue(now, within)
	}
	return busy, overdue
}

// ErrNoWatchdog is returned by Run when the daemon runs without a
// watchdog: nothing would bound how late a daemon that stopped acting
// stops its units.
var ErrNoWatchdog = errors.New("no watchdog")

// watchdogAllowance reads the watchdog interval systemd enforces on this
// daemon and its unit's TimeoutAbortSec=, and returns the interval and
// the allowance they give (KillAllowance). It refuses a daemon with no
// watchdog, or with an abort timeout of infinity.
func watchdogAllowance(ctx context.Context, sd Manager, unit string) (interval, allowance time.Duration, err error) {
	interval, err = sdaemon.SdWatchdogEnabled(false)
	if err != nil {
		return 0, 0, fmt.Errorf("%s: reading the watchdog: %w", unit, err)
	}
	if interval <= 0 {
		return 0, 0, fmt.Errorf("%s: %w: set WatchdogSec= in its [Service] section (the packaged unit sets 2s), or nothing bounds how late a daemon that hangs stops its units", unit, ErrNoWatchdog)
	}
	abort, err := sd.TimeoutAbort(ctx, unit)
	if err != nil {
		return 0, 0, fmt.Errorf("%s: reading TimeoutAbortSec=: %w", unit, err)
	}
	if err := CheckAllowance(interval, abort); err != nil {
		return 0, 0, fmt.Errorf("%s: %w", unit, err)
	}
	return interval, KillAllowance(interval, abort), nil
}

// CheckAllowance refuses a watchdog or an abort timeout over
// policy.MaxDuration (a TimeoutAbortSec of infinity, say).
func CheckAllowance(interval, abort time.Duration) error {
	if interval > policy.MaxDuration || abort > policy.MaxDuration {
		return fmt.Errorf("WatchdogSec %v and TimeoutAbortSec %v: each must be at most %v, for a daemon that hangs is stopped within them", interval, abort, policy.MaxDuration)
	}
	return nil
}
