package daemon

import (
	"context"
	"slices"
	"testing"
	"testing/synctest"
)

// TestGCPercent: half the default target up to 2,000 leases, then a
// headroom that stays what it is at 2,000, down to 20 at 5,000 and past.
func TestGCPercent(t *testing.T) {
	for _, c := range []struct{ leases, want int }{
		{0, 50}, {1000, 50}, {2000, 50}, {2500, 40}, {4000, 25}, {5000, 20}, {20000, 20},
	} {
		if got := GCPercent(c.leases); got != c.want {
			t.Errorf("GCPercent(%d) = %d, want %d", c.leases, got, c.want)
		}
	}
}

// TestSteadyStateTellsTheGCTargetItsLeases: once the first discovery is
// over and the summary stays as it was, the watchdog loop tells the GC
// target the number of leases, once per steady state, and not while the
// summary changes.
func TestSteadyStateTellsTheGCTargetItsLeases(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d, _, _ := startingDaemon(t, newFakeSystemd(annotatedUnits(7)), newMemStore(), nil)
		var told []int
		d.gcTarget = func(leases int) { told = append(told, leases) }
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		<-firstReloading(ctx, d)
		d.updateStatus() // a new summary
		if len(told) != 0 {
			t.Fatalf("told %v while the summary changed", told)
		}
		d.updateStatus() // the same: settled
		d.updateStatus()
		if !slices.Equal(told, []int{7}) {
			t.Fatalf("told %v over one steady state of 7 leases, want [7]", told)
		}
		d.Shutdown(ctx)
	})
}
