package daemon

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/unitlease/unitlease/policy"
	"github.com/unitlease/unitlease/redislease"
)

// TestBreakDrainRacesTheAddOfASupervisor: a drain that runs while a
// reload adds a lease's supervisor (the first Reload of `unitlease run`
// comes after the control socket is served, so `unitlease drain` at boot
// races it; any later reload that adds a lease too). add reads
// d.withdrawn(lease) for policy.Config.Withdrawn before it puts the
// supervisor into d.sups; a Drain that sets drained and runs withdrawAll
// in between sees no such supervisor, and the new one competes: the
// drained node acquires the lease and starts the unit, while it reports
// itself drained (and announces drained).
//
// The interleaving is forced through the daemon's clock, which
// supervisor.New reads once (publish) between the two points of add.
//
// Fix: in add, insert the supervisor under d.mu and read d.withdrawn
// after the insert (or call sup.SetWithdrawn(ctx, d.withdrawn(lease))
// right after it, before sup.Start); Drain sets drained before
// withdrawAll reads d.sups, so one of the two then sees the other.
func TestBreakDrainRacesTheAddOfASupervisor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sd := newFakeSystemd(map[string]string{"web.service": "a"})
		store := newMemStore()
		store.announce(redislease.Announcement{Node: "node-b", State: redislease.AnnounceReady, Lease: "a"})
		d, logs := testDaemon(t, sd, store)
		d.stateDir = t.TempDir()
		ctx, cancel := context.WithCancel(t.Context())
		defer func() {
			cancel()
			d.Shutdown(context.WithoutCancel(ctx))
		}()
		clock := d.clock
		var once sync.Once
		d.clock = func() policy.Instant {
			once.Do(func() { // inside add, after policy.New, before d.sups has the supervisor
				if _, err := d.Drain(ctx, false); err != nil {
					t.Errorf("drain: %v", err)
				}
			})
			return clock()
		}
		d.Reload(ctx)
		time.Sleep(4 * d.cfg.Timing.LeaseSpan)
		synctest.Wait()
		if !d.Drained() {
			t.Fatalf("the node is not drained")
		}
		if sd.isActive("web.service") || heldBy(store, "a", "node-a") {
			t.Errorf("a drained node took lease a and started web.service (record %v, active %v, withdrawn %v):\n%s",
				store.record("a"), sd.isActive("web.service"), d.supervisors()[0].Withdrawn(), logs)
		}
	})
}

// TestBreakDrainThenAddIsWithdrawn: a lease annotated after the drain
// (a reload that adds it) starts withdrawn: it acquires nothing.
func TestBreakDrainThenAddIsWithdrawn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sd := newFakeSystemd(map[string]string{})
		store := newMemStore()
		d, logs := testDaemon(t, sd, store)
		d.stateDir = t.TempDir()
		ctx, cancel := context.WithCancel(t.Context())
		defer func() {
			cancel()
			d.Shutdown(context.WithoutCancel(ctx))
		}()
		d.Reload(ctx)
		if _, err := d.Drain(ctx, false); err != nil {
			t.Fatal(err)
		}
		sd.set(func(f *fakeSystemd) { f.annotated["web.service"] = "a" })
		d.Reload(ctx)
		time.Sleep(4 * d.cfg.Timing.LeaseSpan)
		synctest.Wait()
		if sd.isActive("web.service") || store.record("a").Present {
			t.Errorf("a lease added to a drained node was taken: record %v, active %v\n%s", store.record("a"), sd.isActive("web.service"), logs)
		}
	})
}
