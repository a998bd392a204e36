package daemon

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// TestLeasesNamedAfterEachOthersUnitsAreHandedOffByName: two leases
// named after each other's units (x.service's lease is y.service,
// y.service's is x.service) are each reached by their own name. Before,
// a name that was both a lease and another lease's unit was refused, so
// neither lease could be handed off at all.
func TestLeasesNamedAfterEachOthersUnitsAreHandedOffByName(t *testing.T) {
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
