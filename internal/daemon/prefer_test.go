package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/unitlease/unitlease/internal/config"
	"github.com/unitlease/unitlease/internal/control"
	"github.com/unitlease/unitlease/internal/logging"
	"github.com/unitlease/unitlease/policy"
	"github.com/unitlease/unitlease/redislease"
	"github.com/unitlease/unitlease/unitctl"
)

// readyOn is node announcing itself ready for lease a.
func readyOn(node string) redislease.Announcement {
	return redislease.Announcement{Node: node, State: redislease.AnnounceReady, Lease: "a"}
}

// annotate makes web.service's annotation carry the keys set sets.
func annotate(sd *fakeSystemd, set func(*unitctl.Annotation)) {
	sd.set(func(f *fakeSystemd) {
		f.keys = map[string]func(*unitctl.Annotation){"web.service": set}
	})
}

// logged reports whether the journal has an entry of event.
func logged(logs fmt.Stringer, event string) bool {
	out := logs.String()
	return strings.Contains(out, "UNITLEASE_EVENT="+event+" ") || strings.Contains(out, "UNITLEASE_EVENT="+event+"\n")
}

// receive is what ch has now, if anything.
func receive(ch <-chan policy.Record) (policy.Record, bool) {
	select {
	case r, ok := <-ch:
		return r, ok
	default:
		return policy.Record{}, false
	}
}

// leaseA is lease a's status in d's snapshot.
func leaseA(t *testing.T, ctx context.Context, d *Daemon) control.LeaseStatus {
	t.Helper()
	for _, l := range d.Snapshot(ctx).Leases {
		if l.Lease == "a" {
			return l
		}
	}
	t.Fatalf("lease a is not in the snapshot")
	return control.LeaseStatus{}
}

// TestPreferDefersToAReadyMorePreferredNode: a standby of lease a on
// node-a whose Prefer= lists nodes above it that announce themselves
// ready waits DeferStep() per place between it and the most preferred
// ready one before it takes a release: not a moment before (the wait
// counts from the release, which it sees no earlier), and it does take
// it once the wait is over (by a poll to see the release and a poll to
// act after the wait). With no more preferred node ready (none
// announces, or one announces itself excluded), or node-a first in
// Prefer=, it takes a release at its first poll, well within DeferStep().
func TestPreferDefersToAReadyMorePreferredNode(t *testing.T) {
	for _, c := range []struct {
		name   string
		prefer []string
		peers  []redislease.Announcement
		steps  int // DeferStep()s node-a waits
	}{
		{name: "node-b ready, above node-a", prefer: []string{"node-b", "node-a"}, peers: []redislease.Announcement{readyOn("node-b")}, steps: 1},
		{name: "node-b announces nothing", prefer: []string{"node-b", "node-a"}, steps: 0},
		{name: "node-b excluded", prefer: []string{"node-b", "node-a"},
			peers: []redislease.Announcement{{Node: "node-b", State: redislease.AnnounceExcluded, Lease: "a"}}, steps: 0},
		{name: "node-b ready for another lease only", prefer: []string{"node-b", "node-a"},
			peers: []redislease.Announcement{{Node: "node-b", State: redislease.AnnounceReady, Lease: "b"}}, steps: 0},
		{name: "node-a first", prefer: []string{"node-a", "node-b"}, peers: []redislease.Announcement{readyOn("node-b")}, steps: 0},
		{name: "node-a not listed", prefer: []string{"node-b"}, peers: []redislease.Announcement{readyOn("node-b")}, steps: 1},
		{name: "two places below the ready one", prefer: []string{"node-c", "node-b", "node-a"},
			peers: []redislease.Announcement{readyOn("node-b"), readyOn("node-c")}, steps: 2},
		{name: "one place below the nearest ready one", prefer: []string{"node-c", "node-b", "node-a"},
			peers: []redislease.Announcement{readyOn("node-b")}, steps: 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				sd := newFakeSystemd(map[string]string{"web.service": "a"})
				annotate(sd, func(a *unitctl.Annotation) { a.Prefer = c.prefer })
				store := newMemStore()
				holdAs(store, "a", "node-b")
				store.announce(c.peers...)
				d, logs := testDaemon(t, sd, store)
				ctx, cancel := context.WithCancel(t.Context())
				defer func() {
					cancel()
					d.Shutdown(context.WithoutCancel(ctx))
				}()
				tm := d.cfg.Timing
				step := d.DeferStep()
				if tm.PollMax+tm.ReplyMax >= step {
					t.Fatalf("DeferStep() %v is not longer than a poll and a reply (%v): the test cannot tell a deferral", step, tm.PollMax+tm.ReplyMax)
				}
				d.Reload(ctx)
				time.Sleep(tm.PollMax + tm.ReplyMax) // node-a observes node-b's record
				synctest.Wait()
				if heldBy(store, "a", "node-a") {
					t.Fatalf("node-a took node-b's live record at once: %v", store.record("a"))
				}
				if got := d.settingsFor("a").Prefer; !slices.Equal(got, c.prefer) {
					t.Fatalf("lease a's Prefer= as discovered: %v, want %v", got, c.prefer)
				}
				d.steer(ctx)
				releaseAs(store, "a")
				if c.steps == 0 {
					time.Sleep(tm.PollMax + tm.ReplyMax)
					synctest.Wait()
					if !heldBy(store, "a", "node-a") || !sd.isActive("web.service") {
						t.Fatalf("a poll and a reply after the release, node-a does not lead (record %v, web.service active %v): it deferred to nobody ready\n%s",
							store.record("a"), sd.isActive("web.service"), logs)
					}
					return
				}
				wait := time.Duration(c.steps) * step
				time.Sleep(wait - 10*time.Millisecond)
				synctest.Wait()
				if heldBy(store, "a", "node-a") || sd.isActive("web.service") {
					t.Fatalf("node-a took the release %v after it, before its deferral of %v (record %v)\n%s",
						wait-10*time.Millisecond, wait, store.record("a"), logs)
				}
				// The release is seen up to a poll after it, and the wait's
				// end acted on up to a poll (and a reply) after that.
				time.Sleep(10*time.Millisecond + 2*tm.PollMax + tm.ReplyMax)
				synctest.Wait()
				if !heldBy(store, "a", "node-a") || !sd.isActive("web.service") {
					t.Fatalf("%v after the release, node-a did not take it (record %v, web.service active %v): the deferral is not bounded\n%s",
						wait+2*tm.PollMax+tm.ReplyMax, store.record("a"), sd.isActive("web.service"), logs)
				}
			})
		})
	}
}

// preferLeading is a daemon on node-a that leads lease a of web.service,
// annotated with keys set, in a synctest bubble; stop ends it.
func preferLeading(t *testing.T, set func(*unitctl.Annotation)) (sd *fakeSystemd, store *memStore, d *Daemon, logs *syncBuffer, ctx context.Context, stop func()) {
	t.Helper()
	sd = newFakeSystemd(map[string]string{"web.service": "a"})
	annotate(sd, set)
	store = newMemStore()
	d, logs = testDaemon(t, sd, store)
	ctx, cancel := context.WithCancel(t.Context())
	d.Reload(ctx)
	time.Sleep(30 * time.Second)
	synctest.Wait()
	if !sd.isActive("web.service") || !heldBy(store, "a", "node-a") {
		cancel()
		t.Fatalf("not leading lease a (record %v):\n%s", store.record("a"), logs)
	}
	return sd, store, d, logs, ctx, func() {
		cancel()
		d.Shutdown(context.WithoutCancel(ctx))
	}
}

// TestFailbackAfterSettle: node-a leads lease a with Prefer=node-b
// node-a, Failback=yes, FailbackSettle=30s. Once node-b announces itself
// ready, steer rounds over 29s move nothing; the round at 30s hands the
// lease off, released to node-b by name (Record.Next), journalled as
// failback. A readiness that lapses for one round starts the settle
// again. With Failback=no, nothing moves however long node-b is ready.
func TestFailbackAfterSettle(t *testing.T) {
	failback := func(a *unitctl.Annotation) {
		a.Prefer, a.Failback, a.FailbackSettle = []string{"node-b", "node-a"}, true, 30*time.Second
	}
	// rounds steers every second for span, and fails the test if node-a
	// let lease a go meanwhile.
	rounds := func(t *testing.T, ctx context.Context, d *Daemon, sd *fakeSystemd, store *memStore, logs fmt.Stringer, span time.Duration) {
		t.Helper()
		for end := time.Now().Add(span); ; {
			d.steer(ctx)
			synctest.Wait()
			if !heldBy(store, "a", "node-a") || !sd.isActive("web.service") || logged(logs, "failback") {
				t.Fatalf("lease a moved before node-b was ready for the settle time (record %v, web.service active %v):\n%s",
					store.record("a"), sd.isActive("web.service"), logs)
			}
			if !time.Now().Before(end) {
				return
			}
			time.Sleep(time.Second)
		}
	}
	t.Run("after the settle time", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			sd, store, d, logs, ctx, stop := preferLeading(t, failback)
			defer stop()
			taken := takeWhenReleased(ctx, store, "a", "node-b")
			store.announce(readyOn("node-b"))
			rounds(t, ctx, d, sd, store, logs, 29*time.Second)
			time.Sleep(time.Second) // 30s since the first round saw node-b ready
			d.steer(ctx)
			time.Sleep(time.Second)
			synctest.Wait()
			rel, ok := receive(taken)
			if !ok || !rel.Released || rel.Holder != "node-a" || rel.Next != "node-b" {
				t.Errorf("the release node-b took over: %v (taken %v), want released by node-a to node-b\n%s", rel, ok, logs)
			}
			if sd.isActive("web.service") || !heldBy(store, "a", "node-b") {
				t.Errorf("after the failback: web.service active %v, record %v", sd.isActive("web.service"), store.record("a"))
			}
			if !logged(logs, "failback") {
				t.Errorf("no failback entry in the journal:\n%s", logs)
			}
		})
	})
	t.Run("the readiness lapses", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			sd, store, d, logs, ctx, stop := preferLeading(t, failback)
			defer stop()
			taken := takeWhenReleased(ctx, store, "a", "node-b")
			store.announce(readyOn("node-b"))
			rounds(t, ctx, d, sd, store, logs, 20*time.Second)
			store.announce() // node-b's daemon restarts: it announces nothing for a round
			time.Sleep(time.Second)
			rounds(t, ctx, d, sd, store, logs, 0)
			store.announce(readyOn("node-b"))
			time.Sleep(time.Second)
			rounds(t, ctx, d, sd, store, logs, 29*time.Second) // 51s since node-b first announced itself
			time.Sleep(time.Second)
			d.steer(ctx)
			time.Sleep(time.Second)
			synctest.Wait()
			if rel, _ := receive(taken); rel.Next != "node-b" || !heldBy(store, "a", "node-b") {
				t.Errorf("30s after node-b was ready again: released %v, record %v\n%s", rel, store.record("a"), logs)
			}
		})
	})
	t.Run("a more preferred node becomes ready", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			sd, store, d, logs, ctx, stop := preferLeading(t, func(a *unitctl.Annotation) {
				a.Prefer, a.Failback, a.FailbackSettle = []string{"node-c", "node-b", "node-a"}, true, 30*time.Second
			})
			defer stop()
			taken := takeWhenReleased(ctx, store, "a", "node-c")
			store.announce(readyOn("node-b"))
			rounds(t, ctx, d, sd, store, logs, 20*time.Second)
			time.Sleep(time.Second)
			// node-c, above node-b, is ready too: the lease would fail back
			// to node-c, which has been ready for no time yet.
			store.announce(readyOn("node-b"), readyOn("node-c"))
			rounds(t, ctx, d, sd, store, logs, 29*time.Second) // 50s since node-b was ready
			time.Sleep(time.Second)
			d.steer(ctx)
			time.Sleep(time.Second)
			synctest.Wait()
			if rel, _ := receive(taken); rel.Next != "node-c" || !heldBy(store, "a", "node-c") {
				t.Errorf("30s after node-c was ready: released %v, record %v; want released to node-c\n%s", rel, store.record("a"), logs)
			}
		})
	})
	t.Run("Failback=no", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			sd, store, d, logs, ctx, stop := preferLeading(t, func(a *unitctl.Annotation) {
				a.Prefer, a.FailbackSettle = []string{"node-b", "node-a"}, 30*time.Second
			})
			defer stop()
			store.announce(readyOn("node-b"))
			before := store.record("a")
			rounds(t, ctx, d, sd, store, logs, 5*time.Minute)
			if after := store.record("a"); after.Version <= before.Version || after.Token != before.Token {
				t.Errorf("over 5 minutes the record went from %v to %v: want the same tenure, renewed", before, after)
			}
		})
	})
}

// TestFailbackSettleCountsWhileThisNodeHolds: node-b, first in Prefer=
// with Failback=yes and FailbackSettle=30s, holds lease a and announces
// itself ready for a minute while node-a stands by and steers; then it
// releases the lease (its unit failed: it backs off, and still announces
// itself ready; or `unitlease handoff a` ran on it). node-a takes it
// over after its deferral. The settle is how long node-b must have been
// ready while node-a holds the lease: a failback at node-a's first steer
// round as leader would hand the lease straight back to the node it just
// left, with no settle at all. So: nothing moves for 29s of steer rounds
// after node-a leads, and the lease goes to node-b after 30s.
func TestFailbackSettleCountsWhileThisNodeHolds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sd := newFakeSystemd(map[string]string{"web.service": "a"})
		annotate(sd, func(a *unitctl.Annotation) {
			a.Prefer, a.Failback, a.FailbackSettle = []string{"node-b", "node-a"}, true, 30*time.Second
		})
		store := newMemStore()
		holdAs(store, "a", "node-b")
		store.announce(readyOn("node-b"))
		d, logs := testDaemon(t, sd, store)
		ctx, cancel := context.WithCancel(t.Context())
		defer func() {
			cancel()
			d.Shutdown(context.WithoutCancel(ctx))
		}()
		d.Reload(ctx)
		for range 60 { // node-b leads, renewing every second
			store.mu.Lock()
			cur := store.current("a")
			cur.Version++
			store.write("a", cur)
			store.mu.Unlock()
			d.steer(ctx)
			time.Sleep(time.Second)
			synctest.Wait()
			if heldBy(store, "a", "node-a") {
				t.Fatalf("node-a took lease a from a live node-b: %v\n%s", store.record("a"), logs)
			}
		}
		releaseAs(store, "a")
		tm := d.cfg.Timing
		for end := time.Now().Add(d.DeferStep() + 2*tm.PollMax + tm.ReplyMax); !heldBy(store, "a", "node-a"); {
			if !time.Now().Before(end) {
				t.Fatalf("node-a did not take lease a after node-b released it: %v\n%s", store.record("a"), logs)
			}
			d.steer(ctx)
			time.Sleep(100 * time.Millisecond)
			synctest.Wait()
		}
		time.Sleep(tm.ReplyMax) // web.service started: node-a leads
		synctest.Wait()
		taken := takeWhenReleased(ctx, store, "a", "node-b")
		for end := time.Now().Add(29 * time.Second); time.Now().Before(end); {
			d.steer(ctx)
			synctest.Wait()
			if !heldBy(store, "a", "node-a") || logged(logs, "failback") {
				t.Fatalf("node-a failed lease a back to node-b %v after it took the lease over from it, before FailbackSettle=30s (record %v):\n%s",
					29*time.Second-time.Until(end), store.record("a"), logs)
			}
			time.Sleep(time.Second)
		}
		time.Sleep(2 * time.Second)
		d.steer(ctx)
		time.Sleep(time.Second)
		synctest.Wait()
		if rel, _ := receive(taken); rel.Next != "node-b" || !heldBy(store, "a", "node-b") {
			t.Errorf("30s after node-a led with node-b ready: released %v, record %v; want released to node-b\n%s", rel, store.record("a"), logs)
		}
	})
}

// wakeStore is memStore with wake-ups a test sends (`unitlease clear`
// publishes one with ClearFailures).
type wakeStore struct {
	*memStore
	wakes chan redislease.Wake
}

func (w *wakeStore) Wakeups(ctx context.Context, _ []string) <-chan redislease.Wake {
	ch := make(chan redislease.Wake)
	go func() {
		defer close(ch)
		for {
			select {
			case <-ctx.Done():
				return
			case wk := <-w.wakes:
				select {
				case ch <- wk:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return ch
}

// failing is a daemon on node-a that leads lease a of web.service with
// FailureThreshold=threshold and FailureWindow=window, its steer loop
// running, in a synctest bubble.
type failing struct {
	sd    *fakeSystemd
	store *wakeStore
	d     *Daemon
	logs  *syncBuffer
	ctx   context.Context
}

func leadFailing(t *testing.T, threshold int, window time.Duration) (f *failing, stop func()) {
	t.Helper()
	sd := newFakeSystemd(map[string]string{"web.service": "a"})
	annotate(sd, func(a *unitctl.Annotation) { a.FailureThreshold, a.FailureWindow = threshold, window })
	store := &wakeStore{memStore: newMemStore(), wakes: make(chan redislease.Wake)}
	tm, err := testTiming.Resolved()
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	d := New(&config.Config{Node: "node-a", Timing: tm}, logging.Text(logs, slog.LevelInfo), store, sd, unitctl.Config{}, func(string) {})
	ctx, cancel := context.WithCancel(t.Context())
	f = &failing{sd: sd, store: store, d: d, logs: logs, ctx: ctx}
	stop = func() {
		cancel()
		d.Shutdown(context.WithoutCancel(ctx))
	}
	d.Reload(ctx)
	go d.steerLoop(ctx)
	time.Sleep(30 * time.Second)
	synctest.Wait()
	if !f.leads() {
		stop()
		t.Fatalf("not leading lease a (record %v):\n%s", store.record("a"), logs)
	}
	return f, stop
}

func (f *failing) leads() bool {
	return f.sd.isActive("web.service") && heldBy(f.store.memStore, "a", "node-a")
}

// fail makes web.service fail while node-a leads: it must be stopped
// and lease a released.
func (f *failing) fail(t *testing.T) {
	t.Helper()
	if !f.leads() {
		t.Fatalf("web.service to fail, but node-a does not lead (record %v):\n%s", f.store.record("a"), f.logs)
	}
	f.sd.set(func(s *fakeSystemd) { s.active["web.service"] = false })
	f.sd.events <- unitctl.Event{Unit: "web.service", Kind: unitctl.Failed, State: unitctl.UnitState{ActiveState: "failed", SubState: "failed"}}
	time.Sleep(f.d.cfg.Timing.ReplyMax)
	synctest.Wait()
	if r := f.store.record("a"); !r.Released || r.Holder != "node-a" || f.sd.isActive("web.service") {
		t.Fatalf("after web.service failed: record %v, web.service active %v: want stopped and released\n%s", r, f.sd.isActive("web.service"), f.logs)
	}
}

// reacquire waits a backoff, a lease span and a few polls: enough for a
// node that competes to take the lease nobody else takes.
func (f *failing) reacquire() {
	tm := f.d.cfg.Timing
	time.Sleep(tm.Backoff() + tm.LeaseSpan + 3*tm.PollMax)
	synctest.Wait()
}

// excludedState checks what an excluded node-a shows: it announces
// itself excluded for lease a, and status says so with failures.
func (f *failing) excludedState(t *testing.T, failures int) {
	t.Helper()
	excl := redislease.Announcement{Node: "node-a", State: redislease.AnnounceExcluded, Lease: "a"}
	if !announces(f.store.memStore, excl) {
		t.Errorf("excluded, node-a announces %v, without %+v", f.store.announced(), excl)
	}
	if l := leaseA(t, f.ctx, f.d); l.Failures != failures || !l.Excluded {
		t.Errorf("status of lease a: failures %d, excluded %v; want %d, true", l.Failures, l.Excluded, failures)
	}
}

// competingState checks what a competing node-a shows.
func (f *failing) competingState(t *testing.T, failures int) {
	t.Helper()
	want := []redislease.Announcement{readyOn("node-a")}
	if got := f.store.announced(); !slices.Equal(got, want) {
		t.Errorf("competing, node-a announces %v, want %v", got, want)
	}
	if l := leaseA(t, f.ctx, f.d); l.Failures != failures || l.Excluded {
		t.Errorf("status of lease a: failures %d, excluded %v; want %d, false", l.Failures, l.Excluded, failures)
	}
}

// TestFailureThresholdExcludesUntilTheWindowPasses: with
// FailureThreshold=2 and FailureWindow=10m, the first failure of
// web.service on node-a stops it and releases the lease, and node-a,
// which nobody else competes with, takes it again. The second excludes
// node-a: it announces itself excluded, takes nothing for two lease
// spans, journals excluded and (no node being ready for the lease)
// resting, and status shows 2 failures, excluded. A second before the
// first failure leaves the window it still is; once it left, a steer
// round readmits node-a (journalled readmitted), which takes the lease
// again, with 1 failure in status.
func TestFailureThresholdExcludesUntilTheWindowPasses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, stop := leadFailing(t, 2, 10*time.Minute)
		defer stop()
		tm := f.d.cfg.Timing
		first := time.Now()
		f.fail(t)
		if logged(f.logs, "excluded") {
			t.Fatalf("excluded after one failure of two:\n%s", f.logs)
		}
		f.competingState(t, 1)
		f.reacquire()
		f.fail(t)
		if !logged(f.logs, "excluded") || !logged(f.logs, "resting") {
			t.Errorf("after the second failure the journal has no excluded or no resting entry:\n%s", f.logs)
		}
		f.excludedState(t, 2)
		time.Sleep(2 * tm.LeaseSpan)
		synctest.Wait()
		if f.leads() || heldBy(f.store.memStore, "a", "node-a") || f.sd.isActive("web.service") {
			t.Fatalf("excluded, node-a took lease a within two lease spans (record %v):\n%s", f.store.record("a"), f.logs)
		}
		time.Sleep(time.Until(first.Add(10*time.Minute - time.Second)))
		synctest.Wait()
		if logged(f.logs, "readmitted") || heldBy(f.store.memStore, "a", "node-a") {
			t.Fatalf("readmitted before the first failure left its window (record %v):\n%s", f.store.record("a"), f.logs)
		}
		f.excludedState(t, 2)
		time.Sleep(time.Second + tm.PollMax + tm.ReplyMax) // the window passed, and a steer round ran
		synctest.Wait()
		if !logged(f.logs, "readmitted") {
			t.Fatalf("the first failure left its window, and no readmitted entry:\n%s", f.logs)
		}
		f.competingState(t, 1)
		f.reacquire()
		if !f.leads() {
			t.Errorf("readmitted, node-a does not take lease a again (record %v):\n%s", f.store.record("a"), f.logs)
		}
	})
}

// TestExclusionWithAReadyPeerIsNotResting: a node-a excluded from lease
// a while node-b announces itself ready for it journals excluded, not
// resting: the lease does not rest, node-b may take it.
func TestExclusionWithAReadyPeerIsNotResting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, stop := leadFailing(t, 1, 10*time.Minute)
		defer stop()
		f.store.announce(readyOn("node-b"))
		f.fail(t)
		f.excludedState(t, 1)
		if !logged(f.logs, "excluded") || logged(f.logs, "resting") {
			t.Errorf("excluded with node-b ready: want excluded journalled (%v), not resting (%v):\n%s",
				logged(f.logs, "excluded"), logged(f.logs, "resting"), f.logs)
		}
	})
}

// TestClearFailuresReadmitsAtOnce: an excluded node-a that hears
// `unitlease clear a` (a Wake with ClearFailures for lease a) forgets
// the failures and competes again at once, without time passing:
// journalled failures_cleared and readmitted, status 0 failures, and it
// takes the lease. One for another lease changes nothing.
func TestClearFailuresReadmitsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, stop := leadFailing(t, 2, 10*time.Minute)
		defer stop()
		f.fail(t)
		f.reacquire()
		f.fail(t)
		f.excludedState(t, 2)
		f.store.wakes <- redislease.Wake{Lease: "b", ClearFailures: true}
		synctest.Wait()
		if logged(f.logs, "failures_cleared") || logged(f.logs, "readmitted") {
			t.Errorf("clearing lease b's failures cleared lease a's:\n%s", f.logs)
		}
		f.excludedState(t, 2)
		f.store.wakes <- redislease.Wake{Lease: "a", ClearFailures: true}
		synctest.Wait()
		if !logged(f.logs, "failures_cleared") || !logged(f.logs, "readmitted") {
			t.Errorf("cleared, the journal has no failures_cleared or no readmitted entry:\n%s", f.logs)
		}
		f.competingState(t, 0)
		f.reacquire()
		if !f.leads() {
			t.Errorf("cleared, node-a does not take lease a again (record %v):\n%s", f.store.record("a"), f.logs)
		}
	})
}

// TestFailureThresholdZeroNeverExcludes: with FailureThreshold=0, four
// failures within the window exclude nothing: node-a announces itself
// ready and takes the lease again after each, nothing is journalled
// excluded, and status counts the failures, not excluded.
func TestFailureThresholdZeroNeverExcludes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, stop := leadFailing(t, 0, 10*time.Minute)
		defer stop()
		for i := 1; i <= 4; i++ {
			f.fail(t)
			f.competingState(t, i)
			f.reacquire()
			if !f.leads() || logged(f.logs, "excluded") {
				t.Fatalf("after failure %d with FailureThreshold=0: leads %v (record %v), excluded journalled %v:\n%s",
					i, f.leads(), f.store.record("a"), logged(f.logs, "excluded"), f.logs)
			}
		}
	})
}

// TestUnitsOfALeaseMustAgree: two units of lease a whose Prefer= (or
// FailureThreshold=) differ: the one sorted later is a unit problem of
// kind annotation, naming both units and the key, and is not managed;
// the one sorted first is, with its settings, and leads.
func TestUnitsOfALeaseMustAgree(t *testing.T) {
	prefer := func(a *unitctl.Annotation) { a.Prefer = []string{"node-b"} }
	threshold := func(a *unitctl.Annotation) { a.FailureThreshold = 5 }
	for _, c := range []struct {
		name     string
		keys     map[string]func(*unitctl.Annotation)
		key      string
		wantPref []string // lease a's Prefer=, the first unit's
	}{
		{name: "the later unit prefers", keys: map[string]func(*unitctl.Annotation){"web.service": prefer}, key: "Prefer="},
		{name: "the first unit prefers", keys: map[string]func(*unitctl.Annotation){"api.service": prefer}, key: "Prefer=", wantPref: []string{"node-b"}},
		{name: "thresholds differ", keys: map[string]func(*unitctl.Annotation){"web.service": threshold}, key: "FailureThreshold="},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				sd := newFakeSystemd(map[string]string{"api.service": "a", "web.service": "a"})
				sd.set(func(f *fakeSystemd) { f.keys = c.keys })
				store := newMemStore()
				d, logs := testDaemon(t, sd, store)
				ctx, cancel := context.WithCancel(t.Context())
				defer func() {
					cancel()
					d.Shutdown(context.WithoutCancel(ctx))
				}()
				d.Reload(ctx)
				time.Sleep(30 * time.Second)
				synctest.Wait()
				probs := d.Snapshot(ctx).Problems
				if len(probs) != 1 {
					t.Fatalf("unit problems %+v, want one for web.service\n%s", probs, logs)
				}
				p := probs[0]
				if p.Unit != "web.service" || p.Lease != "a" || p.Kind != "annotation" ||
					!strings.Contains(p.Msg, "api.service") || !strings.Contains(p.Msg, "web.service") || !strings.Contains(p.Msg, c.key) {
					t.Errorf("unit problem %+v: want web.service of lease a, kind annotation, naming api.service, web.service and %s", p, c.key)
				}
				s := d.find("a")
				if s == nil || !slices.Equal(s.Units, []string{"api.service"}) {
					t.Fatalf("lease a's supervisor %v, want one of api.service only", s)
				}
				if d.supervisorOf("web.service") != nil {
					t.Errorf("web.service, which disagrees, is managed")
				}
				if got := d.settingsFor("a").Prefer; !slices.Equal(got, c.wantPref) {
					t.Errorf("lease a's Prefer= %v, want api.service's %v", got, c.wantPref)
				}
				if !sd.isActive("api.service") || sd.isActive("web.service") || !heldBy(store, "a", "node-a") {
					t.Errorf("api.service active %v, web.service active %v, record %v: want api.service alone run under lease a\n%s",
						sd.isActive("api.service"), sd.isActive("web.service"), store.record("a"), logs)
				}
				if !logged(logs, "config_error") {
					t.Errorf("no config_error in the journal:\n%s", logs)
				}
			})
		})
	}
}
