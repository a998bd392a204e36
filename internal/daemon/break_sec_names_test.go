//go:build breaks

package daemon

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// TestBreakSecLeaseNamedLikeAnotherUnitCannotBeHandedOff: target refuses
// a name that is both a lease and another lease's unit. A lease can then
// still be named by one of its units, unless every one of them is also
// a lease's name: two leases named after each other's unit
// (x.service's lease is y.service, y.service's is x.service) cannot be
// handed off at all (contrived, but accepted at discovery). Fix: let
// handoff say which it means (--lease/--unit, or lease:NAME), or refuse
// such names at discovery.
func TestBreakSecLeaseNamedLikeAnotherUnitCannotBeHandedOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sd := newFakeSystemd(map[string]string{"x.service": "y.service", "y.service": "x.service"})
		store := newMemStore()
		d, _ := testDaemon(t, sd, store)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		d.Reload(ctx)
		time.Sleep(30 * time.Second)
		synctest.Wait()
		found := false
		for _, name := range []string{"x.service", "y.service"} {
			if s, err := d.target(name); err == nil && s.Lease == "x.service" {
				found = true
			}
		}
		if !found {
			_, err := d.target("x.service")
			t.Errorf("no name handoff takes selects the lease x.service: %v", err)
		}
		cancel()
		d.Shutdown(context.WithoutCancel(ctx))
	})
}
