package daemon

// Adversarial review of commit 267da82: ways through the pending stop
// that were open, with the real watchdog goroutine. Each failed on that
// commit and passes since the fix (a stop is taken only when systemd has
// it or it succeeded; a supervisor ended with its stop pending is still
// read by the watchdog).

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/unitlease/unitlease/policy"
)

// Attack (closed): WatchdogSec=30s (TimeoutAbortSec=1s), the default timing
// (stop_wait 10s): a configuration `run` accepts, its lease span grown by
// the allowance. Redis is cut off and every StopUnit call times out at
// stop_wait without systemd having the stop. The pending stop is late
// from the check/2 after the deadline, but the call returns at stop_wait
// and stop() counts a returned Stop as taken: the pending stop is
// cleared, the watchdog pings again before systemd's 30 s are up, and the
// stop tried again after stop_failed carries no deadline. systemd never
// kills the daemon; the unit runs on, and a standby takes over at the
// lease span.
func TestBreakStopLateErrorAtStopWaitResumesPings(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		deadline, killed, tm := stopTimesOut(t, policy.DefaultTiming(), 30*time.Second, time.Second)
		if killed.IsZero() {
			t.Fatalf("WatchdogSec 30s, stop_wait %v, Redis cut and every StopUnit timing out unseen by systemd: "+
				"two lease spans (%v) after the deadline %v the daemon still pings within WatchdogSec and the unit still runs; "+
				"a standby took over at the lease span", tm.StopWait, 2*tm.LeaseSpan, deadline.Format("15:04:05.000"))
		}
	})
}

// Attack (closed): the lease is lost (Redis lost the key and a peer
// acquired it) while this node's StopUnit hangs before systemd has it,
// and a reload then moves db.service to another lease (an annotation
// edited, a unit added to the group: any change of the lease's units).
// remove() hands off only a lease that is held; this one is not, so its
// supervisor is ended and deleted from d.sups at once, its stop still
// hanging, and the watchdog, which reads only d.sups, no longer sees the
// pending stop. The new lease's supervisor stops db.service as its
// startup stop (no deadline), which hangs too. The daemon keeps pinging;
// db.service runs here while the peer runs it. Now the removal keeps the
// lease (and its pending stop, which the watchdog sees) until the stop
// gets through, and only then unmanages it.
func TestBreakStopLateForgottenWhenALostLeaseIsRemoved(t *testing.T) {
	const interval = 600 * time.Millisecond
	synctest.Test(t, func(t *testing.T) {
		var d *Daemon
		deadline, last, logs := lossThenHang(t, interval, func(ctx context.Context, dd *Daemon, sd *hangStop) {
			d = dd
			sd.set(func(f *fakeSystemd) { f.annotated = map[string]string{"db.service": "db2"} })
			d.Reload(ctx)
			if !d.hasLease("db") {
				t.Fatal("the reload unmanaged lease db, its stop after the loss still hanging")
			}
		})
		time.Sleep(d.cfg.Timing.StopWait) // the stop, let go, gets through
		synctest.Wait()
		if !strings.Contains(logs.String(), "no longer managed (lease db)") {
			t.Fatalf("lease db not removed once its stop got through:\n%s", logs)
		}
		if late := last.Sub(deadline); late > watchdogCheck(interval) {
			t.Fatalf("lease lost, StopUnit hanging, lease removed by a reload: the last ping came %v after the deadline %v, "+
				"past the check %v; db.service still runs", late, deadline.Format("15:04:05.000"), watchdogCheck(interval))
		}
	})
}
