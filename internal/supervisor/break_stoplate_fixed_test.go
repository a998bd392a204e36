package supervisor

// Adversarial review of commit 267da82: ways through the pending stop
// that were open. Each failed on that commit and passes since the fix (a
// stop is taken only when systemd has it or it succeeded; a stop tried
// again adopts what is pending; the deadline moves with renewals).

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/unitlease/unitlease/policy"
)

// timedOutStops is fakeUnits whose stops, once hung, never reach
// systemd: each call waits stop_wait (unitctl.Stop's own bound on its
// ctx) and returns an error, without calling queued, the unit still
// running: a StopUnit call that times out, or keeps failing on a D-Bus
// connection that systemd does not answer on.
type timedOutStops struct {
	*fakeUnits
	hang  atomic.Bool
	calls atomic.Int32
}

func (h *timedOutStops) Stop(ctx context.Context, unit string, queued func()) (bool, error) {
	if h.hang.Load() {
		h.calls.Add(1)
		time.Sleep(testTiming.StopWait)
		return false, errors.New(unit + ": StopUnit: context deadline exceeded")
	}
	return h.fakeUnits.Stop(ctx, unit, queued)
}

// Attack (closed): the stop the deadline forced never reaches systemd, but
// the call returns, with an error, after stop_wait. stop() counts a
// returned Stop as taken whatever it returned, so the pending stop is
// cleared although systemd never had it; the retry after stop_wait is
// "a stop tried again" and carries no deadline. From stop_wait after the
// deadline on, nothing is late while the unit runs: the watchdog pings
// again, and unless systemd killed the daemon within that stop_wait
// (WatchdogSec + a sixth of it + timer slack < stop_wait, true of the
// packaged and fast profiles, false of WatchdogSec=30s with the default
// stop_wait 10s), the unit runs on while a standby takes over at the
// lease span. See TestBreakStopLateErrorAtStopWaitResumesPings
// (daemon) for the pings.
func TestBreakStopLateClearedByAStopSystemdNeverTook(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &fakeStore{t: t, noRelease: true}
		units := &timedOutStops{fakeUnits: &fakeUnits{}}
		s, clock, cancel := leadWith(t, store, units, func() bool { r, _, _ := units.state(); return r }, "demo.service")
		defer cancel()
		units.hang.Store(true)
		store.mu.Lock()
		store.cut = true
		store.mu.Unlock()
		const within = 100 * time.Millisecond
		var by policy.Instant
		for range 200 { // 20 s, 6 lease spans of testTiming
			time.Sleep(100 * time.Millisecond)
			synctest.Wait()
			if p := s.stopping.Load(); p != nil && by == 0 {
				by = policy.Instant(p.by.Load())
			}
			running, _, _ := units.state()
			now := clock()
			if by != 0 && running && now.Sub(by) > within && !s.StopLate(now, within) {
				t.Fatalf("%v after the deadline %v, after %d stop calls none of which systemd took, the unit still running: "+
					"no stop is late (pending %+v): the watchdog pings again", now.Sub(by), by, units.calls.Load(), s.stopping.Load())
			}
		}
		if by == 0 {
			t.Fatal("no pending stop seen")
		}
		cancel()
		units.hang.Store(false)
		time.Sleep(testTiming.StopWait) // the stop calls under way return
		synctest.Wait()
	})
}

// Attack (closed, a false alarm): a handoff's stop carries the deadline
// of the last renewal before the handoff; the node keeps renewing while
// it stops (renewing() includes Stopping), and every renewal succeeds,
// so no peer can take the lease, and the deadline the lease span counts
// from moves on. By does not: a StopUnit call that takes longer than
// renew_deadline - reply_max + the check/2 (at the least; up to retry
// more) makes the stop late, the watchdog withholds its ping, and, if
// it takes WatchdogSec longer, systemd kills the daemon and, through
// BindsTo=, stops every unit of every lease on the node.
func TestBreakStopLateStaleByWhileRenewalsSucceed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &fakeStore{t: t}
		units := &slowStops{fakeUnits: &fakeUnits{}, release: make(chan struct{})}
		s, clock, cancel := leadWith(t, store, units, func() bool { r, _, _ := units.state(); return r }, "demo.service")
		defer cancel()
		defer close(units.release)
		units.hang.Store(true)
		s.Handoff(t.Context())
		synctest.Wait()
		const within = 100 * time.Millisecond
		handoff := clock()
		for range 100 { // 10 s
			time.Sleep(100 * time.Millisecond)
			synctest.Wait()
			s.mu.Lock()
			last := s.machine.LastRenewal()
			s.mu.Unlock()
			now := clock()
			trueDeadline := last.Add(testTiming.Retry + testTiming.RenewDeadline)
			if s.StopLate(now, within) && now.Sub(trueDeadline) <= within {
				p := s.stopping.Load()
				t.Fatalf("handoff at %v, StopUnit still in the call: late at %v (%v after the handoff) against By %v, "+
					"though the last renewal, sent at %v, succeeded and puts the deadline at %v: the watchdog withholds its ping for a lease nobody can take",
					handoff, now, now.Sub(handoff), policy.Instant(p.by.Load()), last, trueDeadline)
			}
		}
	})
}
