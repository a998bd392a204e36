package daemon

// Adversarial review of the first discovery that starts the supervisors
// of the added leases ineligible before their drop-ins are written
// (install), and makes them eligible with SetEligibleSoon afterwards.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/unitlease/unitlease/policy"
	"github.com/unitlease/unitlease/unitctl"
)

// installWatch is fakeSystemd that notes every start made while an
// Install is under way (or after the last one failed), and whose Install
// and Recheck can be made to fail.
type installWatch struct {
	*fakeSystemd
	installing   atomic.Bool
	installErr   atomic.Bool // Install fails as a whole
	noDropIn     atomic.Bool // Install failed: no drop-in is in effect
	recheckBad   atomic.Bool // Recheck finds every drop-in defeated
	mu           sync.Mutex
	earlyStarts  []string // units started while Install ran, or with no drop-in
	installCalls int
}

func (w *installWatch) Start(ctx context.Context, unit string) error {
	if w.installing.Load() || w.noDropIn.Load() {
		w.mu.Lock()
		w.earlyStarts = append(w.earlyStarts, unit)
		w.mu.Unlock()
	}
	return w.fakeSystemd.Start(ctx, unit)
}

func (w *installWatch) Install(ctx context.Context, plans []*unitctl.Plan) (map[string]error, error) {
	w.installing.Store(true)
	defer w.installing.Store(false)
	w.mu.Lock()
	w.installCalls++
	w.mu.Unlock()
	failed, err := w.fakeSystemd.Install(ctx, plans)
	if w.installErr.Load() {
		w.noDropIn.Store(true)
		return nil, errors.New("daemon-reload: connection reset")
	}
	w.noDropIn.Store(false)
	return failed, err
}

func (w *installWatch) Recheck(_ context.Context, plans []*unitctl.Plan) (map[string]error, error) {
	if !w.recheckBad.Load() {
		return nil, nil
	}
	failed := map[string]error{}
	for _, p := range plans {
		failed[p.Unit] = fmt.Errorf("%s: %w: removed by systemctl revert", p.Unit, unitctl.ErrDropIn)
	}
	return failed, nil
}

func (w *installWatch) early() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.earlyStarts...)
}

// TestBreakWitnessedReleaseDuringInstallWaits: a peer holds db when the
// daemon starts, and hands it to this node by name (then plainly) while
// systemd reloads for longer than a lease span: the ineligible standby
// witnesses the release but neither acquires nor starts before Install
// returned; once it has, it takes the release at its next poll, without
// waiting another lease span.
func TestBreakWitnessedReleaseDuringInstallWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sd := newFakeSystemd(map[string]string{"db.service": "db"})
		slow := make(chan struct{})
		sd.slowInstall = slow
		w := &installWatch{fakeSystemd: sd}
		store := newMemStore()
		store.mu.Lock()
		store.write("db", policy.Record{Holder: "node-b", Version: 5, Token: strings.Repeat("b", 32)})
		store.mu.Unlock()
		d, _, logs := startingDaemon(t, w, store, nil)
		tm := d.cfg.Timing
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		done := firstReloading(ctx, d)
		time.Sleep(2 * tm.PollMax) // node-a saw node-b's record
		synctest.Wait()
		store.mu.Lock() // node-b hands off to node-a
		store.write("db", policy.Record{Holder: "node-b", Version: 6, Token: strings.Repeat("b", 32), Released: true, Next: "node-a"})
		store.mu.Unlock()
		time.Sleep(3 * tm.CrashBound())
		synctest.Wait()
		if rec := store.record("db"); rec.Holder != "node-b" || !rec.Released {
			t.Fatalf("lease taken before the drop-in was written: %v\n%s", rec, logs)
		}
		if e := w.early(); len(e) > 0 || sd.isActive("db.service") {
			t.Fatalf("started %v before Install returned:\n%s", e, logs)
		}
		close(slow)
		<-done
		time.Sleep(tm.PollMax + 2*tm.ReplyMax)
		synctest.Wait()
		if rec := store.record("db"); rec.Holder != "node-a" || !sd.isActive("db.service") {
			t.Fatalf("the release offered by name not taken within a poll of Install (record %v):\n%s", rec, logs)
		}
		if e := w.early(); len(e) > 0 {
			t.Fatalf("started %v before Install returned", e)
		}
	})
}

// TestBreakReverifyBeforeTheFlushKeepsIneligible: the first discovery
// ends with db made eligible "soon"; before its supervisor steps again,
// a second reload finds db's drop-in defeated (SetEligible(false)). The
// later flush of the first eligibility must not win: db is never
// acquired nor started, for many lease spans.
func TestBreakReverifyBeforeTheFlushKeepsIneligible(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sd := newFakeSystemd(map[string]string{"db.service": "db"})
		slow := make(chan struct{})
		sd.slowInstall = slow
		w := &installWatch{fakeSystemd: sd}
		store := newMemStore()
		d, _, logs := startingDaemon(t, w, store, nil)
		tm := d.cfg.Timing
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		done := firstReloading(ctx, d)
		time.Sleep(2 * tm.CrashBound()) // the missing key aged past the span
		synctest.Wait()
		w.recheckBad.Store(true)
		close(slow)
		<-done
		// No time passed: the supervisor has not stepped since.
		d.mu.Lock()
		r := d.sups["db"]
		d.mu.Unlock()
		if r == nil || r.sup.Status().Role != policy.Standby.String() {
			t.Fatalf("db's supervisor: %v", r)
		}
		d.Reload(ctx)
		if !r.sup.Ineligible() {
			t.Fatal("db eligible after a reload found its drop-in defeated")
		}
		time.Sleep(5 * tm.CrashBound())
		synctest.Wait()
		if rec := store.record("db"); rec.Present || sd.isActive("db.service") {
			t.Fatalf("db acquired (%v) or started though its drop-in is defeated:\n%s", rec, logs)
		}
		w.recheckBad.Store(false)
		d.Reload(ctx)
		time.Sleep(tm.PollMax + tm.ConfirmWait() + 2*tm.ReplyMax)
		synctest.Wait()
		if rec := store.record("db"); rec.Holder != "node-a" || !sd.isActive("db.service") {
			t.Fatalf("db not run once its drop-in is sound again (record %v):\n%s", rec, logs)
		}
	})
}

// TestBreakInstallErrorWhileTheStartupStopHangs: the unit was left
// running, its startup stop hangs in systemd, and the reload fails as a
// whole: the lease is removed, ineligible, once the stop got through
// (never acquired nor started meanwhile); once a later reload
// installs the drop-in, the lease runs.
func TestBreakInstallErrorWhileTheStartupStopHangs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sd := newFakeSystemd(map[string]string{"db.service": "db"})
		sd.active["db.service"] = true
		stop := make(chan struct{})
		sd.slow = map[string]chan struct{}{"db.service": stop}
		slow := make(chan struct{})
		sd.slowInstall = slow
		w := &installWatch{fakeSystemd: sd}
		w.installErr.Store(true)
		store := newMemStore()
		d, _, logs := startingDaemon(t, w, store, nil)
		tm := d.cfg.Timing
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		done := firstReloading(ctx, d)
		time.Sleep(tm.PollMax) // the startup stop is issued, and hangs
		synctest.Wait()
		close(slow)
		<-done
		d.mu.Lock()
		r := d.sups["db"]
		d.mu.Unlock()
		if r != nil && (!r.removing || !r.sup.Ineligible()) {
			t.Fatalf("db after a failed Install, its stop under way: managed, removing %v, ineligible %v", r.removing, r.sup.Ineligible())
		}
		time.Sleep(3 * tm.CrashBound())
		synctest.Wait()
		if store.record("db").Present || len(w.early()) > 0 {
			t.Fatalf("db acquired (%v) or started (%v) though Install failed:\n%s", store.record("db"), w.early(), logs)
		}
		close(stop)
		synctest.Wait()
		if sd.isActive("db.service") {
			t.Fatalf("db still runs after its startup stop returned:\n%s", logs)
		}
		time.Sleep(time.Second) // the removal's next look (virtual time)
		synctest.Wait()
		if d.hasLease("db") {
			t.Fatalf("db still managed once its stop got through after a failed Install:\n%s", logs)
		}
		w.installErr.Store(false)
		d.Reload(ctx)
		time.Sleep(tm.CrashBound())
		synctest.Wait()
		if rec := store.record("db"); rec.Holder != "node-a" || !sd.isActive("db.service") {
			t.Fatalf("db not run after a later Install (record %v):\n%s", rec, logs)
		}
		if e := w.early(); len(e) > 0 {
			t.Fatalf("started %v while Install ran or had failed", e)
		}
	})
}

// TestBreakAddedInALaterReloadWhileOthersLead: a lease annotated while
// another leads goes through the same install: ineligible while systemd
// reloads (which outlasts a lease span), never started before Install
// returned; the leader keeps leading throughout.
func TestBreakAddedInALaterReloadWhileOthersLead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sd := newFakeSystemd(map[string]string{"db.service": "db"})
		w := &installWatch{fakeSystemd: sd}
		store := newMemStore()
		d, _, logs := startingDaemon(t, w, store, nil)
		tm := d.cfg.Timing
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		<-firstReloading(ctx, d)
		time.Sleep(tm.CrashBound())
		synctest.Wait()
		if store.record("db").Holder != "node-a" {
			t.Fatalf("db not led:\n%s", logs)
		}
		slow := make(chan struct{})
		sd.set(func(f *fakeSystemd) {
			f.annotated["web.service"] = "web"
			f.slowInstall = slow
		})
		reloaded := make(chan struct{})
		go func() { d.Reload(ctx); close(reloaded) }()
		time.Sleep(3 * tm.CrashBound())
		synctest.Wait()
		if store.record("web").Present || sd.isActive("web.service") || len(w.early()) > 0 {
			t.Fatalf("web acquired (%v) or started (%v) before its drop-in:\n%s", store.record("web"), w.early(), logs)
		}
		if store.record("db").Holder != "node-a" || !sd.isActive("db.service") {
			t.Fatalf("db lost while web's Install ran:\n%s", logs)
		}
		close(slow)
		<-reloaded
		time.Sleep(tm.PollMax + tm.ConfirmWait() + 2*tm.ReplyMax)
		synctest.Wait()
		if store.record("web").Holder != "node-a" || !sd.isActive("web.service") {
			t.Fatalf("web not run after Install:\n%s", logs)
		}
	})
}
