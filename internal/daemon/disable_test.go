package daemon

import (
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/unitlease/unitlease/redislease"
)

// TestDisableStopsTheLeaderAndKeepsEveryNodeOff: a lease disabled while
// this node leads is stopped here (journalled "stopping (disabled)"),
// released in the holder's name, announced disabled, and not taken again
// however long it waits; enabled, the node takes it again.
func TestDisableStopsTheLeaderAndKeepsEveryNodeOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sd, store, d, logs, ctx, stop := drainLeading(t)
		defer stop()
		store.disable("a", true)
		d.reexclude(ctx)
		time.Sleep(d.cfg.Timing.StopWait)
		synctest.Wait()
		if sd.isActive("web.service") {
			t.Fatalf("web.service runs after its lease was disabled:\n%s", logs)
		}
		rec := store.record("a")
		if !rec.Released || rec.Holder != "node-a" {
			t.Fatalf("record after the disable: %v, want released by node-a", rec)
		}
		if !strings.Contains(logs.String(), "web.service: stopping (disabled)") || !strings.Contains(logs.String(), "UNITLEASE_EVENT=disabled") {
			t.Fatalf("the journal does not say the lease was disabled:\n%s", logs)
		}
		if !announces(store, redislease.Announcement{Node: "node-a", State: redislease.AnnounceDisabled, Lease: "a"}) {
			t.Fatalf("node-a announces %v, not disabled", store.announced())
		}
		for range 4 {
			time.Sleep(d.cfg.Timing.LeaseSpan)
			d.reexclude(ctx)
			synctest.Wait()
			if sd.isActive("web.service") || heldBy(store, "a", "node-a") {
				t.Fatalf("the disabled lease was taken again: %v\n%s", store.record("a"), logs)
			}
		}
		store.disable("a", false)
		d.reexclude(ctx)
		time.Sleep(d.cfg.Timing.PollMax + d.cfg.Timing.ReplyMax)
		synctest.Wait()
		if !sd.isActive("web.service") || !heldBy(store, "a", "node-a") {
			t.Fatalf("the enabled lease was not taken again: %v\n%s", store.record("a"), logs)
		}
	})
}

// TestDisableRacesAnAcquisition: a standby that reads the lease
// disabled only after it sent its acquisition gets it refused by the
// store (the acquire script's check): nothing starts.
func TestDisableRacesAnAcquisition(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sd := newFakeSystemd(map[string]string{"web.service": "a"})
		store := newMemStore()
		d, logs := testDaemon(t, sd, store)
		ctx, cancel := t.Context(), func() {}
		defer cancel()
		store.disable("a", true) // the daemon has not read it: no round ran
		d.Reload(ctx)
		time.Sleep(3 * d.cfg.Timing.LeaseSpan)
		synctest.Wait()
		if sd.isActive("web.service") || store.record("a").Present {
			t.Fatalf("a disabled lease was acquired before the daemon read it disabled: %v\n%s", store.record("a"), logs)
		}
		d.Shutdown(ctx)
	})
}
