package daemon

import (
	"context"
	"fmt"
	"math"
	"runtime/debug"
	"runtime/metrics"
	"time"

	sdaemon "github.com/coreos/go-systemd/v22/daemon"

	"github.com/unitlease/unitlease/internal/logging"
	"github.com/unitlease/unitlease/internal/supervisor"
	"github.com/unitlease/unitlease/policy"
)

// watchdog sends WATCHDOG=1 only while no supervisor's loop has been busy
// with one event for more than half the watchdog interval, and none has
// left its wake-up unheeded that long on two ticks in a row (it wakes
// them all after the first): a loop that hangs, or a daemon that does not
// act on its deadlines, lets systemd kill the daemon, and BindsTo= then
// stops the units (rule 6). It reads each loop's state and wakes none of
// them unless one is overdue.
func (d *Daemon) watchdog(ctx context.Context, interval time.Duration) {
	if interval <= 0 {
		return
	}
	t := time.NewTicker(interval / 2)
	defer t.Stop()
	for tick := 0; ; tick++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !d.mayPing(interval / 2) {
			continue
		}
		d.notify("WATCHDOG=1")
		if tick%10 == 0 {
			d.updateStatus()
		}
	}
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

// mayPing decides a watchdog tick: no ping while a loop is busy with one
// event for more than within, nor while one is overdue by as much on two
// ticks in a row. An overdue loop's timer did not fire, most often after
// a resume the suspend check has not seen yet: the first tick wakes
// every loop and pings.
func (d *Daemon) mayPing(within time.Duration) bool {
	busy, overdue := d.stuck(within)
	defer func() { d.lastOverdue = overdue }()
	switch {
	case busy:
		d.log.Error("a lease loop has been busy with one event for more than "+within.String()+": withholding the watchdog ping", logging.Event, "watchdog")
		return false
	case overdue && d.lastOverdue:
		d.log.Error("a lease loop has not acted on its wake-up for more than "+within.String()+", even when woken: withholding the watchdog ping", logging.Event, "watchdog")
		return false
	case overdue:
		supervisor.Resumed()
		d.wakeAll()
	}
	return true
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

// WatchdogFit is how a daemon's watchdog fits its deadline: a daemon
// that hangs right after a renewal must be killed, and its units stopped
// through BindsTo=, no later than its own deadline would have stopped
// them: WatchdogSec + TimeoutAbortSec <= retry + renew_deadline, after
// which the units stop within stop_wait like any other stop.
type WatchdogFit struct {
	// Max is the longest WatchdogSec that fits, and at least 1s.
	Max time.Duration
	// Overrun is how long a hung daemon may outlive its deadline with Max:
	// 0 when it fits, else what even 1s of watchdog leaves over.
	Overrun time.Duration
}

// FitWatchdog fits the watchdog to t with TimeoutAbortSec abort. `run`
// lowers the daemon's watchdog to Max; `check` reports the same figures.
func FitWatchdog(t policy.Timing, abort time.Duration) WatchdogFit {
	budget := t.Retry + t.RenewDeadline
	if budget-abort >= time.Second {
		return WatchdogFit{Max: budget - abort}
	}
	// abort + 1s - budget, which is positive here; saturated for a
	// TimeoutAbortSec of infinity.
	over := time.Duration(math.MaxInt64)
	if abort <= math.MaxInt64-time.Second {
		over = abort + time.Second - budget
	}
	return WatchdogFit{Max: time.Second, Overrun: over}
}

// Short reports that not even 1s of watchdog fits: a hung daemon may
// outlive its deadline by Overrun.
func (f WatchdogFit) Short() bool { return f.Overrun > 0 }

// ShortWarning says what a short fit costs, for unit (the daemon's).
func (f WatchdogFit) ShortWarning(unit string, t policy.Timing, abort time.Duration) string {
	return fmt.Sprintf("%s: TimeoutAbortSec %v leaves under 1s of watchdog within retry %v + renew_deadline %v: run uses 1s, and a hung daemon may outlive its deadline by %v",
		unit, abort, t.Retry, t.RenewDeadline, f.Overrun)
}

// fitWatchdog lowers the watchdog timeout to FitWatchdog's Max. It returns the
// interval in force.
func (d *Daemon) fitWatchdog(ctx context.Context) time.Duration {
	interval, err := sdaemon.SdWatchdogEnabled(false)
	if err != nil || interval <= 0 {
		return 0
	}
	abort, err := d.sd.TimeoutAbort(ctx, d.daemonUnit())
	if err != nil {
		abort = 2 * time.Second
	}
	t := d.cfg.Timing
	f := FitWatchdog(t, abort)
	if f.Short() {
		d.log.Warn(f.ShortWarning(d.daemonUnit(), t, abort), logging.Event, "config_warning")
	}
	if fit := f.Max; interval > fit {
		d.log.Info(fmt.Sprintf("watchdog lowered from %v to %v (retry %v + renew_deadline %v - TimeoutAbortSec %v)", interval, fit, t.Retry, t.RenewDeadline, abort))
		d.notify(fmt.Sprintf("WATCHDOG_USEC=%d", fit.Microseconds()))
		interval = fit
	}
	return interval
}
