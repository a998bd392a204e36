package daemon

// Adversarial review of relinquishForGood: a lease removed (its
// annotation removed, its unit refused) or a daemon shutting down first
// relinquishes the lease, then makes the supervisor ineligible and waits
// until it neither holds the lease nor has an acquisition in flight (or
// its stop failed), so that an acquisition that lands after is given
// back, not left held, unrenewed, until its TTL.

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/unitlease/unitlease/policy"
	"github.com/unitlease/unitlease/redislease"
)

// startCounter is fakeSystemd that counts each unit's starts.
type startCounter struct {
	*fakeSystemd
	mu     sync.Mutex
	starts map[string]int
}

func (s *startCounter) Start(ctx context.Context, unit string) error {
	s.mu.Lock()
	if s.starts == nil {
		s.starts = map[string]int{}
	}
	s.starts[unit]++
	s.mu.Unlock()
	return s.fakeSystemd.Start(ctx, unit)
}

func (s *startCounter) started(unit string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.starts[unit]
}

// unknownStore is memStore whose Acquire of one lease waits for a gate,
// writes the record, and answers ErrUnknown: the reply was lost (or came
// after reply_max, as redislease's bounded requests report it), the write
// was applied.
type unknownStore struct {
	*memStore
	lease   string
	gate    chan struct{}
	entered chan struct{}
	once    sync.Once
}

func (s *unknownStore) Acquire(ctx context.Context, name string, seen policy.Record) (policy.Record, error) {
	if name != s.lease {
		return s.memStore.Acquire(ctx, name, seen)
	}
	s.once.Do(func() { close(s.entered) })
	<-s.gate
	if _, err := s.memStore.Acquire(ctx, name, seen); err != nil {
		return policy.Record{}, err
	}
	return policy.Record{}, fmt.Errorf("%w: lease:%s: i/o timeout", redislease.ErrUnknown, name)
}

// releasedBy seeds the store with lease released by node at version 5,
// so that an acquisition over it starts at once (Starting), with no
// confirmation wait.
func releasedBy(m *memStore, lease, node string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.write(lease, policy.Record{Present: true, Holder: node, Version: 5, Token: fmt.Sprintf("%032x", 99), Released: true})
}

// acquiringNow adds the annotated leases (one Reload) and returns once
// lease's acquisition has begun (entered) and every goroutine waits; it
// fails the test if the lease is not acquiring then.
func acquiringNow(t *testing.T, d *Daemon, lease string, entered <-chan struct{}, logs *syncBuffer) {
	t.Helper()
	d.Reload(t.Context())
	<-entered
	synctest.Wait()
	if s := d.find(lease); s == nil || s.Status().Role != policy.Acquiring.String() {
		t.Fatalf("%s is not acquiring:\n%s", lease, logs)
	}
}

// endLease ends lease's supervisor the way how says, on a goroutine of
// its own: "removal" removes every annotation and reloads, "shutdown"
// shuts the daemon down as SIGTERM does. The channel closes once that
// returns.
func endLease(ctx context.Context, d *Daemon, sd *fakeSystemd, how string) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		switch how {
		case "removal":
			sd.set(func(f *fakeSystemd) { f.annotated = map[string]string{} })
			d.Reload(ctx)
		case "shutdown":
			d.Shutdown(context.WithoutCancel(ctx))
		}
	}()
	return done
}

// TestBreakForGoodAcquiredOverARecordNeverStarts: the acquisition under
// way is over a released record, so it lands in Starting (no
// confirmation wait), not Confirming as the commit's tests do. Removed or
// shut down while it is in flight, the lease must be given back without
// its unit ever being started: the machine took Ineligible before the
// answer, so acquired gives up before any StartUnit.
func TestBreakForGoodAcquiredOverARecordNeverStarts(t *testing.T) {
	for _, how := range []string{"removal", "shutdown"} {
		t.Run(how, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				sd := &startCounter{fakeSystemd: newFakeSystemd(map[string]string{"a.service": "a"})}
				mem := newMemStore()
				releasedBy(mem, "a", "node-b")
				acq := make(chan struct{})
				store := &gatedStore{memStore: mem, lease: "a", gate: acq, entered: make(chan struct{})}
				d, _, logs := startingDaemon(t, sd, store, nil)
				acquiringNow(t, d, "a", store.entered, logs)
				done := endLease(t.Context(), d, sd.fakeSystemd, how)
				synctest.Wait()
				select {
				case <-done:
					t.Fatalf("the %s ended while a's acquisition was under way:\n%s", how, logs)
				default:
				}
				close(acq)
				<-done
				synctest.Wait()
				rec := mem.record("a")
				if sd.started("a.service") != 0 || sd.isActive("a.service") {
					t.Fatalf("a's unit was started (%d times) by an acquisition that landed after the %s:\n%s", sd.started("a.service"), how, logs)
				}
				if !rec.Released || rec.Holder != "node-a" {
					t.Fatalf("a after the %s during its acquisition: record %v, want released by node-a:\n%s", how, rec, logs)
				}
				if how == "removal" && d.hasLease("a") {
					t.Fatalf("a still managed after its removal:\n%s", logs)
				}
			})
		})
	}
}

// TestBreakForGoodUnitsChangedWhileAcquiring: a lease whose units change
// (a.service, then a.service and a2.service) while its acquisition is
// under way is removed and added anew in one reload. The reload must wait
// out the old supervisor's acquisition (given back), and the new
// supervisor then take the lease and run both units; one supervisor only.
func TestBreakForGoodUnitsChangedWhileAcquiring(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sd := newFakeSystemd(map[string]string{"a.service": "a"})
		acq := make(chan struct{})
		store := &gatedStore{memStore: newMemStore(), lease: "a", gate: acq, entered: make(chan struct{})}
		d, _, logs := startingDaemon(t, sd, store, nil)
		acquiringNow(t, d, "a", store.entered, logs)
		old := d.find("a")
		sd.set(func(f *fakeSystemd) { f.annotated = map[string]string{"a.service": "a", "a2.service": "a"} })
		done := make(chan struct{})
		go func() {
			d.Reload(t.Context())
			close(done)
		}()
		synctest.Wait()
		select {
		case <-done:
			t.Fatalf("the reload ended while the old supervisor's acquisition was under way:\n%s", logs)
		default:
		}
		close(acq)
		<-done
		synctest.Wait()
		if !ended(old) {
			t.Fatalf("the old supervisor of a did not end:\n%s", logs)
		}
		time.Sleep(3 * d.cfg.Timing.CrashBound())
		synctest.Wait()
		s := d.find("a")
		if s == nil || s == old || len(s.Units) != 2 {
			t.Fatalf("a is not managed anew with both units (%v):\n%s", s, logs)
		}
		if rec := store.record("a"); rec.Holder != "node-a" || rec.Released || !sd.isActive("a.service") || !sd.isActive("a2.service") {
			t.Fatalf("a with its new units: record %v, a active %v, a2 active %v:\n%s", rec, sd.isActive("a.service"), sd.isActive("a2.service"), logs)
		}
	})
}

// TestBreakForGoodAcquireUnknown: the acquisition in flight as the lease
// is removed (or the daemon shuts down) is applied, but its answer is
// lost: AcquireUnknown (redislease's answer to a reply not within
// reply_max). The machine forgets (Standby, nothing held), the wait ends
// at once, the supervisor ends, and the record it wrote stays held by
// node-a, unrenewed, unreleased: peers wait it out a lease span (its TTL
// in Redis is a day). It fails on the current code.
func TestBreakForGoodAcquireUnknown(t *testing.T) {
	t.Skip("open: an acquisition applied but answered AcquireUnknown as the lease is removed or the daemon shuts down leaves the record held by this node, unrenewed, until peers age it out (the ineligible machine forgets it and the wait ends on Standby)")
	for _, how := range []string{"removal", "shutdown"} {
		t.Run(how, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				sd := newFakeSystemd(map[string]string{"a.service": "a"})
				acq := make(chan struct{})
				store := &unknownStore{memStore: newMemStore(), lease: "a", gate: acq, entered: make(chan struct{})}
				d, _, logs := startingDaemon(t, sd, store, nil)
				acquiringNow(t, d, "a", store.entered, logs)
				done := endLease(t.Context(), d, sd, how)
				synctest.Wait()
				close(acq)
				<-done
				time.Sleep(3 * d.cfg.Timing.CrashBound())
				synctest.Wait()
				if rec := store.record("a"); sd.isActive("a.service") || (rec.Present && !rec.Released) {
					t.Fatalf("a after the %s during an acquisition answered unknown: active %v, record %v (managed %v):\n%s", how, sd.isActive("a.service"), rec, d.hasLease("a"), logs)
				}
			})
		})
	}
}

// TestBreakForGoodAcquireLate: the acquisition's answer (a success, with
// the record written) comes after reply_max. The machine counts it as
// unknown (late: forget), though it has the exact record it wrote and the
// unit never started: it could release it. The wait ends on Standby, the
// supervisor ends, and the record stays held by node-a. It fails on the
// current code.
func TestBreakForGoodAcquireLate(t *testing.T) {
	t.Skip("open: an acquisition answered (successfully) after reply_max as the lease is removed or the daemon shuts down leaves the record it wrote held by this node, unrenewed, though the machine has it and could release it")
	for _, how := range []string{"removal", "shutdown"} {
		t.Run(how, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				sd := newFakeSystemd(map[string]string{"a.service": "a"})
				acq := make(chan struct{})
				store := &gatedStore{memStore: newMemStore(), lease: "a", gate: acq, entered: make(chan struct{})}
				d, _, logs := startingDaemon(t, sd, store, nil)
				acquiringNow(t, d, "a", store.entered, logs)
				done := endLease(t.Context(), d, sd, how)
				time.Sleep(2 * d.cfg.Timing.ReplyMax) // the answer is late
				synctest.Wait()
				close(acq)
				<-done
				time.Sleep(3 * d.cfg.Timing.CrashBound())
				synctest.Wait()
				if rec := store.record("a"); sd.isActive("a.service") || (rec.Present && !rec.Released) {
					t.Fatalf("a after the %s during an acquisition answered late: active %v, record %v (managed %v):\n%s", how, sd.isActive("a.service"), rec, d.hasLease("a"), logs)
				}
			})
		})
	}
}

// TestBreakForGoodSIGTERMDuringRemoval: a SIGHUP's reload removes a lease
// whose acquisition is under way, and SIGTERM (the loop's ctx) comes
// while it waits. The wait must not give up on ctx (it did: remove saw
// the lease not held and ended the supervisor, the reload returned,
// Shutdown no longer saw the lease, and the acquisition landed after,
// the record left held by node-a, unrenewed).
func TestBreakForGoodSIGTERMDuringRemoval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sd := newFakeSystemd(map[string]string{"a.service": "a"})
		acq := make(chan struct{})
		store := &gatedStore{memStore: newMemStore(), lease: "a", gate: acq, entered: make(chan struct{})}
		d, _, logs := startingDaemon(t, sd, store, nil)
		acquiringNow(t, d, "a", store.entered, logs)
		ctx, sigterm := context.WithCancel(t.Context())
		done := endLease(ctx, d, sd, "removal")
		synctest.Wait()
		sigterm()
		synctest.Wait()
		select {
		case <-done:
			t.Fatalf("the removal gave up on SIGTERM while a's acquisition was under way:\n%s", logs)
		default:
		}
		close(acq) // (a store bounds it by reply_max)
		<-done
		d.Shutdown(context.WithoutCancel(ctx)) // as the loop does next
		time.Sleep(3 * d.cfg.Timing.CrashBound())
		synctest.Wait()
		if rec := store.record("a"); sd.isActive("a.service") || (rec.Present && !rec.Released) {
			t.Fatalf("a removed, then SIGTERM during its acquisition: active %v, record %v (managed %v):\n%s", sd.isActive("a.service"), rec, d.hasLease("a"), logs)
		}
	})
}

// TestBreakForGoodRemovedAfterALossWhileTheStopFails: db runs here; a
// peer takes its record (a partition), so the renewal finds it lost:
// stop, which fails (stop_failed, not holding). Its annotation is then
// removed. The wait ends on StopFailed, remove sees the lease not held and
// ends the supervisor and removes the drop-in: nobody tries the stop
// again, and the unit runs on here for good, next to the peer's copy. A
// supervisor left alone would have stopped it at its next try, once the
// stop can succeed. It fails on the current code (and did before the
// commit: relinquish returned at once for a lease not held).
func TestBreakForGoodRemovedAfterALossWhileTheStopFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sd, store, d, logs, ctx, _ := lead(t)
		sd.set(func(f *fakeSystemd) { f.stuck["db.service"] = true })
		store.steal("db", "node-b")
		time.Sleep(2 * d.cfg.Timing.Retry)
		synctest.Wait()
		if s := d.find("db"); s == nil || s.Holding() || s.Status().Role != policy.StopFailed.String() {
			t.Fatalf("db is not stop_failed, unheld, after its loss:\n%s", logs)
		}
		sd.set(func(f *fakeSystemd) { f.annotated = map[string]string{} })
		d.Reload(ctx)
		sd.set(func(f *fakeSystemd) { f.stuck["db.service"] = false })
		time.Sleep(3 * d.cfg.Timing.StopWait)
		synctest.Wait()
		if sd.isActive("db.service") {
			t.Fatalf("db removed while its stop failed: still active (managed %v) and never stopped again:\n%s", d.hasLease("db"), logs)
		}
	})
}

// TestBreakForGoodRefusedWithEligibilityPending: a's drop-in is checked in
// effect (InEffect: SetEligibleSoon(true), not yet flushed by a step of
// its own), then its second check fails and install removes it:
// SetEligible(false) must have the last word over the pending flush, and
// a is never acquired nor started, nor managed.
func TestBreakForGoodRefusedWithEligibilityPending(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sd := newFakeSystemd(map[string]string{"a.service": "a", "b.service": "b"})
		w := &failAfterCheck{fakeSystemd: sd, failLate: map[string]bool{"a.service": true}}
		store := newMemStore()
		d, _, logs := startingDaemon(t, w, store, nil)
		d.Reload(t.Context())
		time.Sleep(3 * d.cfg.Timing.CrashBound())
		synctest.Wait()
		if rec := store.record("a"); rec.Present || sd.isActive("a.service") || d.hasLease("a") {
			t.Fatalf("a, refused after its check: record %v, active %v, managed %v:\n%s", rec, sd.isActive("a.service"), d.hasLease("a"), logs)
		}
		if !sd.isActive("b.service") {
			t.Fatalf("b does not run:\n%s", logs)
		}
	})
}

// TestBreakForGoodSleepWhileAcquiring: the machine is about to sleep
// while a lease's acquisition is under way (over a released record). The
// handoff before sleep found nothing held; the lock must stay until the
// acquisition is answered, and the lease it brings be given back (never
// started), not held, its unit running, as the machine sleeps (it did:
// the lock closed at once, the unit started, the lease lapsed in the
// sleep and ran on beside a peer's copy after the resume). While asleep
// the node acquires nothing; after the resume it competes again.
func TestBreakForGoodSleepWhileAcquiring(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sd := newFakeSystemd(map[string]string{"a.service": "a"})
		mem := newMemStore()
		releasedBy(mem, "a", "node-b")
		acq := make(chan struct{})
		store := &gatedStore{memStore: mem, lease: "a", gate: acq, entered: make(chan struct{})}
		d, _, logs := startingDaemon(t, sd, store, nil)
		acquiringNow(t, d, "a", store.entered, logs)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		lg := &fakeLogind{sigs: make(chan bool)}
		go d.handleSleep(ctx, lg)
		synctest.Wait()
		lg.sigs <- true
		synctest.Wait()
		first, _ := lg.lock(0)
		select {
		case <-first.closed:
			t.Fatalf("the lock closed for sleep while a's acquisition was under way:\n%s", logs)
		default:
		}
		close(acq)     // answered in time (a store bounds it by reply_max)
		<-first.closed // the machine may sleep from here on
		synctest.Wait()
		if rec := store.record("a"); sd.isActive("a.service") || (rec.Present && !rec.Released) {
			t.Fatalf("a as the machine sleeps: active %v, record %v:\n%s", sd.isActive("a.service"), rec, logs)
		}
		time.Sleep(3 * d.cfg.Timing.CrashBound())
		synctest.Wait()
		if rec := store.record("a"); sd.isActive("a.service") || (rec.Present && !rec.Released) {
			t.Fatalf("a acquired while the machine sleeps: active %v, record %v:\n%s", sd.isActive("a.service"), rec, logs)
		}
		lg.sigs <- false
		time.Sleep(3 * d.cfg.Timing.CrashBound())
		synctest.Wait()
		if rec := store.record("a"); !sd.isActive("a.service") || rec.Holder != "node-a" {
			t.Fatalf("a not taken again after the resume: active %v, record %v:\n%s", sd.isActive("a.service"), rec, logs)
		}
	})
}
