package daemon

import (
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// TestSlowSystemdIsNoFailedStop: a systemd that takes three stop_waits to
// confirm a stop (busy with thousands of jobs: unitctl waits for its
// answer rather than fail) is no failed stop above unitctl either: no
// stop_failed is logged, the lease stays held while the stop is not
// confirmed, and it is released once systemd answers.
func TestSlowSystemdIsNoFailedStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sd, store, d, logs, ctx, _ := lead(t)
		answer := make(chan struct{})
		sd.set(func(f *fakeSystemd) {
			f.slow = map[string]chan struct{}{"db.service": answer}
			f.annotated = map[string]string{}
		})
		// The annotation is gone: hand off, stop, release, unmanage. The
		// reload waits for the stop, as it waits for any removal's.
		reloaded := make(chan struct{})
		go func() {
			d.Reload(ctx)
			close(reloaded)
		}()
		time.Sleep(3 * d.cfg.Timing.StopWait)
		synctest.Wait()
		if rec := store.record("db"); rec.Released || rec.Holder != "node-a" {
			t.Fatalf("while systemd had not confirmed the stop the lease is %v, want held by node-a:\n%s", rec, logs)
		}
		close(answer)
		<-reloaded
		time.Sleep(d.cfg.Timing.StopWait)
		synctest.Wait()
		if rec := store.record("db"); !rec.Released {
			t.Fatalf("after systemd confirmed the stop the lease is %v, want released:\n%s", rec, logs)
		}
		if strings.Contains(logs.String(), "stop_failed") {
			t.Fatalf("a slow stop was logged as stop_failed:\n%s", logs)
		}
	})
}
