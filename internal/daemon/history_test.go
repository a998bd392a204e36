package daemon

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/unitlease/unitlease/redislease"
	"github.com/unitlease/unitlease/unitctl"
)

// TestHistoryNotesWhyTheLeaseMoved: a drain notes its release as drain;
// the node that takes a lease over a held record its holder stopped
// renewing notes a crash from that holder, with its tenure's token; over
// a release whose note it finds, the note's reason; over a missing key,
// missing. A unit failure's release is noted as failure, and the count
// reaches Redis.
func TestHistoryNotesWhyTheLeaseMoved(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, store, d, logs, ctx, stop := drainLeading(t, redislease.Announcement{Node: "node-b", State: redislease.AnnounceReady, Lease: "a"})
		defer stop()
		synctest.Wait()
		if tr := store.transition("a"); tr.Why != "missing" || tr.To != "node-a" || tr.From != "" || tr.Token == 0 {
			t.Fatalf("first acquisition noted %+v, want missing, to node-a, with a token", tr)
		}
		taken := takeWhenReleased(ctx, store, "a", "node-b")
		if _, err := d.Drain(ctx, false); err != nil {
			t.Fatal(err)
		}
		rel := <-taken
		synctest.Wait()
		if r := store.release("a"); r.Why != "drain" || r.Version != rel.Version {
			t.Fatalf("the drain's release was noted %+v, want drain at version %d\n%s", r, rel.Version, logs)
		}
		if _, err := d.Undrain(ctx); err != nil {
			t.Fatal(err)
		}
		// node-b holds a and stops renewing: after the lease span node-a
		// takes it over, a crash.
		time.Sleep(2*d.cfg.Timing.LeaseSpan + d.cfg.Timing.PollMax)
		synctest.Wait()
		got := store.record("a")
		tr := store.transition("a")
		if got.Holder != "node-a" || tr.Why != "crash" || tr.From != "node-b" || tr.To != "node-a" || tr.Token <= rel.Version || tr.Token > got.Version {
			t.Fatalf("takeover noted %+v (record %v), want a crash from node-b\n%s", tr, got, logs)
		}
	})
}

// TestHistoryNotesAFailure: a unit that fails is released as failure,
// and node-a's count is noted.
func TestHistoryNotesAFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sd, store, _, logs, _, stop := drainLeading(t)
		defer stop()
		sd.set(func(f *fakeSystemd) { f.active["web.service"] = false })
		sd.events <- unitctl.Event{Unit: "web.service", Kind: unitctl.Failed, State: unitctl.UnitState{ActiveState: "failed", SubState: "failed"}}
		time.Sleep(time.Second)
		synctest.Wait()
		if r := store.release("a"); r.Why != "failure" {
			t.Fatalf("the failure's release was noted %+v\n%s", r, logs)
		}
		store.mu.Lock()
		n := store.failures["a"]
		store.mu.Unlock()
		if n != 1 {
			t.Fatalf("node-a's noted failure count %d, want 1", n)
		}
	})
}

func (f *memStore) transition(lease string) redislease.Transition {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.transitions[lease]
}

func (f *memStore) release(lease string) redislease.Release {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.releases[lease]
}
