package daemon

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/unitlease/unitlease/unitctl"
)

// leading is a daemon on node-a that leads lease a of web.service, in a
// synctest bubble; stop ends it.
func leading(t *testing.T) (sd *fakeSystemd, d *Daemon, logs fmt.Stringer, ctx context.Context, stop func()) {
	t.Helper()
	sd = newFakeSystemd(map[string]string{"web.service": "a"})
	d, buf := testDaemon(t, sd, newMemStore())
	ctx, cancel := context.WithCancel(t.Context())
	d.Reload(ctx)
	time.Sleep(30 * time.Second)
	synctest.Wait()
	if !sd.isActive("web.service") {
		cancel()
		t.Fatalf("not leading:\n%s", buf)
	}
	return sd, d, buf, ctx, func() {
		cancel()
		d.Shutdown(context.WithoutCancel(ctx))
	}
}

// TestAnnotationLostOnTheLeaderIsNoHandoff: when a reload finds the
// leader's unit no longer annotated (a typo in its [X-UnitLease] section
// makes the annotation an error, or it was removed), the daemon stops it
// and releases the lease as "unmanaged", not as a handoff nobody asked
// for; a unit refused (an override, systemctl enable) stops as
// "ineligible".
func TestAnnotationLostOnTheLeaderIsNoHandoff(t *testing.T) {
	for _, c := range []struct {
		name, want string
		lose       func(*fakeSystemd)
	}{
		{"refused", "web.service: stopping (ineligible)", func(f *fakeSystemd) { f.refused["web.service"] = true }},
		{"not annotated", "web.service: stopping (unmanaged)", func(f *fakeSystemd) { delete(f.annotated, "web.service") }},
	} {
		name, lose := c.name, c.lose
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				sd, d, logs, ctx, stop := leading(t)
				defer stop()
				sd.set(lose)
				d.Reload(ctx)
				time.Sleep(30 * time.Second)
				synctest.Wait()
				out := logs.String()
				if sd.isActive("web.service") {
					t.Errorf("web.service still runs:\n%s", out)
				}
				if !strings.Contains(out, c.want) || strings.Contains(out, "(handoff)") {
					t.Errorf("the journal does not say %q, or says handoff:\n%s", c.want, out)
				}
			})
		})
	}
}

// TestCleanDaemonStopIsNoUnitFailure: `systemctl stop unitlease` (or a
// restart in a package upgrade) stops the bound units first, while
// unitlease.service is still active with its stop job queued. The unit
// going inactive then is the planned stop, handed off as such: before,
// it was logged unit_failed ("failed while this node held lease"), and
// alerts on that event fired on every stop and upgrade. With no job
// queued, the same stop behind the daemon's back is a failure.
func TestCleanDaemonStopIsNoUnitFailure(t *testing.T) {
	for _, job := range []string{"stop", "restart", ""} {
		t.Run("job "+job, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				sd, _, logs, _, stop := leading(t)
				defer stop()
				sd.set(func(f *fakeSystemd) {
					f.jobs["unitlease.service"] = job
					f.active["web.service"] = false
				})
				sd.events <- unitctl.Event{Unit: "web.service", Kind: unitctl.StoppedBehind}
				time.Sleep(time.Second)
				synctest.Wait()
				out := logs.String()
				failed := strings.Contains(out, "UNITLEASE_EVENT=unit_failed")
				if failed != (job == "") || !strings.Contains(out, "UNITLEASE_EVENT=released") {
					t.Errorf("with the daemon's job %q: unit_failed logged %v, want %v; and the lease released:\n%s", job, failed, job == "", out)
				}
			})
		})
	}
}

// TestDaemonStoppingReadsPastASIGTERM: the check that the daemon's own
// unit is stopping must not fail because the SIGTERM it is about already
// ended the daemon's context (in booted nodes, one clean stop in three
// was logged unit_failed that way).
func TestDaemonStoppingReadsPastASIGTERM(t *testing.T) {
	sd := newFakeSystemd(map[string]string{"web.service": "a"})
	sd.jobs["unitlease.service"] = "stop"
	d, _ := testDaemon(t, sd, newMemStore())
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if !d.daemonStopping(ctx) {
		t.Fatal("with a stop job queued for unitlease.service and the context ended, daemonStopping is false")
	}
}

// TestSnapshotNamesRefusedUnits: status shows every unit the daemon
// refused, with its lease and the reason, at the reload that refused it:
// one never managed, and one of a lease it manages that became
// refusable (systemctl enable, an override) and is ineligible now.
func TestSnapshotNamesRefusedUnits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sd := newFakeSystemd(map[string]string{"web.service": "a", "db.service": "b"})
		sd.refused["db.service"] = true
		d, _ := testDaemon(t, sd, newMemStore())
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		d.Reload(ctx)
		synctest.Wait()
		units := func() []string {
			var out []string
			for _, p := range d.Snapshot(ctx).Problems {
				out = append(out, p.Kind+" "+p.Unit+" "+p.Lease)
			}
			return out
		}
		if got := units(); !slices.Equal(got, []string{"refused db.service b"}) {
			t.Errorf("problems after the first reload: %v", got)
		}
		sd.set(func(f *fakeSystemd) { f.refused["web.service"] = true })
		d.Reload(ctx)
		synctest.Wait()
		if got := units(); !slices.Equal(got, []string{"refused db.service b", "refused web.service a"}) {
			t.Errorf("problems after web.service became refusable: %v", got)
		}
		cancel()
		d.Shutdown(context.WithoutCancel(ctx))
	})
}

// TestStartCarriesTheFencingToken: before it starts a unit the daemon
// writes the unit's environment: the lease, the node, and the token, the
// version it acquired the lease at (renewals since do not change it).
func TestStartCarriesTheFencingToken(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sd, d, logs, _, stop := leading(t)
		defer stop()
		var acquired string
		for _, line := range strings.Split(logs.String(), "\n") {
			if _, v, ok := strings.Cut(line, "acquired lease a at version "); ok {
				acquired, _, _ = strings.Cut(v, `"`)
				break
			}
		}
		sd.mu.Lock()
		env := sd.env["web.service"]
		sd.mu.Unlock()
		want := [][2]string{{"UNITLEASE_LEASE", "a"}, {"UNITLEASE_NODE", "node-a"}, {"UNITLEASE_TOKEN", acquired}}
		if acquired == "" || !slices.Equal(env, want) {
			t.Fatalf("environment %q, want %q\n%s", env, want, logs)
		}
		if v := d.find("a").Status().Version; fmt.Sprint(v) == acquired {
			t.Fatalf("the lease was not renewed since its acquisition (version %d): the test shows nothing", v)
		}
	})
}
