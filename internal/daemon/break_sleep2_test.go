package daemon

// Adversarial review of the withdrawal before sleep (f976e01): from
// PrepareForSleep(true) the node is withdrawn from every lease
// (d.asleep, read by withdrawn()), the leases held are handed off
// (relinquishAll) and settle waits until no supervisor holds a lease or
// acquires one before the delay lock closes; PrepareForSleep(false), or
// handleSleep's return, clears asleep and re-applies the withdrawal.
// These tests race the other things the withdrawal depends on (the
// drain, a disable, a reload that adds a lease) with the sleep, bring
// the sleep in each state a lease may be in, and look at what the peers
// are told (the announcements).

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/unitlease/unitlease/policy"
	"github.com/unitlease/unitlease/redislease"
)

// sleeping2 runs handleSleep over a fakeLogind on ctx; done closes once
// it returns.
func sleeping2(ctx context.Context, d *Daemon) (lg *fakeLogind, done <-chan struct{}) {
	lg = &fakeLogind{sigs: make(chan bool)}
	ch := make(chan struct{})
	go func() {
		defer close(ch)
		d.handleSleep(ctx, lg)
	}()
	synctest.Wait()
	return lg, ch
}

// asleep2 sends PrepareForSleep(true) and returns once the first lock
// closed (the machine may sleep from then on).
func asleep2(t *testing.T, lg *fakeLogind, logs *syncBuffer) {
	t.Helper()
	lg.sigs <- true
	first, _ := lg.lock(0)
	if first == nil {
		t.Fatalf("no lock was taken:\n%s", logs)
	}
	<-first.closed
	synctest.Wait()
}

// idle2 lets three crash bounds pass and fails the test if this node
// holds lease or runs unit then.
func idle2(t *testing.T, d *Daemon, sd *fakeSystemd, store *memStore, lease, unit, when string, logs *syncBuffer) {
	t.Helper()
	time.Sleep(3 * d.cfg.Timing.CrashBound())
	synctest.Wait()
	if heldBy(store, lease, "node-a") || sd.isActive(unit) {
		t.Fatalf("%s: lease %s taken (record %v, %s active %v):\n%s", when, lease, store.record(lease), unit, sd.isActive(unit), logs)
	}
}

// leads2 lets three crash bounds pass and fails the test unless this
// node holds lease and runs unit then.
func leads2(t *testing.T, d *Daemon, sd *fakeSystemd, store *memStore, lease, unit, when string, logs *syncBuffer) {
	t.Helper()
	time.Sleep(3 * d.cfg.Timing.CrashBound())
	synctest.Wait()
	if !heldBy(store, lease, "node-a") || !sd.isActive(unit) {
		t.Fatalf("%s: lease %s not taken (record %v, %s active %v):\n%s", when, lease, store.record(lease), unit, sd.isActive(unit), logs)
	}
}

// TestBreakSleep2UndrainWhileAsleep: a drain and an undrain while the
// machine sleeps (both call withdrawAll under d.wmu) must not let the
// node compete: asleep still withdraws it. After the resume it competes.
func TestBreakSleep2UndrainWhileAsleep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sd, store, d, logs, ctx, stop := drainLeading(t)
		defer stop()
		lg, _ := sleeping2(ctx, d)
		asleep2(t, lg, logs)
		if heldBy(store, "a", "node-a") || sd.isActive("web.service") {
			t.Fatalf("a as the lock closed: record %v, active %v:\n%s", store.record("a"), sd.isActive("web.service"), logs)
		}
		if _, err := d.Drain(ctx, false); err != nil {
			t.Fatal(err)
		}
		if _, err := d.Undrain(ctx); err != nil {
			t.Fatal(err)
		}
		idle2(t, d, sd, store, "a", "web.service", "undrained while asleep", logs)
		lg.sigs <- false
		leads2(t, d, sd, store, "a", "web.service", "after the resume", logs)
	})
}

// TestBreakSleep2ResumeKeepsADrain: a drain while the machine sleeps
// outlives the resume (setAsleep(false) re-reads withdrawn(), it does
// not clear the withdrawal); the undrain after it lets the node compete.
func TestBreakSleep2ResumeKeepsADrain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sd, store, d, logs, ctx, stop := drainLeading(t)
		defer stop()
		lg, _ := sleeping2(ctx, d)
		asleep2(t, lg, logs)
		if _, err := d.Drain(ctx, false); err != nil {
			t.Fatal(err)
		}
		lg.sigs <- false
		idle2(t, d, sd, store, "a", "web.service", "drained while asleep, then resumed", logs)
		if !d.Drained() || !d.supervisors()[0].Withdrawn() {
			t.Fatalf("after the resume: drained %v, withdrawn %v", d.Drained(), d.supervisors()[0].Withdrawn())
		}
		if _, err := d.Undrain(ctx); err != nil {
			t.Fatal(err)
		}
		leads2(t, d, sd, store, "a", "web.service", "undrained after the resume", logs)
	})
}

// TestBreakSleep2EnableWhileAsleep: a lease disabled before the sleep
// and enabled while the machine sleeps (reexclude's SetWithdrawn) stays
// withdrawn until the resume.
func TestBreakSleep2EnableWhileAsleep(t *testing.T) {
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
		lg, _ := sleeping2(ctx, d)
		asleep2(t, lg, logs)
		store.disable("a", false)
		d.reexclude(ctx)
		idle2(t, d, sd, store, "a", "web.service", "enabled while asleep", logs)
		lg.sigs <- false
		leads2(t, d, sd, store, "a", "web.service", "after the resume", logs)
	})
}

// TestBreakSleep2ReloadAddsALeaseWhileAsleep: a lease annotated while
// the machine sleeps (add reads d.withdrawn(lease) for the machine's
// Config) starts withdrawn: it is not acquired until the resume.
func TestBreakSleep2ReloadAddsALeaseWhileAsleep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sd, store, d, logs, ctx, stop := drainLeading(t)
		defer stop()
		lg, _ := sleeping2(ctx, d)
		asleep2(t, lg, logs)
		sd.set(func(f *fakeSystemd) { f.annotated["db.service"] = "b" })
		d.Reload(ctx)
		idle2(t, d, sd, store, "b", "db.service", "added while asleep", logs)
		idle2(t, d, sd, store, "a", "web.service", "reloaded while asleep", logs)
		if s := d.find("b"); s == nil || !s.Withdrawn() {
			t.Fatalf("b added while asleep is not withdrawn:\n%s", logs)
		}
		lg.sigs <- false
		leads2(t, d, sd, store, "b", "db.service", "after the resume", logs)
		leads2(t, d, sd, store, "a", "web.service", "after the resume", logs)
	})
}

// TestBreakSleep2RacesTheAddOfASupervisor: the sleep comes inside add,
// after policy.New read d.withdrawn(lease) (false) and before the
// supervisor is in d.sups (forced through the daemon's clock, read once
// by supervisor.New in between, as TestBreakDrainRacesTheAddOfASupervisor
// does): setAsleep's withdrawAll, relinquishAll and settle all miss it
// and the lock closes. add's own SetWithdrawn under d.wmu must still
// withdraw it: nothing is acquired while asleep, and after the resume
// the lease is taken.
func TestBreakSleep2RacesTheAddOfASupervisor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sd := newFakeSystemd(map[string]string{"web.service": "a"})
		store := newMemStore()
		releasedBy(store, "a", "node-b")
		d, logs := testDaemon(t, sd, store)
		d.stateDir = t.TempDir()
		ctx, cancel := context.WithCancel(t.Context())
		defer func() {
			cancel()
			d.Shutdown(context.WithoutCancel(ctx))
		}()
		lg, _ := sleeping2(ctx, d)
		clock := d.clock
		var once sync.Once
		d.clock = func() policy.Instant {
			once.Do(func() { // inside add, between policy.New and d.sups
				lg.sigs <- true
				first, _ := lg.lock(0)
				<-first.closed
			})
			return clock()
		}
		d.Reload(ctx)
		idle2(t, d, sd, store, "a", "web.service", "added as the sleep came", logs)
		if s := d.find("a"); s == nil || !s.Withdrawn() {
			t.Fatalf("a, added as the sleep came, is not withdrawn:\n%s", logs)
		}
		lg.sigs <- false
		leads2(t, d, sd, store, "a", "web.service", "after the resume", logs)
	})
}

// TestBreakSleep2ConfirmingWhenTheSleepComes: a lease acquired over a
// missing key waits in Confirming when the sleep comes. The withdrawal
// gives it back (released at once, its unit never started) and the lock
// closes only after the release.
func TestBreakSleep2ConfirmingWhenTheSleepComes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fsd := newFakeSystemd(map[string]string{"web.service": "a"})
		sc := &startCounter{fakeSystemd: fsd}
		store := newMemStore()
		d, _, logs := startingDaemon(t, sc, store, nil)
		ctx, cancel := context.WithCancel(t.Context())
		defer func() {
			cancel()
			d.Shutdown(context.WithoutCancel(ctx))
		}()
		d.Reload(ctx)
		lg, _ := sleeping2(ctx, d)
		for range 100000 {
			if s := d.find("a"); s != nil && s.Status().Role == policy.Confirming.String() {
				break
			}
			time.Sleep(10 * time.Millisecond)
			synctest.Wait()
		}
		if s := d.find("a"); s == nil || s.Status().Role != policy.Confirming.String() {
			t.Fatalf("a never confirming:\n%s", logs)
		}
		var atClose policy.Record
		lg.atClose = func() { atClose = store.record("a") }
		asleep2(t, lg, logs)
		if atClose.Present && !atClose.Released {
			t.Fatalf("the lock closed with a held: %v:\n%s", atClose, logs)
		}
		idle2(t, d, fsd, store, "a", "web.service", "confirming as the sleep came", logs)
		if n := sc.started("web.service"); n != 0 {
			t.Fatalf("web.service started %d times:\n%s", n, logs)
		}
		lg.sigs <- false
		leads2(t, d, fsd, store, "a", "web.service", "after the resume", logs)
	})
}

// cancelStart is fakeSystemd whose start of one unit waits until a stop
// of that unit is issued, which cancels it (as systemd's stop job
// replaces a start job still waiting): the start fails, the unit never
// became active.
type cancelStart struct {
	*fakeSystemd
	unit    string
	entered chan struct{}
	mu      sync.Mutex
	pending chan struct{}
}

func (c *cancelStart) Start(ctx context.Context, unit string) error {
	if unit != c.unit {
		return c.fakeSystemd.Start(ctx, unit)
	}
	ch := make(chan struct{})
	c.mu.Lock()
	c.pending = ch
	c.mu.Unlock()
	close(c.entered)
	<-ch
	return errors.New(unit + ": job canceled")
}

func (c *cancelStart) Stop(ctx context.Context, unit string, stopWait time.Duration) error {
	c.mu.Lock()
	if unit == c.unit && c.pending != nil {
		close(c.pending)
		c.pending = nil
	}
	c.mu.Unlock()
	return c.fakeSystemd.Stop(ctx, unit, stopWait)
}

// TestBreakSleep2StartingWhenTheSleepComes: the sleep comes while a
// lease's start job is under way (Starting). relinquishAll hands it off
// (the stop cancels the start), and the lock closes only once the lease
// is released; nothing runs and nothing is taken while asleep.
func TestBreakSleep2StartingWhenTheSleepComes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fsd := newFakeSystemd(map[string]string{"web.service": "a"})
		w := &cancelStart{fakeSystemd: fsd, unit: "web.service", entered: make(chan struct{})}
		store := newMemStore()
		releasedBy(store, "a", "node-b")
		d, _, logs := startingDaemon(t, w, store, nil)
		ctx, cancel := context.WithCancel(t.Context())
		defer func() {
			cancel()
			d.Shutdown(context.WithoutCancel(ctx))
		}()
		d.Reload(ctx)
		lg, _ := sleeping2(ctx, d)
		<-w.entered
		synctest.Wait()
		if s := d.find("a"); s == nil || s.Status().Role != policy.Starting.String() {
			t.Fatalf("a is not starting:\n%s", logs)
		}
		var atClose policy.Record
		lg.atClose = func() { atClose = store.record("a") }
		asleep2(t, lg, logs)
		if !atClose.Released || fsd.isActive("web.service") {
			t.Fatalf("the lock closed with a %v, web.service active %v:\n%s", atClose, fsd.isActive("web.service"), logs)
		}
		idle2(t, d, fsd, store, "a", "web.service", "starting as the sleep came", logs)
	})
}

// TestBreakSleep2StopFailsAtSleep: the handoff before sleep whose stop
// fails keeps the lease held (never released while the unit may run),
// and settle does not wait for it (the lock closes). Once the stop
// succeeds while the node is still asleep, the lease is released and not
// taken again until the resume.
func TestBreakSleep2StopFailsAtSleep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sd, store, d, logs, ctx, stop := drainLeading(t)
		defer stop()
		sd.set(func(f *fakeSystemd) { f.stuck["web.service"] = true })
		lg, _ := sleeping2(ctx, d)
		var atClose policy.Record
		lg.atClose = func() { atClose = store.record("a") }
		asleep2(t, lg, logs)
		if atClose.Released || atClose.Holder != "node-a" {
			t.Fatalf("the stop failed, yet the lease was %v as the lock closed:\n%s", atClose, logs)
		}
		if s := d.find("a"); s == nil || s.Status().Role != policy.StopFailed.String() {
			t.Fatalf("a is not stop_failed:\n%s", logs)
		}
		sd.set(func(f *fakeSystemd) { f.stuck["web.service"] = false })
		time.Sleep(2 * d.cfg.Timing.StopWait)
		synctest.Wait()
		if rec := store.record("a"); !rec.Released || sd.isActive("web.service") {
			t.Fatalf("the stop tried again succeeded, but a is %v, active %v:\n%s", rec, sd.isActive("web.service"), logs)
		}
		idle2(t, d, sd, store, "a", "web.service", "stopped late while asleep", logs)
		lg.sigs <- false
		leads2(t, d, sd, store, "a", "web.service", "after the resume", logs)
	})
}

// TestBreakSleep2TwiceWithoutAResume: a second PrepareForSleep(true)
// with no resume between (the first one's lock is gone) hands off again,
// keeps the node withdrawn, and takes no lock; the one resume after it
// lets the node compete and takes one new lock.
func TestBreakSleep2TwiceWithoutAResume(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sd, store, d, logs, ctx, stop := drainLeading(t)
		defer stop()
		lg, _ := sleeping2(ctx, d)
		asleep2(t, lg, logs)
		lg.sigs <- true
		synctest.Wait()
		if l, _ := lg.lock(1); l != nil {
			t.Fatalf("a lock taken on the second PrepareForSleep(true)")
		}
		idle2(t, d, sd, store, "a", "web.service", "after two sleeps", logs)
		lg.sigs <- false
		leads2(t, d, sd, store, "a", "web.service", "after the resume", logs)
		if l, closes := lg.lock(1); l == nil || closes != 0 {
			t.Fatalf("no new lock held after the resume")
		}
		if l, _ := lg.lock(2); l != nil {
			t.Fatalf("two new locks after one resume")
		}
	})
}

// TestBreakSleep2LogindGoneWhileAsleep: the connection to logind ends
// while the node is withdrawn for the sleep: no resume will be
// delivered, and the node must not stay out of every lease for good
// (handleSleep's deferred setAsleep(false)).
func TestBreakSleep2LogindGoneWhileAsleep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sd, store, d, logs, ctx, stop := drainLeading(t)
		defer stop()
		lg, done := sleeping2(ctx, d)
		asleep2(t, lg, logs)
		idle2(t, d, sd, store, "a", "web.service", "asleep", logs)
		close(lg.sigs)
		<-done
		if d.asleep.Load() {
			t.Fatalf("still asleep after handleSleep returned")
		}
		leads2(t, d, sd, store, "a", "web.service", "after logind went away", logs)
	})
}

// TestBreakSleep2AnnouncesWhileAsleep: from PrepareForSleep(true) the
// node takes no lease, and must not go on announcing itself ready for
// each (its Redis connection, and so its subscriptions, outlive the
// sleep until Redis's tcp-keepalive): a peer's `unitlease drain` or
// `handoff`, or its failback to a preferred node, would hand the lease
// to the sleeping node, released and taken by nobody for the lease span.
// It failed before the sleep announced (the node drained meanwhile).
func TestBreakSleep2AnnouncesWhileAsleep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, store, d, logs, ctx, stop := drainLeading(t)
		defer stop()
		lg, _ := sleeping2(ctx, d)
		asleep2(t, lg, logs)
		if announces(store, redislease.Announcement{Node: "node-a", State: redislease.AnnounceReady, Lease: "a"}) {
			t.Fatalf("withdrawn for the sleep, node-a announces %v", store.announced())
		}
		if err := d.readyFor(ctx, "a", "node-a"); err == nil {
			t.Fatalf("node-a is ready for a")
		}
	})
}

// TestBreakSleep2AnnouncesReadyAfterTheResume: anything that announces
// while the node sleeps (a reload, an undrain, an exclusion that
// changed) announces every lease excluded (withdrawn() is true); the
// resume must announce, or the node, competing again, stays announced
// excluded until the next such change: a peer's handoff --to it refused,
// a peer's drain finding no ready peer, failback never coming to it. It
// failed before the resume announced.
func TestBreakSleep2AnnouncesReadyAfterTheResume(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sd, store, d, logs, ctx, stop := drainLeading(t)
		defer stop()
		lg, _ := sleeping2(ctx, d)
		asleep2(t, lg, logs)
		d.Reload(ctx) // a SIGHUP, or systemd's daemon-reload, while asleep
		lg.sigs <- false
		leads2(t, d, sd, store, "a", "web.service", "after the resume", logs)
		if !announces(store, redislease.Announcement{Node: "node-a", State: redislease.AnnounceReady, Lease: "a"}) {
			t.Fatalf("resumed and competing, node-a announces %v", store.announced())
		}
	})
}

// TestBreakSleep2LockWaitsForAStopAfterALoss: the node lost lease a (a
// renewal found it held elsewhere) and its stop is under way, slow, when
// the sleep comes. The lock must stay until the stop got through: it
// closed at once when settle took a supervisor that held nothing and did
// not acquire as settled, and the machine slept with web.service active,
// beside the peer's copy. The same for the startup stop of a unit found
// running.
func TestBreakSleep2LockWaitsForAStopAfterALoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sd, store, d, logs, ctx, stop := drainLeading(t)
		defer stop()
		gate := make(chan struct{})
		sd.set(func(f *fakeSystemd) { f.slow = map[string]chan struct{}{"web.service": gate} })
		store.steal("a", "node-b")
		for range 100000 {
			if st := d.find("a").Status(); st.Role == policy.Stopping.String() && !st.Holding {
				break
			}
			time.Sleep(10 * time.Millisecond)
			synctest.Wait()
		}
		if st := d.find("a").Status(); st.Role != policy.Stopping.String() || st.Holding {
			t.Fatalf("a is %s (holding %v), not stopping after the loss:\n%s", st.Role, st.Holding, logs)
		}
		lg, _ := sleeping2(ctx, d)
		var activeAtClose bool
		lg.atClose = func() { activeAtClose = sd.isActive("web.service") }
		lg.sigs <- true
		time.Sleep(d.cfg.Timing.ReplyMax) // well within sleepLimit
		synctest.Wait()
		first, _ := lg.lock(0)
		select {
		case <-first.closed:
			t.Errorf("the lock closed for sleep while web.service, its lease lost, was still being stopped (active %v):\n%s", activeAtClose, logs)
		default:
		}
		close(gate) // the stop gets through
		<-first.closed
		synctest.Wait()
		if activeAtClose || sd.isActive("web.service") {
			t.Fatalf("web.service active as the lock closed (%v), or after its stop (%v):\n%s", activeAtClose, sd.isActive("web.service"), logs)
		}
	})
}
