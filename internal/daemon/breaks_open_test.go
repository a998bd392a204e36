//go:build breaks

package daemon

// Attacks on the watchdog allowance that still get through, kept to be
// run with -tags breaks until they are closed (the daemon README's list
// of open paths names them):
//
//   - a ping that reaches systemd long after its verdict, because the
//     notify socket is slow to be read (the daemon guards the time from
//     its verdict to the send, not the send itself);
//   - a StopUnit D-Bus call that hangs while the loop is idle: nothing the
//     watchdog reads moves, and BindsTo= never stops the unit.

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/unitlease/unitlease/internal/config"
	"github.com/unitlease/unitlease/internal/logging"
	"github.com/unitlease/unitlease/policy"
	"github.com/unitlease/unitlease/redislease"
	"github.com/unitlease/unitlease/unitctl"
)

// Attack: the watchdog's verdict and its ping are two moments. KillAllowance
// assumes the ping reaches systemd at the tick that checked the loops; a
// ping that reaches systemd later (the watchdog goroutine descheduled after
// its check on a loaded machine, a major page fault, a sendmsg that waits
// on PID 1's full notify queue; systemd stamps a ping when it reads it)
// certifies loops as they were at the check. A loop that hangs just after
// the check then has its last ping up to interval - check later than the
// allowance counts (a later delay lets the previous ping expire first).
//
// The test runs the real watchdog goroutine on a real supervisor whose
// step hangs right after a tick's check (its journal entry blocks under
// the supervisor's lock), with that one ping delivered 1.9 s after the
// check (interval 3 s: the previous ping, 1 s before the check, is still
// in force). It asserts what KillAllowance counts on: the last ping is at
// most a third of the interval after the loop got stuck.
func TestBreakWatchdogPingDeliveredAfterItsCheck(t *testing.T) {
	const (
		interval = 3 * time.Second
		abort    = time.Second
		delay    = 1900 * time.Millisecond // < interval - check: no earlier kill
	)
	synctest.Test(t, func(t *testing.T) {
		stuck, ps := hangAfterRenewal(t, interval, delay)
		if g := maxGap(ps, stuck.Add(-2*interval)); g > interval {
			t.Fatalf("a gap of %v between pings: systemd would have killed the daemon before the test's point", g)
		}
		last := ps[len(ps)-1]
		check := watchdogCheck(interval)
		killed := last.Add(interval + abort).Sub(stuck)
		if last.Sub(stuck) > check {
			t.Fatalf("a loop hung (busy from then on); the last ping reached systemd %v later, more than the check %v: "+
				"systemd kills the daemon %v after the loop got stuck, past KillAllowance(%v, %v) = %v by %v; "+
				"the lease span does not cover it (the ping's verdict was taken at the check, %v before it was delivered)",
				last.Sub(stuck), check, killed, interval, abort, KillAllowance(interval, abort),
				killed-KillAllowance(interval, abort), delay)
		}
	})
}

// Attack: the leader's deadline step is taken on time, and its StopUnit
// call hangs past stop_wait while the loop is idle (the stop runs outside
// any step; the lease's wake-up is Never while a stop and a renewal are
// outstanding). Nothing the watchdog reads moves: the daemon keeps
// pinging, is never killed, and BindsTo= never stops the unit, while the
// standby takes over once the record stayed unchanged for the lease span.
// The allowance covers a daemon that stops stepping, not an action that
// outlives the bound its caller promised (Units.Stop: within stop_wait).
func TestBreakWatchdogPingsWhileAStopHangs(t *testing.T) {
	const (
		interval = 600 * time.Millisecond
		abort    = 100 * time.Millisecond
	)
	synctest.Test(t, func(t *testing.T) {
		sd := &hangStop{fakeSystemd: newFakeSystemd(map[string]string{"db.service": "db"}), release: make(chan struct{})}
		store := &cutStore{memStore: newMemStore()}
		timing := testTiming
		timing.Allowance = KillAllowance(interval, abort)
		tm, err := timing.Resolved()
		if err != nil {
			t.Fatal(err)
		}
		logs := &syncBuffer{}
		var p pings
		d := New(&config.Config{Node: "node-a", Timing: tm}, logging.Text(logs, slog.LevelInfo), store, sd, unitctl.Config{}, func(s string) {
			if s == "WATCHDOG=1" {
				p.add(time.Now())
			}
		})
		d.clock = stillClock()
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		d.Reload(ctx)
		go d.watchdog(ctx, interval)
		time.Sleep(30 * time.Second)
		synctest.Wait()
		if !sd.isActive("db.service") {
			t.Fatalf("not leading after 30s:\n%s", logs)
		}
		// Redis unreachable from the leader, and systemd slow to take
		// the stop: the stop call hangs.
		cut := time.Now()
		sd.hang.Store(true)
		store.cut.Store(true)
		// The last successful renewal was sent before cut: its deadline
		// is before cut + retry + renew_deadline.
		bound := tm.Retry + tm.RenewDeadline + tm.Allowance + tm.StopWait
		time.Sleep(2 * tm.LeaseSpan)
		synctest.Wait()
		ps := p.all()
		active := sd.isActive("db.service")
		close(sd.release)
		cancel()
		last := ps[len(ps)-1]
		if active && time.Since(cut) > bound && last.Sub(cut) > bound-interval {
			t.Fatalf("renewals failing since %v, StopUnit hanging: %v later (twice the lease span %v; deadline + allowance + stop_wait is at most %v) "+
				"db.service still runs, the daemon still pings (last ping %v after the cut, gaps at most %v), so systemd never kills it "+
				"and BindsTo= never stops the unit, while a standby takes over at the lease span",
				cut.Format("15:04:05"), time.Since(cut), tm.LeaseSpan, bound, last.Sub(cut), maxGap(ps, cut))
		}
	})
}

// maxGap is the longest time between consecutive pings from from on
// (systemd would have killed the daemon if it exceeded the interval).
func maxGap(ps []time.Time, from time.Time) time.Duration {
	var g time.Duration
	for i := 1; i < len(ps); i++ {
		if ps[i].After(from) {
			g = max(g, ps[i].Sub(ps[i-1]))
		}
	}
	return g
}

// cutStore is memStore whose renewals fail while cut (Redis unreachable
// from the leader): the outcome is unknown.
type cutStore struct {
	*memStore
	cut atomic.Bool
}

func (c *cutStore) Renew(ctx context.Context, name string, held policy.Record) (policy.Record, error) {
	if c.cut.Load() {
		return policy.Record{}, redislease.ErrUnknown
	}
	return c.memStore.Renew(ctx, name, held)
}
