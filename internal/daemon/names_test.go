package daemon

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// TestUnitsAndLeasesAreMatchedByTheirOwnNames: a lease may be named like
// another lease's unit. The guard matches unit names only, so a start of
// web.service is judged by its own lease a, not by the lease named
// web.service; a handoff takes a lease's name first, then a unit's.
func TestUnitsAndLeasesAreMatchedByTheirOwnNames(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sd := newFakeSystemd(map[string]string{"web.service": "a", "other.service": "web.service"})
		store := newMemStore()
		d, logs := testDaemon(t, sd, store)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		d.Reload(ctx)
		time.Sleep(30 * time.Second)
		synctest.Wait()
		if !sd.isActive("web.service") || !sd.isActive("other.service") {
			t.Fatalf("not leading both leases:\n%s", logs)
		}
		err := d.Guard(ctx, "web.service")
		if err == nil || !strings.Contains(err.Error(), "for lease a ") {
			t.Errorf("guard of web.service: %v, want a refusal naming its own lease a", err)
		}
		if err := d.Guard(ctx, "a"); err == nil || !strings.Contains(err.Error(), "not managed") {
			t.Errorf("guard of a lease name: %v, want not managed (a unit name only)", err)
		}
		for name, want := range map[string]string{"web.service": "web.service", "other.service": "web.service", "a": "a"} {
			if s, err := d.target(name); err != nil || s.Lease != want {
				t.Errorf("handoff of %s selects %v (%v), want lease %s (a lease's name first, then a unit's)", name, s, err, want)
			}
		}
		cancel()
		d.Shutdown(context.WithoutCancel(ctx))
	})
}
