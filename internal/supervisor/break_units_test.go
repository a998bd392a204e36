package supervisor

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/unitlease/unitlease/internal/logging"
	"github.com/unitlease/unitlease/internal/redistest"
	"github.com/unitlease/unitlease/policy"
	"github.com/unitlease/unitlease/redislease"
)

// startNodeTiming is startNode with a timing and seed of the caller's.
func startNodeTiming(t *testing.T, srv *redistest.Server, c *cluster, timing policy.Timing, seed uint64, name, lease string, units ...string) *node {
	t.Helper()
	m, err := policy.New(policy.Config{Timing: timing, Seed: seed})
	if err != nil {
		t.Fatal(err)
	}
	store, err := redislease.New(redislease.Config{URL: srv.URL(), KeyPrefix: "unitlease:", Node: name,
		ReplyMax: timing.ReplyMax, LeaseSpan: m.Timing().LeaseSpan})
	if err != nil {
		t.Fatal(err)
	}
	n := &node{store: store, logs: &syncBuffer{}}
	n.sup = New(lease, units, name, m, store, c.on(name), BootClock(), logging.Text(n.logs, slog.LevelDebug))
	ctx, cancel := context.WithCancel(t.Context())
	n.cancel = cancel
	n.sup.Start(ctx)
	t.Cleanup(n.stop)
	return n
}

// TestBreakSkippedConfirmWaitOverAnotherLeasesRecord attacks the confirm
// wait that policy.Machine.acquired skips when the aged value is another
// lease's record (Record.Other): "the other lease's record ... never comes
// back". That argument is about the acquirer's own observation; the confirm
// wait protects the OTHER standbys of the same lease that aged a missing
// key, and a standby of the same lease with a different unit set (a rolling
// re-annotation of a lease with two units, where only one moves) sees the
// lease key missing, not the composite.
//
// db.service moves from lease A to lease B, which already has web.service:
//
//   - node-0 held A (db.service) and died: A's key and db.service's unit key
//     hold its stale record.
//   - node-1 is re-annotated: B = {db.service, web.service}. It ages the
//     composite (B missing, db.service under A).
//   - node-2 is not yet: B = {web.service}. It ages B's missing key.
//   - node-1 acquires B first (jitter; made deterministic here by keeping
//     node-2 ineligible until then) and, the value being marked Other,
//     starts both units at once, without the confirm wait.
//   - Redis restarts without persistence (FLUSHALL here) before node-2's
//     next poll; the restart's resubscribe nudges node-2, which sees B
//     missing as it was, already aged, and acquires B over missing.
//   - node-1 is cut off from Redis at the same moment: it cannot learn that
//     its record is gone, and runs on to its deadline (retry +
//     renew_deadline).
//
// node-2 starts web.service after its confirm wait (≈ observe gap, 16 s
// with the default timing), while node-1 still runs it (until 25 s + its
// stop). Had node-1 confirmed too, as it does over a missing key, it would
// never have started: its confirming renewal fails.
func TestBreakSkippedConfirmWaitOverAnotherLeasesRecord(t *testing.T) {
	// node-2 is not re-annotated yet: B = {web.service}.
	skippedConfirmWait(t, "A", "B")
}

// TestBreakSkippedConfirmWaitTwoLeasesOneUnit is the same with web.service
// named by two leases at once (a typo, or web.service moving from lease C
// to lease B): node-2 manages it under lease C, whose key is missing.
// Unit keys are meant to keep it to one lease; after the data loss, node-2
// finds web.service's key missing and claims it under C while node-1 runs
// it under B.
func TestBreakSkippedConfirmWaitTwoLeasesOneUnit(t *testing.T) {
	skippedConfirmWait(t, "A", "C")
}

// TestBreakNoConfirmWaitWhenClaimingAMissingUnitKey needs no record of
// another lease at all: the confirm wait is decided on the lease's own key
// alone, but an acquisition now also writes unit keys, and a missing unit
// key is a value that repeats after a data loss just like a missing lease
// key. node-0 held B with db.service only (B's old unit set) and died;
// node-1 (B = {db.service, web.service}) acquires over that stale, present
// record, so it starts at once, and claims web.service's missing key.
// node-2 manages web.service under lease C and had aged C's key and
// web.service's key missing; after the data loss it acquires C over
// missing, confirms, and starts web.service while node-1 still runs it.
func TestBreakNoConfirmWaitWhenClaimingAMissingUnitKey(t *testing.T) {
	skippedConfirmWait(t, "B", "C")
}

// skippedConfirmWait runs the scenario above: node-0 held lease0 with
// db.service and died; node-1 manages db.service and web.service under
// B, node-2 web.service alone under lease2.
func skippedConfirmWait(t *testing.T, lease0, lease2 string) {
	srv := redistest.Start(t, redistest.Options{})
	timing := policy.DefaultTiming()
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		resolved, err := timing.Resolved()
		if err != nil {
			t.Fatal(err)
		}
		span := resolved.LeaseSpan
		// node-0 held A with db.service, and died.
		dead, err := redislease.New(redislease.Config{URL: srv.URL(), KeyPrefix: "unitlease:", Node: "node-0",
			ReplyMax: timing.ReplyMax, LeaseSpan: span})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := dead.AcquireUnits(t.Context(), lease0, []string{"db.service"}, policy.Absent); err != nil {
			t.Fatal(err)
		}
		dead.Close()

		n1 := startNodeTiming(t, srv, c, timing, 1, "node-1", "B", "db.service", "web.service")
		n2 := startNodeTiming(t, srv, c, timing, 2, "node-2", lease2, "web.service")
		n2.sup.SetEligible(t.Context(), false) // it ages all the same; it just loses the race
		limit := time.Now().Add(4 * span)
		for !n1.sup.Holding() && time.Now().Before(limit) {
			time.Sleep(time.Millisecond)
			synctest.Wait()
		}
		if !n1.sup.Holding() {
			t.Fatalf("node-1 never acquired B over node-0's stale record: %+v\n%s", n1.sup.Status(), n1.logs)
		}
		n2.sup.mu.Lock()
		seen, since, ok := n2.sup.machine.Seen()
		n2.sup.mu.Unlock()
		if !ok || seen.Present {
			t.Fatalf("node-2 is not aging %s's missing key: %v since %v (%v)", lease2, seen, since, ok)
		}
		acquiredAt := time.Now()
		t.Logf("node-1 acquired B over node-0's record under %s and is %s at once: db.service on %v, web.service on %v; node-2 has aged %s's missing key for %v",
			lease0, n1.sup.Status().Role, c.runs("db.service"), c.runs("web.service"), lease2, time.Duration(policy.Instant(n2.sup.clock())-since))

		srv.Command("FLUSHALL") // Redis restarts without persistence
		n1.store.Close()        // node-1 is cut off: every request of it fails
		n2.sup.SetEligible(t.Context(), true)
		n2.sup.Nudge() // the resubscription after the restart
		var both time.Duration
		for end := time.Now().Add(2 * span); time.Now().Before(end); {
			time.Sleep(100 * time.Millisecond)
			synctest.Wait()
			if r := c.runs("web.service"); slices.Contains(r, "node-1") && slices.Contains(r, "node-2") {
				if both == 0 {
					t.Errorf("web.service runs on node-1 (lease B) and node-2 (lease %s) at once, %v after node-1 acquired B without a confirm wait",
						lease2, time.Since(acquiredAt))
				}
				both += 100 * time.Millisecond
			}
		}
		if both > 0 {
			t.Errorf("two copies of web.service for about %v", both)
			t.Logf("node-1's journal:\n%s\nnode-2's journal:\n%s", n1.logs, n2.logs)
		}
	})
}

// TestBreakReleasedShortcutClaimsAUnitWithoutConfirmWait needs neither
// another lease's live record nor an ineligible node: node-0 held B with
// web.service and released it, so web.service's key holds B's released
// record, which a standby of another lease reads as "no live record" (the
// same observation as a missing key). node-2 manages web.service under
// lease C and has aged C's missing key (and web.service's not-live key)
// for almost the lease span when node-1's daemon starts: it finds B
// released, acquires it at once and starts web.service at once. Redis
// then restarts without persistence and node-1 is cut off; node-2, nudged
// by the resubscription, sees the same "missing" it aged, acquires C over
// it, confirms, and starts web.service while node-1 still runs it.
func TestBreakReleasedShortcutClaimsAUnitWithoutConfirmWait(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	timing := policy.DefaultTiming()
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		resolved, err := timing.Resolved()
		if err != nil {
			t.Fatal(err)
		}
		span := resolved.LeaseSpan
		old, err := redislease.New(redislease.Config{URL: srv.URL(), KeyPrefix: "unitlease:", Node: "node-0",
			ReplyMax: timing.ReplyMax, LeaseSpan: span})
		if err != nil {
			t.Fatal(err)
		}
		held, err := old.AcquireUnits(t.Context(), "B", []string{"web.service"}, policy.Absent)
		if err == nil {
			_, err = old.ReleaseUnits(t.Context(), "B", []string{"web.service"}, held)
		}
		if err != nil {
			t.Fatal(err)
		}
		old.Close()

		n2 := startNodeTiming(t, srv, c, timing, 2, "node-2", "C", "web.service")
		// node-2 ages what it sees of C: C's key missing, and web.service's
		// key holding B's released record.
		age := func() time.Duration {
			n2.sup.mu.Lock()
			defer n2.sup.mu.Unlock()
			_, since, ok := n2.sup.machine.Seen()
			if !ok {
				return 0
			}
			return time.Duration(policy.Instant(n2.sup.clock()) - since)
		}
		for age() < span-100*time.Millisecond {
			time.Sleep(10 * time.Millisecond)
			synctest.Wait()
		}
		if n2.sup.Holding() {
			t.Fatalf("node-2 already holds C")
		}
		n1 := startNodeTiming(t, srv, c, timing, 1, "node-1", "B", "web.service")
		// A node that just started takes no released record at once (it
		// did not see the release happen: rule 8); it ages B's
		// like any other, while node-2 reaches the end of its own age.
		for end := time.Now().Add(2 * span); !n1.sup.Holding() && time.Now().Before(end); {
			time.Sleep(100 * time.Millisecond)
			synctest.Wait()
			if r := c.runs("web.service"); len(r) > 1 {
				t.Fatalf("web.service runs on %v", r)
			}
		}
		if !n1.sup.Holding() {
			if r := c.runs("web.service"); len(r) != 1 || r[0] != "node-2" {
				t.Fatalf("node-1 never acquired B and web.service runs on %v; want node-2 alone (lease C)", r)
			}
			return
		}
		acquiredAt := time.Now()
		t.Logf("node-1 acquired B over its released record and is %s; node-2 has aged C (and web.service) missing for %v", n1.sup.Status().Role, age())
		srv.Command("FLUSHALL") // Redis restarts without persistence
		n1.store.Close()        // node-1 is cut off
		time.Sleep(200 * time.Millisecond)
		synctest.Wait()
		n2.sup.Nudge() // the resubscription after the restart
		var both time.Duration
		for end := time.Now().Add(2 * span); time.Now().Before(end); {
			time.Sleep(100 * time.Millisecond)
			synctest.Wait()
			if r := c.runs("web.service"); slices.Contains(r, "node-1") && slices.Contains(r, "node-2") {
				if both == 0 {
					t.Errorf("web.service runs on node-1 (lease B) and node-2 (lease C) at once, %v after node-1 acquired B", time.Since(acquiredAt))
				}
				both += 100 * time.Millisecond
			}
		}
		if both > 0 {
			t.Errorf("two copies of web.service for about %v", both)
		}
	})
}
