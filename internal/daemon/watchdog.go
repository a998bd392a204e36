package daemon

import (
	"context"
	"fmt"
	"runtime/debug"
	"runtime/metrics"
	"time"

	sdaemon "github.com/coreos/go-systemd/v22/daemon"

	"github.com/unitlease/unitlease/internal/logging"
	"github.com/unitlease/unitlease/policy"
)

// watchdog sends WATCHDOG=1 only while no supervisor's loop has been busy
// with one event for more than half the watchdog interval: a loop that
// hangs lets systemd kill the daemon, and BindsTo= then stops the units
// (rule 6). It reads each loop's state and wakes none of them.
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
		if !d.progressing(interval / 2) {
			d.log.Error("a lease loop has been busy with one event for more than "+(interval/2).String()+": withholding the watchdog ping", logging.Event, "watchdog")
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

// progressing reports whether no supervisor's loop is stuck (Stuck).
func (d *Daemon) progressing(within time.Duration) bool {
	now := d.clock()
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, r := range d.sups {
		if r.sup.Stuck(now, within) {
			return false
		}
	}
	return true
}

// WatchdogFit is the longest watchdog timeout under which a daemon hung
// right after a renewal is killed, and its units stopped through
// BindsTo=, no later than its own deadline would have stopped them:
// WatchdogSec + TimeoutAbortSec <= retry + renew_deadline, after which the
// units stop within stop_wait like any other stop. short: not even 1 s
// fits, and fit is 1 s, by which a hung daemon may outlive its deadline.
func WatchdogFit(t policy.Timing, abort time.Duration) (fit time.Duration, short bool) {
	fit = t.Retry + t.RenewDeadline - abort
	if fit < time.Second {
		return time.Second, true
	}
	return fit, false
}

// fitWatchdog lowers the watchdog timeout to WatchdogFit. It returns the
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
	fit, short := WatchdogFit(t, abort)
	if short {
		d.log.Warn(fmt.Sprintf("TimeoutAbortSec %v of %s leaves under 1s of watchdog within retry %v + renew_deadline %v; using 1s, so a hung daemon may outlive its deadline by %v",
			abort, d.daemonUnit(), t.Retry, t.RenewDeadline, abort-(t.Retry+t.RenewDeadline-time.Second)), logging.Event, "config_warning")
	}
	if interval > fit {
		d.log.Info(fmt.Sprintf("watchdog lowered from %v to %v (retry %v + renew_deadline %v - TimeoutAbortSec %v)", interval, fit, t.Retry, t.RenewDeadline, abort))
		d.notify(fmt.Sprintf("WATCHDOG_USEC=%d", fit.Microseconds()))
		interval = fit
	}
	return interval
}
