package daemon

// Regression tests from a review that tried to break the failed-stop,
// re-verification and watchdog changes: each failed on the code it
// reviewed.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/unitlease/unitlease/internal/config"
	"github.com/unitlease/unitlease/internal/logging"
	"github.com/unitlease/unitlease/internal/supervisor"
	"github.com/unitlease/unitlease/unitctl"
)

// validateFlaky fails Validate of one unit once with an error that says
// nothing about the unit (systemd did not answer).
type validateFlaky struct {
	*fakeSystemd
	fail map[string]bool
}

func (v validateFlaky) Validate(ctx context.Context, unit string, c unitctl.Config, links *unitctl.Links) (*unitctl.Plan, error) {
	if v.fail[unit] {
		delete(v.fail, unit)
		return nil, fmt.Errorf("unitctl: read %s: %w", unit, context.DeadlineExceeded)
	}
	return v.fakeSystemd.Validate(ctx, unit, c, links)
}

// SIGTERM while a removal waits on a failed stop: the loop runs Shutdown
// on WithoutCancel(ctx), but the removal's goroutine waits on the
// Reload's ctx, which SIGTERM ended: it ends the supervisor at once, and
// the lease, held for a unit that may still run, is no longer renewed.
func TestReviewShutdownWhileRemovalWaitsOnFailedStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sd, store, d, logs, ctx, cancel := lead(t)
		sd.set(func(f *fakeSystemd) {
			f.stuck["db.service"] = true
			f.annotated = map[string]string{}
		})
		d.Reload(ctx) // the removal waits on the failed stop
		time.Sleep(5 * time.Second)
		synctest.Wait()
		// SIGTERM: what loop does.
		cancel()
		sctx, scancel := context.WithCancel(context.WithoutCancel(ctx)) // cancelled only to end the test
		defer scancel()
		done := make(chan struct{})
		go func() {
			d.Shutdown(sctx)
			close(done)
		}()
		synctest.Wait()
		before := store.record("db")
		time.Sleep(2 * d.cfg.Timing.LeaseSpan)
		synctest.Wait()
		after := store.record("db")
		returned := false
		select {
		case <-done:
			returned = true
		default:
		}
		if after.Version <= before.Version || returned {
			t.Fatalf("unit active %t, Shutdown returned %t, drop-in removed %v; lease %v -> %v over two lease spans: no longer renewed while the unit may run:\n%s",
				sd.isActive("db.service"), returned, sd.uninstalled, before, after, logs)
		}
		sd.set(func(f *fakeSystemd) { f.stuck["db.service"] = false })
		<-done
		time.Sleep(time.Second) // the waiting removal, too, sees it released and ends
		synctest.Wait()
	})
}

func TestReviewShutdownWhileRemovalWaitsThenStops(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sd, store, d, logs, ctx, cancel := lead(t)
		sd.set(func(f *fakeSystemd) {
			f.stuck["db.service"] = true
			f.annotated = map[string]string{}
		})
		d.Reload(ctx)
		time.Sleep(5 * time.Second)
		synctest.Wait()
		cancel()
		sctx, scancel := context.WithCancel(context.WithoutCancel(ctx))
		defer scancel()
		done := make(chan struct{})
		go func() {
			d.Shutdown(sctx)
			close(done)
		}()
		time.Sleep(time.Minute)
		synctest.Wait()
		sd.set(func(f *fakeSystemd) { f.stuck["db.service"] = false })
		time.Sleep(time.Minute)
		synctest.Wait()
		select {
		case <-done:
		default:
			t.Fatalf("the unit stopped a minute ago, Shutdown has not returned (lease %v):\n%s", store.record("db"), logs)
		}
		if rec := store.record("db"); !rec.Released {
			t.Fatalf("lease %v, want released", rec)
		}
	})
}

// One D-Bus timeout during a reload makes a sound lease ineligible: the
// leader stops its unit, and the node takes the lease no more until the
// next reload, whenever that comes.
func TestReviewTransientValidateErrorHandsOffUntilNextReload(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sd, store, d, logs, ctx, _ := lead(t)
		d.sd = validateFlaky{sd, map[string]bool{"db.service": true}}
		d.Reload(ctx)
		time.Sleep(time.Hour)
		synctest.Wait()
		if !sd.isActive("db.service") {
			t.Fatalf("one timed-out read of a sound unit: stopped, and not run here for an hour since (lease %v):\n%s", store.record("db"), logs)
		}
	})
}

// Re-annotated (same lease, same unit) while its removal waits on a failed
// stop; once the unit stops, the again channel reloads and the lease is
// managed again. The test plays the loop: it reloads on again.
func TestReviewReannotatedWhileRemovalWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sd, store, d, logs, ctx, _ := lead(t)
		sd.set(func(f *fakeSystemd) { f.stuck["db.service"] = true; f.annotated = map[string]string{} })
		d.Reload(ctx)
		sd.set(func(f *fakeSystemd) { f.annotated = map[string]string{"db.service": "db"} })
		d.Reload(ctx)
		d.Reload(ctx)
		time.Sleep(time.Minute)
		synctest.Wait()
		if rec := store.record("db"); rec.Released || rec.Holder != "node-a" {
			t.Fatalf("lease %v", rec)
		}
		sd.set(func(f *fakeSystemd) { f.stuck["db.service"] = false })
		time.Sleep(10 * time.Second)
		synctest.Wait()
		select {
		case <-d.again:
			d.Reload(ctx)
		default:
			t.Fatalf("no reload asked for")
		}
		time.Sleep(10 * time.Minute)
		synctest.Wait()
		if d.find("db") == nil || !sd.isActive("db.service") {
			t.Fatalf("not managed again (lease %v):\n%s", store.record("db"), logs)
		}
	})
}

// installFails is fakeSystemd whose Install fails as a whole (a
// daemon-reload that timed out, a drop-in directory not writable).
type installFails struct{ *fakeSystemd }

func (installFails) Recheck(context.Context, []*unitctl.Plan) (map[string]error, error) {
	return nil, errors.New("unitctl: daemon-reload: timed out")
}

// A unit that Validate refuses (its protections are defeated) is known to
// be unsafe whatever Install does; but when the batch Install of the
// other kept units fails, reverify returns before SetEligible, and the
// node keeps running the refused unit.
func TestReviewRefusedUnitStaysEligibleWhenInstallFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sd := newFakeSystemd(map[string]string{"db.service": "db", "web.service": "web"})
		store := newMemStore()
		tm, _ := testTiming.Resolved()
		logs := &syncBuffer{}
		d := New(&config.Config{Node: "node-a", Timing: tm}, logging.Text(logs, slog.LevelInfo), store, sd, unitctl.Config{}, func(string) {})
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		d.Reload(ctx)
		time.Sleep(30 * time.Second)
		synctest.Wait()
		if !sd.isActive("db.service") {
			t.Fatalf("not leading")
		}
		sd.set(func(f *fakeSystemd) { f.refused["db.service"] = true })
		d.sd = installFails{sd}
		d.Reload(ctx)
		time.Sleep(10 * time.Minute)
		synctest.Wait()
		if sd.isActive("db.service") {
			t.Fatalf("db.service, refused by Validate (KillMode=process), still runs here; lease %v", store.record("db"))
		}
	})
}

// TestReviewMovedUnitWaitsForItsOldLease: a unit moved to another lease
// while its old lease's stop fails: the new lease gets no supervisor here
// until the old one is released (its first step would only fail to stop
// the unit again); then the reload the removal asks for adds it.
func TestReviewMovedUnitWaitsForItsOldLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sd, store, d, logs, ctx, _ := lead(t)
		sd.set(func(f *fakeSystemd) {
			f.stuck["db.service"] = true
			f.annotated = map[string]string{"db.service": "db2"}
		})
		d.Reload(ctx)
		time.Sleep(2 * d.cfg.Timing.LeaseSpan)
		synctest.Wait()
		if d.find("db2") != nil || store.record("db").Released {
			t.Fatalf("db2 managed (%t) while db.service's stop under db fails (db %v):\n%s", d.find("db2") != nil, store.record("db"), logs)
		}
		sd.set(func(f *fakeSystemd) { f.stuck["db.service"] = false })
		time.Sleep(2 * testTiming.StopWait)
		synctest.Wait()
		select {
		case <-d.again:
			d.Reload(ctx)
		default:
			t.Fatal("no reload asked for once the removal ended")
		}
		time.Sleep(10 * time.Minute)
		synctest.Wait()
		if d.find("db2") == nil || store.record("db2").Holder != "node-a" || !sd.isActive("db.service") {
			t.Fatalf("db2 not managed and run here after db was released (db2 %v):\n%s", store.record("db2"), logs)
		}
	})
}

// TestReviewWatchdogWakesOverdueLoopsFirst: after a resume the daemon has
// not noticed yet, every loop whose wake-up fell in the suspend is
// overdue. The first watchdog tick wakes them and withholds its ping (a
// daemon that stopped acting must not ping past its deadline); they step,
// and the next tick pings, within the interval of the last ping.
func TestReviewWatchdogWakesOverdueLoopsFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sd := newFakeSystemd(map[string]string{"db.service": "db"})
		store := newMemStore()
		d, _ := testDaemon(t, sd, store)
		var mu sync.Mutex
		var slept time.Duration
		d.clock = supervisor.SuspendClock(func() (supervisor.Offset, error) {
			mu.Lock()
			defer mu.Unlock()
			return supervisor.Offset{Lo: slept, Hi: slept}, nil
		})
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		d.Reload(ctx)
		time.Sleep(30 * time.Second)
		synctest.Wait()
		mu.Lock()
		slept = time.Hour // the machine slept an hour
		mu.Unlock()
		if ok, _ := d.mayPing(5 * time.Second); ok {
			t.Fatal("the first tick after an unnoticed resume pings while loops are overdue")
		}
		synctest.Wait() // the woken loops step
		if ok, _ := d.mayPing(5 * time.Second); !ok {
			t.Fatal("the loops stepped once woken, yet the next tick withholds the ping")
		}
	})
}
