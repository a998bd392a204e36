package daemon

import (
	"context"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// TestFirstDiscoveryAgesTheLeaseSpanWhileSystemdReloads: the supervisors
// of the added leases start before their drop-ins are written, and
// systemd's reload (thousands of units) takes longer than a lease span.
// Meanwhile they stop the units and observe the missing record, but
// acquire nothing and start nothing: the guard is not in place yet. Once
// the drop-ins are in effect, the span they already aged counts: the
// unit runs within the confirm wait and a poll, not another lease span.
func TestFirstDiscoveryAgesTheLeaseSpanWhileSystemdReloads(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sd := newFakeSystemd(map[string]string{"db.service": "db"})
		sd.active["db.service"] = true // left running by a daemon that died
		slow := make(chan struct{})
		sd.slowInstall = slow
		store := newMemStore()
		d, _, logs := startingDaemon(t, sd, store, nil)
		tm := d.cfg.Timing
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		done := firstReloading(ctx, d)
		time.Sleep(3 * tm.CrashBound())
		synctest.Wait()
		if sd.isActive("db.service") {
			t.Fatalf("the unit runs (or was never stopped) before its drop-in was written:\n%s", logs)
		}
		if rec := store.record("db"); rec.Present {
			t.Fatalf("lease acquired before the unit's drop-in was written: %v\n%s", rec, logs)
		}
		d.mu.Lock()
		r := d.sups["db"]
		d.mu.Unlock()
		if r == nil || !r.sup.Ineligible() {
			t.Fatalf("no ineligible supervisor for db while systemd reloads: %v", r)
		}
		close(slow)
		<-done
		if r.sup.Ineligible() {
			t.Fatal("db still ineligible after its drop-in was installed")
		}
		within := tm.ConfirmWait() + tm.PollMax + 2*tm.ReplyMax
		if within >= tm.LeaseSpan {
			t.Fatalf("test timing: %v is not shorter than the lease span %v", within, tm.LeaseSpan)
		}
		time.Sleep(within)
		synctest.Wait()
		if !sd.isActive("db.service") || store.record("db").Holder != "node-a" {
			t.Fatalf("not running %v after the drop-in was installed (record %v):\n%s", within, store.record("db"), logs)
		}
	})
}

// TestADropInThatFailsUnmanagesItsLeaseUnstarted: a unit whose drop-in
// is not in effect after the reload (a later drop-in overrides it) takes
// its lease out: its supervisor, started ineligible, ends without ever
// acquiring, its unit never started here, with a config_error; the
// other lease runs.
func TestADropInThatFailsUnmanagesItsLeaseUnstarted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sd := newFakeSystemd(map[string]string{"db.service": "db", "web.service": "web"})
		sd.badDropIn = map[string]bool{"db.service": true}
		store := newMemStore()
		d, _, logs := startingDaemon(t, sd, store, nil)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		<-firstReloading(ctx, d)
		time.Sleep(3 * d.cfg.Timing.CrashBound())
		synctest.Wait()
		if sd.isActive("db.service") || store.record("db").Present {
			t.Fatalf("db runs, or its lease was taken (%v), though its drop-in failed:\n%s", store.record("db"), logs)
		}
		d.mu.Lock()
		_, kept := d.sups["db"]
		d.mu.Unlock()
		if kept {
			t.Fatal("db still has a supervisor though its drop-in failed")
		}
		if !strings.Contains(logs.String(), "UNITLEASE_EVENT=config_error") || !strings.Contains(logs.String(), "overridden by a later drop-in") {
			t.Fatalf("no config_error naming the failed drop-in:\n%s", logs)
		}
		if !sd.isActive("web.service") || store.record("web").Holder != "node-a" {
			t.Fatalf("web does not run (record %v):\n%s", store.record("web"), logs)
		}
		sd.mu.Lock()
		installed := slices.Clone(sd.installed)
		sd.mu.Unlock()
		if len(installed) != 2 {
			t.Fatalf("Install got %q, want both units in one call", installed)
		}
	})
}

// TestALeaseIsEligibleOnceItsOwnDropInIsChecked: the check of the
// drop-ins after systemd's reload takes a while at thousands of units. A
// lease whose units are checked runs while the others are still being
// checked; a lease whose unit is not checked yet stays out, however
// long its check takes.
func TestALeaseIsEligibleOnceItsOwnDropInIsChecked(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sd := newFakeSystemd(map[string]string{"a.service": "a", "b.service": "b"})
		gate := make(chan struct{})
		sd.holdCheck = map[string]chan struct{}{"b.service": gate}
		store := newMemStore()
		d, _, logs := startingDaemon(t, sd, store, nil)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		done := firstReloading(ctx, d)
		time.Sleep(3 * d.cfg.Timing.CrashBound())
		synctest.Wait()
		if !sd.isActive("a.service") || store.record("a").Holder != "node-a" {
			t.Fatalf("a, checked, does not run while b's check goes on (record %v):\n%s", store.record("a"), logs)
		}
		if sd.isActive("b.service") || store.record("b").Present {
			t.Fatalf("b runs, or its lease was taken (%v), before its drop-in was checked:\n%s", store.record("b"), logs)
		}
		close(gate)
		<-done
		time.Sleep(d.cfg.Timing.CrashBound())
		synctest.Wait()
		if !sd.isActive("b.service") || store.record("b").Holder != "node-a" {
			t.Fatalf("b does not run once checked (record %v):\n%s", store.record("b"), logs)
		}
	})
}
