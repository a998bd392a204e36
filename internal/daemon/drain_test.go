package daemon

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/unitlease/unitlease/internal/control"
	"github.com/unitlease/unitlease/policy"
	"github.com/unitlease/unitlease/redislease"
)

// drainLeading is leading with its store and a state directory: a
// daemon on node-a that leads lease a of web.service, in a synctest
// bubble, while the other nodes announce peers; stop ends it.
func drainLeading(t *testing.T, peers ...redislease.Announcement) (sd *fakeSystemd, store *memStore, d *Daemon, logs *syncBuffer, ctx context.Context, stop func()) {
	t.Helper()
	sd = newFakeSystemd(map[string]string{"web.service": "a"})
	store = newMemStore()
	store.announce(peers...)
	d, logs = testDaemon(t, sd, store)
	d.stateDir = t.TempDir()
	ctx, cancel := context.WithCancel(t.Context())
	d.Reload(ctx)
	time.Sleep(30 * time.Second)
	synctest.Wait()
	if !sd.isActive("web.service") || store.record("a").Holder != "node-a" || store.record("a").Released {
		cancel()
		t.Fatalf("not leading lease a (record %v):\n%s", store.record("a"), logs)
	}
	return sd, store, d, logs, ctx, func() {
		cancel()
		d.Shutdown(context.WithoutCancel(ctx))
	}
}

// holdAs writes lease name as held by node (a peer that acquired it).
func holdAs(store *memStore, name, node string) {
	store.mu.Lock()
	defer store.mu.Unlock()
	cur := store.current(name)
	store.write(name, policy.Record{Holder: node, Version: cur.Version + 1, Token: strings.Repeat("b", 32)})
}

// releaseAs writes lease name as released by its holder.
func releaseAs(store *memStore, name string) {
	store.mu.Lock()
	defer store.mu.Unlock()
	cur := store.current(name)
	cur.Version++
	cur.Released = true
	store.write(name, cur)
}

// takeWhenReleased is a peer, node, that takes lease name as soon as its
// record is released, as a ready standby does: the channel gets the
// released record it took over. It gives up when ctx ends.
func takeWhenReleased(ctx context.Context, store *memStore, name, node string) <-chan policy.Record {
	ch := make(chan policy.Record, 1)
	go func() {
		for {
			store.mu.Lock()
			cur := store.current(name)
			if cur.Present && cur.Released {
				store.write(name, policy.Record{Holder: node, Version: cur.Version + 1, Token: strings.Repeat("c", 32)})
				store.mu.Unlock()
				ch <- cur
				return
			}
			store.mu.Unlock()
			select {
			case <-ctx.Done():
				close(ch)
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
	return ch
}

// heldBy reports whether node holds lease name in the store.
func heldBy(store *memStore, name, node string) bool {
	r := store.record(name)
	return r.Present && !r.Released && r.Holder == node
}

func announces(store *memStore, a redislease.Announcement) bool {
	return slices.Contains(store.announced(), a)
}

// TestDrainHandsOffToAReadyPeer: draining a leader while a peer announces
// itself ready for the lease stops the unit, releases the lease, and
// reports it handed off to the peer that took it. A peer that does not
// take it within the handoff's wait leaves the lease released and the
// outcome failed, not handed off.
func TestDrainHandsOffToAReadyPeer(t *testing.T) {
	ready := redislease.Announcement{Node: "node-b", State: redislease.AnnounceReady, Lease: "a"}
	t.Run("the peer takes it", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			sd, store, d, logs, ctx, stop := drainLeading(t, ready)
			defer stop()
			taken := takeWhenReleased(ctx, store, "a", "node-b")
			res, err := d.Drain(ctx, false)
			if err != nil {
				t.Fatalf("drain: %v\n%s", err, logs)
			}
			want := []control.DrainOutcome{{Lease: "a", Outcome: control.DrainHandedOff, Holder: "node-b"}}
			if !res.Drained || res.Node != "node-a" || !slices.Equal(res.Leases, want) {
				t.Errorf("drain result %+v, want drained node-a with %+v\n%s", res, want, logs)
			}
			synctest.Wait()
			rel, ok := <-taken
			if !ok || rel.Holder != "node-a" || !rel.Released || rel.Next != "" {
				t.Errorf("the record the peer took over: %v (taken %v), want released by node-a to any node", rel, ok)
			}
			if sd.isActive("web.service") {
				t.Errorf("web.service still runs here after the drain handed it off:\n%s", logs)
			}
			if !heldBy(store, "a", "node-b") || !d.Drained() {
				t.Errorf("after the drain: record %v, drained %v", store.record("a"), d.Drained())
			}
		})
	})
	t.Run("the peer does not take it", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			sd, store, d, logs, ctx, stop := drainLeading(t, ready)
			defer stop()
			res, err := d.Drain(ctx, false)
			if err != nil {
				t.Fatalf("drain: %v\n%s", err, logs)
			}
			if len(res.Leases) != 1 || res.Leases[0].Outcome != control.DrainFailed || !strings.Contains(res.Leases[0].Msg, "no peer took it") {
				t.Errorf("drain result %+v, want lease a failed: no peer took it\n%s", res, logs)
			}
			if r := store.record("a"); !r.Released || r.Holder != "node-a" || sd.isActive("web.service") {
				t.Errorf("record %v, web.service active %v: want stopped and released by node-a", r, sd.isActive("web.service"))
			}
		})
	})
}

// TestDrainWithNoReadyPeerLeavesItRunning: with no other node ready for
// the lease (one excluded for it, one ready for another lease only), a
// drain leaves the unit running and the lease held (renewed past the
// lease span), and the node announces itself drained, for the node and
// for the lease.
func TestDrainWithNoReadyPeerLeavesItRunning(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sd, store, d, logs, ctx, stop := drainLeading(t,
			redislease.Announcement{Node: "node-b", State: redislease.AnnounceExcluded, Lease: "a"},
			redislease.Announcement{Node: "node-c", State: redislease.AnnounceReady, Lease: "b"})
		defer stop()
		if !announces(store, redislease.Announcement{Node: "node-a", State: redislease.AnnounceReady, Lease: "a"}) {
			t.Errorf("before the drain, node-a announces %v, not ready for a", store.announced())
		}
		res, err := d.Drain(ctx, false)
		if err != nil {
			t.Fatalf("drain: %v\n%s", err, logs)
		}
		if !res.Drained || len(res.Leases) != 1 || res.Leases[0].Lease != "a" || res.Leases[0].Outcome != control.DrainLeftRunning {
			t.Errorf("drain result %+v, want lease a left_running\n%s", res, logs)
		}
		for _, a := range []redislease.Announcement{
			{Node: "node-a", State: redislease.AnnounceDrained},
			{Node: "node-a", State: redislease.AnnounceDrained, Lease: "a"},
		} {
			if !announces(store, a) {
				t.Errorf("node-a announces %v, without %+v", store.announced(), a)
			}
		}
		if announces(store, redislease.Announcement{Node: "node-a", State: redislease.AnnounceReady, Lease: "a"}) {
			t.Errorf("a drained node-a still announces itself ready for a: %v", store.announced())
		}
		before := store.record("a")
		time.Sleep(2 * d.cfg.Timing.LeaseSpan)
		synctest.Wait()
		after := store.record("a")
		if !sd.isActive("web.service") || !heldBy(store, "a", "node-a") || after.Version <= before.Version {
			t.Errorf("left running: web.service active %v, the record went from %v to %v over two lease spans\n%s",
				sd.isActive("web.service"), before, after, logs)
		}
	})
}

// TestDrainStopWithNoPeerStopsAndReleases: drain --stop stops and
// releases a lease no peer is ready for, and the drained node does not
// take it back; a unit whose stop fails keeps its lease held, reported
// failed.
func TestDrainStopWithNoPeerStopsAndReleases(t *testing.T) {
	t.Run("stops", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			sd, store, d, logs, ctx, stop := drainLeading(t)
			defer stop()
			res, err := d.Drain(ctx, true)
			if err != nil {
				t.Fatalf("drain --stop: %v\n%s", err, logs)
			}
			if len(res.Leases) != 1 || res.Leases[0].Outcome != control.DrainStopped {
				t.Errorf("drain --stop result %+v, want lease a stopped\n%s", res, logs)
			}
			if r := store.record("a"); !r.Released || r.Holder != "node-a" || sd.isActive("web.service") {
				t.Errorf("record %v, web.service active %v: want stopped and released", r, sd.isActive("web.service"))
			}
			time.Sleep(2 * d.cfg.Timing.LeaseSpan)
			synctest.Wait()
			if r := store.record("a"); !r.Released || sd.isActive("web.service") {
				t.Errorf("the drained node took the lease back: record %v, web.service active %v\n%s", r, sd.isActive("web.service"), logs)
			}
		})
	})
	t.Run("the stop fails", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			sd, store, d, logs, ctx, stop := drainLeading(t)
			defer func() {
				sd.set(func(f *fakeSystemd) { f.stuck["web.service"] = false })
				stop()
			}()
			sd.set(func(f *fakeSystemd) { f.stuck["web.service"] = true })
			res, err := d.Drain(ctx, true)
			if err != nil {
				t.Fatalf("drain --stop: %v\n%s", err, logs)
			}
			if len(res.Leases) != 1 || res.Leases[0].Outcome != control.DrainFailed {
				t.Errorf("drain --stop of a unit that does not stop: %+v, want failed\n%s", res, logs)
			}
			if !heldBy(store, "a", "node-a") {
				t.Errorf("a failed stop released the lease: %v", store.record("a"))
			}
		})
	})
}

// TestDrainedNodeAcquiresNothingUntilUndrain: a drained standby takes
// neither a released record nor a missing key, however long they rest;
// once undrained it takes the lease, and announces itself ready again.
func TestDrainedNodeAcquiresNothingUntilUndrain(t *testing.T) {
	for _, c := range []struct {
		name string
		// before the daemon's first reload, and once it drained
		setup, drained func(*memStore)
		drainFirst     bool
	}{
		{name: "released", setup: func(s *memStore) { holdAs(s, "a", "node-b") }, drained: func(s *memStore) { releaseAs(s, "a") }},
		{name: "missing", setup: func(*memStore) {}, drained: func(*memStore) {}, drainFirst: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				sd := newFakeSystemd(map[string]string{"web.service": "a"})
				store := newMemStore()
				c.setup(store)
				d, logs := testDaemon(t, sd, store)
				d.stateDir = t.TempDir()
				ctx, cancel := context.WithCancel(t.Context())
				defer func() {
					cancel()
					d.Shutdown(context.WithoutCancel(ctx))
				}()
				if c.drainFirst {
					if _, err := d.Drain(ctx, false); err != nil {
						t.Fatal(err)
					}
				}
				d.Reload(ctx)
				synctest.Wait()
				if !c.drainFirst {
					if res, err := d.Drain(ctx, false); err != nil || len(res.Leases) != 0 {
						t.Fatalf("drain of a standby: %+v, %v", res, err)
					}
				}
				c.drained(store)
				time.Sleep(2*d.cfg.Timing.LeaseSpan + d.cfg.Timing.PollMax)
				synctest.Wait()
				if r := store.record("a"); heldBy(store, "a", "node-a") || sd.isActive("web.service") {
					t.Fatalf("a drained node acquired lease a (record %v, web.service active %v):\n%s", r, sd.isActive("web.service"), logs)
				}
				if !announces(store, redislease.Announcement{Node: "node-a", State: redislease.AnnounceDrained, Lease: "a"}) {
					t.Errorf("drained, node-a announces %v", store.announced())
				}
				res, err := d.Undrain(ctx)
				if err != nil || res.Drained || d.Drained() {
					t.Fatalf("undrain: %+v, %v (drained %v)", res, err, d.Drained())
				}
				want := []redislease.Announcement{{Node: "node-a", State: redislease.AnnounceReady, Lease: "a"}}
				if got := store.announced(); !slices.Equal(got, want) {
					t.Errorf("undrained, node-a announces %v, want %v", got, want)
				}
				time.Sleep(2*d.cfg.Timing.LeaseSpan + d.cfg.Timing.PollMax)
				synctest.Wait()
				if !heldBy(store, "a", "node-a") || !sd.isActive("web.service") {
					t.Errorf("undrained, node-a does not lead lease a (record %v, web.service active %v):\n%s",
						store.record("a"), sd.isActive("web.service"), logs)
				}
			})
		})
	}
}

// TestDrainSurvivesARestart: the drain's mark in the state directory
// keeps a restarted daemon from taking any lease until undrain removes
// it; a mark that cannot be read (the state directory is a file) counts
// as drained; without a mark the daemon takes the lease.
func TestDrainSurvivesARestart(t *testing.T) {
	// restart is a new daemon of node-a on store with stateDir dir, as
	// Run makes it; it reports whether it took lease a.
	restart := func(t *testing.T, store *memStore, dir string) (d *Daemon, sd *fakeSystemd, logs *syncBuffer, ctx context.Context, took bool) {
		sd = newFakeSystemd(map[string]string{"web.service": "a"})
		d, logs = testDaemon(t, sd, store)
		d.stateDir = dir
		d.loadDrained()
		ctx, cancel := context.WithCancel(t.Context())
		t.Cleanup(func() {
			cancel()
			d.Shutdown(context.WithoutCancel(ctx))
		})
		d.Reload(ctx)
		time.Sleep(2*d.cfg.Timing.LeaseSpan + d.cfg.Timing.PollMax)
		synctest.Wait()
		return d, sd, logs, ctx, heldBy(store, "a", "node-a") || sd.isActive("web.service")
	}
	t.Run("drained", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			_, store, d1, logs1, ctx1, stop1 := drainLeading(t)
			dir := d1.stateDir
			if _, err := d1.Drain(ctx1, false); err != nil {
				t.Fatalf("drain: %v\n%s", err, logs1)
			}
			stop1()
			if _, err := os.Stat(filepath.Join(dir, "drained")); err != nil {
				t.Fatalf("no drain mark after the drain: %v", err)
			}
			if r := store.record("a"); !r.Released {
				t.Fatalf("the first daemon's shutdown did not release lease a: %v", r)
			}
			d, _, logs, ctx, took := restart(t, store, dir)
			if !d.Drained() || took {
				t.Fatalf("restarted after a drain: drained %v, took lease a %v (record %v):\n%s", d.Drained(), took, store.record("a"), logs)
			}
			if _, err := d.Undrain(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(filepath.Join(dir, "drained")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the drain mark outlived undrain: %v", err)
			}
			time.Sleep(2*d.cfg.Timing.LeaseSpan + d.cfg.Timing.PollMax)
			synctest.Wait()
			if !heldBy(store, "a", "node-a") {
				t.Errorf("undrained after the restart, node-a does not take lease a: %v\n%s", store.record("a"), logs)
			}
		})
	})
	t.Run("unreadable mark", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "state")
			if err := os.WriteFile(dir, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			store := newMemStore()
			d, _, logs, _, took := restart(t, store, dir)
			if !d.Drained() || took {
				t.Fatalf("with a state directory that is a file: drained %v, took lease a %v:\n%s", d.Drained(), took, logs)
			}
			if !strings.Contains(logs.String(), "cannot read the drain's mark") {
				t.Errorf("the journal does not say the mark could not be read:\n%s", logs)
			}
		})
	})
	t.Run("no mark", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			store := newMemStore()
			d, _, logs, _, took := restart(t, store, t.TempDir())
			if d.Drained() || !took {
				t.Fatalf("with no drain mark: drained %v, took lease a %v:\n%s", d.Drained(), took, logs)
			}
		})
	})
}

// TestDrainWithoutStateDir: a drain that cannot be kept across a restart
// is refused and changes nothing: the node is not drained, and the unit
// keeps running.
func TestDrainWithoutStateDir(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sd, store, d, logs, ctx, stop := drainLeading(t, redislease.Announcement{Node: "node-b", State: redislease.AnnounceReady, Lease: "a"})
		defer stop()
		d.stateDir = ""
		if _, err := d.Drain(ctx, true); err == nil {
			t.Errorf("drain without a state directory succeeded")
		}
		synctest.Wait()
		if d.Drained() || !sd.isActive("web.service") || !heldBy(store, "a", "node-a") {
			t.Errorf("a refused drain: drained %v, web.service active %v, record %v\n%s", d.Drained(), sd.isActive("web.service"), store.record("a"), logs)
		}
	})
}

// TestHandoffToRefusesANodeNotReady: handoff --to a node that does not
// announce itself ready for the lease is refused, with the reason, and
// stops nothing; so is one to this node, or to a name no node can have.
func TestHandoffToRefusesANodeNotReady(t *testing.T) {
	for _, c := range []struct {
		name, to, want string
		notReady       bool
		peers          []redislease.Announcement
	}{
		{name: "announces nothing", to: "node-c", want: "does not watch", notReady: true},
		{name: "ready for another lease only", to: "node-c", want: "does not watch", notReady: true,
			peers: []redislease.Announcement{{Node: "node-c", State: redislease.AnnounceReady, Lease: "b"}}},
		{name: "drained", to: "node-c", want: "drained", notReady: true,
			peers: []redislease.Announcement{{Node: "node-c", State: redislease.AnnounceDrained}, {Node: "node-c", State: redislease.AnnounceDrained, Lease: "a"}}},
		{name: "excluded", to: "node-c", want: "failed there too often", notReady: true,
			peers: []redislease.Announcement{{Node: "node-c", State: redislease.AnnounceExcluded, Lease: "a"}}},
		{name: "ineligible", to: "node-c", want: "cannot run the unit", notReady: true,
			peers: []redislease.Announcement{{Node: "node-c", State: redislease.AnnounceIneligible, Lease: "a"}}},
		{name: "this node", to: "node-a", want: "node-a is this node"},
		{name: "invalid name", to: "node c", want: "--to"},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				// node-b is ready: only the named node's readiness counts.
				peers := append([]redislease.Announcement{{Node: "node-b", State: redislease.AnnounceReady, Lease: "a"}}, c.peers...)
				sd, store, d, logs, ctx, stop := drainLeading(t, peers...)
				defer stop()
				_, err := d.Handoff(ctx, "a", c.to)
				if err == nil || !strings.Contains(err.Error(), c.want) || errors.Is(err, ErrNotReady) != c.notReady {
					t.Fatalf("handoff of a to %s: %v, want an error naming %q (not ready: %v)", c.to, err, c.want, c.notReady)
				}
				if !strings.Contains(err.Error(), c.to) {
					t.Errorf("the refusal %q does not name %s", err, c.to)
				}
				time.Sleep(time.Second)
				synctest.Wait()
				if !sd.isActive("web.service") || !heldBy(store, "a", "node-a") {
					t.Errorf("a refused handoff stopped something: web.service active %v, record %v\n%s", sd.isActive("web.service"), store.record("a"), logs)
				}
			})
		})
	}
}

// TestHandoffToOffersTheRelease: handoff --to a node that announces
// itself ready releases the lease offered to that node (Record.Next),
// and reports that node as the holder once it took it; if it does not
// take it, the handoff says so and the release still names it.
func TestHandoffToOffersTheRelease(t *testing.T) {
	peers := []redislease.Announcement{
		{Node: "node-b", State: redislease.AnnounceReady, Lease: "a"},
		{Node: "node-c", State: redislease.AnnounceReady, Lease: "a"},
	}
	t.Run("taken", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			sd, store, d, logs, ctx, stop := drainLeading(t, peers...)
			defer stop()
			taken := takeWhenReleased(ctx, store, "a", "node-c")
			res, err := d.Handoff(ctx, "a", "node-c")
			if err != nil || res.Lease != "a" || res.Holder != "node-c" {
				t.Fatalf("handoff of a to node-c: %+v, %v\n%s", res, err, logs)
			}
			synctest.Wait()
			rel, ok := <-taken
			if !ok || !rel.Released || rel.Holder != "node-a" || rel.Next != "node-c" {
				t.Errorf("the release node-c took over: %v (taken %v), want released by node-a to node-c", rel, ok)
			}
			if sd.isActive("web.service") {
				t.Errorf("web.service still runs here after the handoff:\n%s", logs)
			}
		})
	})
	t.Run("not taken", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			sd, store, d, logs, ctx, stop := drainLeading(t, peers...)
			defer stop()
			_, err := d.Handoff(ctx, "a", "node-c")
			if err == nil || !strings.Contains(err.Error(), "released to node-c") {
				t.Fatalf("handoff of a to node-c that nobody takes: %v, want the error to say it was released to node-c\n%s", err, logs)
			}
			if r := store.record("a"); !r.Released || r.Holder != "node-a" || r.Next != "node-c" || sd.isActive("web.service") {
				t.Errorf("record %v (web.service active %v): want stopped, released by node-a to node-c", r, sd.isActive("web.service"))
			}
		})
	})
}
