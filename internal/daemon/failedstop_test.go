package daemon

import (
	"bytes"
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/unitlease/unitlease/internal/config"
	"github.com/unitlease/unitlease/internal/logging"
	"github.com/unitlease/unitlease/policy"
	"github.com/unitlease/unitlease/unitctl"
)

var testTiming = policy.Timing{Retry: time.Second, RenewDeadline: 2 * time.Second, StopWait: 2 * time.Second,
	ReplyMax: 500 * time.Millisecond, PollMin: 500 * time.Millisecond, PollMax: time.Second, Allowance: time.Second}

// syncBuffer is a log buffer safe for the supervisors' goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// testDaemon is a daemon of node-a on the fakes, leading lease db
// (db.service) once it has run for a while.
func testDaemon(t *testing.T, sd *fakeSystemd, store *memStore) (*Daemon, *syncBuffer) {
	t.Helper()
	tm, err := testTiming.Resolved()
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	cfg := &config.Config{Node: "node-a", Timing: tm}
	return New(cfg, logging.Text(logs, slog.LevelInfo), store, sd, unitctl.Config{}, func(string) {}), logs
}

// TestRemovalKeepsAFailedStopHeld: a unit whose annotation is removed
// while it runs here, and whose stop fails, keeps its lease held (renewed)
// for as long as it may run: a failed stop never leads to a start
// elsewhere. Once it stops, the lease is released and the unit unmanaged.
func TestRemovalKeepsAFailedStopHeld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sd, store, d, logs, ctx, _ := lead(t)
		sd.set(func(f *fakeSystemd) {
			f.stuck["db.service"] = true
			f.annotated = map[string]string{}
		})
		d.Reload(ctx)
		before := store.record("db")
		span := d.cfg.Timing.LeaseSpan
		time.Sleep(2 * span)
		synctest.Wait()
		after := store.record("db")
		if after.Released || after.Version <= before.Version || after.Holder != "node-a" {
			t.Fatalf("a unit that could not be stopped: the lease went from %v to %v over two lease spans (a peer would start a second copy):\n%s", before, after, logs)
		}
		if !strings.Contains(logs.String(), "UNITLEASE_EVENT=stop_failed") {
			t.Fatalf("no stop_failed entry:\n%s", logs)
		}
		if st := d.find("db"); st == nil || st.Status().Role != policy.StopFailed.String() {
			t.Fatalf("status does not show the lease as stop_failed")
		}
		// Cleaned up by hand: the next try of the stop succeeds.
		sd.set(func(f *fakeSystemd) { f.stuck["db.service"] = false })
		time.Sleep(2 * testTiming.StopWait)
		synctest.Wait()
		if rec := store.record("db"); !rec.Released {
			t.Fatalf("after the unit stopped the lease is %v, want released:\n%s", rec, logs)
		}
		if d.find("db") != nil || !slices.Contains(sd.uninstalled, "db.service") || !strings.Contains(logs.String(), "UNITLEASE_EVENT=unmanaged") {
			t.Fatalf("the lease's supervisor or drop-in stayed after the unit stopped:\n%s", logs)
		}
	})
}

// TestShutdownKeepsAFailedStopHeld: SIGTERM while a unit cannot be
// stopped: the daemon keeps renewing the lease, and does not return from
// Shutdown, until the unit stops; then it releases and returns.
func TestShutdownKeepsAFailedStopHeld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sd, store, d, logs, ctx, _ := lead(t)
		sd.set(func(f *fakeSystemd) { f.stuck["db.service"] = true })
		done := make(chan struct{})
		go func() {
			d.Shutdown(ctx)
			close(done)
		}()
		before := store.record("db")
		time.Sleep(2 * d.cfg.Timing.LeaseSpan)
		synctest.Wait()
		select {
		case <-done:
			t.Fatalf("Shutdown returned while the unit could not be stopped:\n%s", logs)
		default:
		}
		if after := store.record("db"); after.Released || after.Version <= before.Version {
			t.Fatalf("the lease went from %v to %v while the unit could not be stopped:\n%s", before, after, logs)
		}
		sd.set(func(f *fakeSystemd) { f.stuck["db.service"] = false })
		<-done
		if rec := store.record("db"); !rec.Released || sd.isActive("db.service") {
			t.Fatalf("after Shutdown: lease %v, unit active %t", rec, sd.isActive("db.service"))
		}
	})
}

// lead is a daemon of node-a on the fakes, managing db.service under lease
// db, that has run for 30s: it leads db. Its context ends with the test;
// cancel ends it sooner.
func lead(t *testing.T) (*fakeSystemd, *memStore, *Daemon, *syncBuffer, context.Context, context.CancelFunc) {
	t.Helper()
	sd := newFakeSystemd(map[string]string{"db.service": "db"})
	store := newMemStore()
	d, logs := testDaemon(t, sd, store)
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	d.Reload(ctx)
	time.Sleep(30 * time.Second)
	synctest.Wait()
	if !sd.isActive("db.service") || store.record("db").Holder != "node-a" {
		t.Fatalf("not leading after 30s:\n%s", logs)
	}
	return sd, store, d, logs, ctx, cancel
}
