package daemon

// Adversarial review of unitctl.Plan.InEffect: a lease is made eligible
// as soon as its own units' drop-ins are checked in effect, while Install
// still runs; leases with a failed unit (or all, on an Install error) are
// removed after Install returns.

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/unitlease/unitlease/policy"
	"github.com/unitlease/unitlease/unitctl"
)

// failAfterCheck is fakeSystemd whose Install reports units failed after
// their InEffect was called: the real Install's second check, after a
// second reload, failing a unit the first check passed.
type failAfterCheck struct {
	*fakeSystemd
	failLate map[string]bool
	mu       sync.Mutex
	plans    []*unitctl.Plan // every plan Install was given
}

func (w *failAfterCheck) Install(ctx context.Context, plans []*unitctl.Plan) (map[string]error, error) {
	w.mu.Lock()
	w.plans = append(w.plans, plans...)
	w.mu.Unlock()
	failed, err := w.fakeSystemd.Install(ctx, plans)
	for _, p := range plans {
		if w.failLate[p.Unit] {
			if failed == nil {
				failed = map[string]error{}
			}
			failed[p.Unit] = fmt.Errorf("%s: %w: overridden by a later drop-in (second check)", p.Unit, unitctl.ErrDropIn)
		}
	}
	return failed, err
}

func (w *failAfterCheck) Recheck(ctx context.Context, plans []*unitctl.Plan) (map[string]error, error) {
	for _, p := range plans {
		if p.InEffect != nil {
			panic("Recheck given a plan with InEffect set: " + p.Unit)
		}
	}
	return w.fakeSystemd.Recheck(ctx, plans)
}

func (d *Daemon) hasLease(lease string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.sups[lease] != nil
}

// TestBreakInEffectTwoUnitsOneFailsNeverEligible: lease ab has two units;
// a1's drop-in is checked, a2's fails. ab must never be acquired nor
// either unit started, neither while Install goes on (c's check held)
// nor after.
func TestBreakInEffectTwoUnitsOneFailsNeverEligible(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sd := newFakeSystemd(map[string]string{"a1.service": "ab", "a2.service": "ab", "c.service": "c"})
		gate := make(chan struct{})
		sd.holdCheck = map[string]chan struct{}{"c.service": gate}
		sd.badDropIn = map[string]bool{"a2.service": true}
		w := &installWatch{fakeSystemd: sd}
		store := newMemStore()
		d, _, logs := startingDaemon(t, w, store, nil)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		done := firstReloading(ctx, d)
		time.Sleep(3 * d.cfg.Timing.CrashBound())
		synctest.Wait()
		if store.record("ab").Present || sd.isActive("a1.service") || sd.isActive("a2.service") {
			t.Fatalf("ab, with a2's drop-in failed, acquired or started during Install (record %v):\n%s", store.record("ab"), logs)
		}
		close(gate)
		<-done
		time.Sleep(3 * d.cfg.Timing.CrashBound())
		synctest.Wait()
		if store.record("ab").Present || sd.isActive("a1.service") || sd.isActive("a2.service") || d.hasLease("ab") {
			t.Fatalf("ab acquired, started or still managed (record %v):\n%s", store.record("ab"), logs)
		}
		if !sd.isActive("c.service") {
			t.Fatalf("c does not run:\n%s", logs)
		}
	})
}

// TestBreakInEffectTwoUnitsWaitForBoth: lease ab's a1 is checked at once,
// a2's check is held: ab stays out until a2 is checked too.
func TestBreakInEffectTwoUnitsWaitForBoth(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sd := newFakeSystemd(map[string]string{"a1.service": "ab", "a2.service": "ab", "c.service": "c"})
		gate := make(chan struct{})
		sd.holdCheck = map[string]chan struct{}{"a2.service": gate}
		store := newMemStore()
		d, _, logs := startingDaemon(t, sd, store, nil)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		done := firstReloading(ctx, d)
		time.Sleep(3 * d.cfg.Timing.CrashBound())
		synctest.Wait()
		if store.record("ab").Present || sd.isActive("a1.service") || sd.isActive("a2.service") {
			t.Fatalf("ab acquired or started with a2 not yet checked (record %v):\n%s", store.record("ab"), logs)
		}
		close(gate)
		<-done
		time.Sleep(d.cfg.Timing.CrashBound())
		synctest.Wait()
		if store.record("ab").Holder != "node-a" || !sd.isActive("a1.service") || !sd.isActive("a2.service") || !sd.isActive("c.service") {
			t.Fatalf("ab or c does not run once checked (record %v):\n%s", store.record("ab"), logs)
		}
	})
}

// TestBreakInEffectCheckedThenFailsIsStoppedAndReleased: a's drop-in is
// checked (InEffect: a is eligible, acquires and starts while b's check
// is held), then the second check fails it. a must be stopped and its
// lease released, never left running, nor started again; no plan keeps
// its InEffect after Install (Recheck panics on one).
func TestBreakInEffectCheckedThenFailsIsStoppedAndReleased(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sd := newFakeSystemd(map[string]string{"a.service": "a", "b.service": "b"})
		gate := make(chan struct{})
		sd.holdCheck = map[string]chan struct{}{"b.service": gate}
		w := &failAfterCheck{fakeSystemd: sd, failLate: map[string]bool{"a.service": true}}
		store := newMemStore()
		d, _, logs := startingDaemon(t, w, store, nil)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		done := firstReloading(ctx, d)
		time.Sleep(3 * d.cfg.Timing.CrashBound())
		synctest.Wait()
		if !sd.isActive("a.service") || store.record("a").Holder != "node-a" {
			t.Fatalf("a, checked, does not run during b's check (record %v):\n%s", store.record("a"), logs)
		}
		close(gate)
		<-done
		time.Sleep(3 * d.cfg.Timing.CrashBound())
		synctest.Wait()
		if rec := store.record("a"); sd.isActive("a.service") || (rec.Present && !rec.Released) || d.hasLease("a") {
			t.Fatalf("a, failed in the second check: active %v, record %v, managed %v:\n%s", sd.isActive("a.service"), rec, d.hasLease("a"), logs)
		}
		if !sd.isActive("b.service") || store.record("b").Holder != "node-a" {
			t.Fatalf("b does not run (record %v):\n%s", store.record("b"), logs)
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		for _, p := range w.plans {
			if p.InEffect != nil {
				t.Errorf("%s's plan keeps InEffect after Install", p.Unit)
			}
		}
	})
}

// TestBreakInEffectInstallErrorAfterAStart: a is checked and runs while
// b's check is held; then Install fails as a whole (a second reload
// failed). a must be stopped and released; b never acquired or started.
func TestBreakInEffectInstallErrorAfterAStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sd := newFakeSystemd(map[string]string{"a.service": "a", "b.service": "b"})
		gate := make(chan struct{})
		sd.holdCheck = map[string]chan struct{}{"b.service": gate}
		w := &installWatch{fakeSystemd: sd}
		w.installErr.Store(true)
		store := newMemStore()
		d, _, logs := startingDaemon(t, w, store, nil)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		done := firstReloading(ctx, d)
		time.Sleep(3 * d.cfg.Timing.CrashBound())
		synctest.Wait()
		if !sd.isActive("a.service") {
			t.Fatalf("a, checked, does not run during b's check:\n%s", logs)
		}
		close(gate)
		<-done
		time.Sleep(3 * d.cfg.Timing.CrashBound())
		synctest.Wait()
		for _, l := range []string{"a", "b"} {
			if rec := store.record(l); sd.isActive(l+".service") || (rec.Present && !rec.Released) || d.hasLease(l) {
				t.Fatalf("%s after Install failed: active %v, record %v, managed %v:\n%s", l, sd.isActive(l+".service"), rec, d.hasLease(l), logs)
			}
		}
	})
}

// gatedStore is memStore whose Acquire of one lease waits for a gate.
type gatedStore struct {
	*memStore
	lease   string
	gate    chan struct{}
	entered chan struct{} // if not nil, closed as the first Acquire of lease begins
	once    sync.Once
}

func (s *gatedStore) Acquire(ctx context.Context, name string, seen policy.Record) (policy.Record, error) {
	if name == s.lease {
		if s.entered != nil {
			s.once.Do(func() { close(s.entered) })
		}
		<-s.gate
	}
	return s.memStore.Acquire(ctx, name, seen)
}

// TestBreakInEffectRemovedWhileAcquiring: a is checked (eligible) and its
// acquisition is under way when the second check fails it and install
// removes it. remove must not end the supervisor while the acquisition
// may still land: once it does, the lease is given back (released, its
// unit never started), not left held by this node, unrenewed, until its
// TTL. The same holds when an annotation is removed while the lease is
// being acquired.
func TestBreakInEffectRemovedWhileAcquiring(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sd := newFakeSystemd(map[string]string{"a.service": "a", "b.service": "b"})
		gate := make(chan struct{})
		sd.holdCheck = map[string]chan struct{}{"b.service": gate}
		w := &failAfterCheck{fakeSystemd: sd, failLate: map[string]bool{"a.service": true}}
		acq := make(chan struct{})
		store := &gatedStore{memStore: newMemStore(), lease: "a", gate: acq, entered: make(chan struct{})}
		d, _, logs := startingDaemon(t, w, store, nil)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		done := firstReloading(ctx, d)
		<-store.entered // in time: the answer is not late
		synctest.Wait()
		d.mu.Lock()
		r := d.sups["a"]
		d.mu.Unlock()
		if r == nil || r.sup.Status().Role != policy.Acquiring.String() {
			t.Fatalf("a is not acquiring when b's check ends:\n%s", logs)
		}
		close(gate)
		synctest.Wait()
		select {
		case <-done:
			t.Fatalf("the reload ended, and a's supervisor with it, while a's acquisition was under way:\n%s", logs)
		default:
		}
		close(acq)
		time.Sleep(3 * d.cfg.Timing.CrashBound())
		<-done
		synctest.Wait()
		if rec := store.record("a"); sd.isActive("a.service") || (rec.Present && !rec.Released) || d.hasLease("a") {
			t.Fatalf("a removed while acquiring: active %v, record %v, managed %v:\n%s", sd.isActive("a.service"), rec, d.hasLease("a"), logs)
		}
	})
}

// TestShutdownWhileAcquiring: SIGTERM comes while a lease's acquisition
// is under way. Shutdown must not end the supervisor before the answer:
// the lease it brings is given back (released, the unit never started),
// not left held by a daemon that is gone until its TTL.
func TestShutdownWhileAcquiring(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sd := newFakeSystemd(map[string]string{"a.service": "a"})
		acq := make(chan struct{})
		store := &gatedStore{memStore: newMemStore(), lease: "a", gate: acq, entered: make(chan struct{})}
		d, _, logs := startingDaemon(t, sd, store, nil)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		<-firstReloading(ctx, d)
		<-store.entered
		synctest.Wait()
		down := make(chan struct{})
		go func() {
			d.Shutdown(ctx)
			close(down)
		}()
		synctest.Wait()
		select {
		case <-down:
			t.Fatalf("Shutdown returned while a's acquisition was under way:\n%s", logs)
		default:
		}
		close(acq)
		<-down
		if rec := store.record("a"); sd.isActive("a.service") || (rec.Present && !rec.Released) {
			t.Fatalf("a after a shutdown during its acquisition: active %v, record %v:\n%s", sd.isActive("a.service"), rec, logs)
		}
	})
}
