//go:build breaks

package daemon

// Attacks on the watchdog allowance that still get through, kept to be
// run with -tags breaks until they are closed (the README's known gaps
// name them):
//
//   - a ping that reaches systemd long after its verdict, because the
//     notify socket is slow to be read (the daemon guards the time from
//     its verdict to the send, not the send itself).

import (
	"testing"
	"testing/synctest"
	"time"
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
