package supervisor

import (
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/unitlease/unitlease/internal/redistest"
	"github.com/unitlease/unitlease/policy"
	"github.com/unitlease/unitlease/redislease"
)

// Attacks on rule 8 with two supervisors over a real Redis.
// The probe here passes; what gets through is in break_server_open_test.go.

// rollbackUnderALeader: node-0 held lease L (web.service) and released
// it before node-y and node-z started; one of them acquires (a lease
// span later: neither saw the release happen) and runs web.service, the
// other ages its record. Then, right after a renewal, Redis goes back to
// the state after node-0's release, by rollback(lease, unit): the raw
// values of the lease key and web.service's unit key then. The standby is
// nudged (a wake-up, or its poll landing there). Two copies of
// web.service are reported by nodeUnits.Start.
func rollbackUnderALeader(t *testing.T, srv *redistest.Server, rollback func(lease, unit string)) {
	timing := policy.DefaultTiming()
	resolved, err := timing.Resolved()
	if err != nil {
		t.Fatal(err)
	}
	span := resolved.LeaseSpan
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		old, err := redislease.New(redislease.Config{URL: srv.URL(), KeyPrefix: "unitlease:", Node: "node-0",
			ReplyMax: timing.ReplyMax, LeaseSpan: span})
		if err != nil {
			t.Fatal(err)
		}
		held, err := old.AcquireUnits(t.Context(), "L", []string{"web.service"}, policy.Absent)
		if err == nil {
			_, err = old.ReleaseUnits(t.Context(), "L", []string{"web.service"}, held)
		}
		if err != nil {
			t.Fatal(err)
		}
		old.Close()
		savedLease := srv.Command("GET", "unitlease:lease:L")
		savedUnit := srv.Command("GET", "unitlease:unit:web.service")

		ny := startNodeTiming(t, srv, c, timing, 1, "node-y", "L", "web.service")
		nz := startNodeTiming(t, srv, c, timing, 2, "node-z", "L", "web.service")
		var leader, standby *node
		for end := time.Now().Add(3 * span); leader == nil && time.Now().Before(end); {
			time.Sleep(100 * time.Millisecond)
			synctest.Wait()
			switch r := c.runs("web.service"); {
			case slices.Equal(r, []string{"node-y"}):
				leader, standby = ny, nz
			case slices.Equal(r, []string{"node-z"}):
				leader, standby = nz, ny
			}
		}
		if leader == nil {
			t.Fatalf("nobody runs web.service after %v", 3*span)
		}
		// The standby reads the leader's record at least once, then wait
		// for a renewal to be just done.
		time.Sleep(2 * resolved.PollMax)
		synctest.Wait()
		heldVersion := func() uint64 {
			leader.sup.mu.Lock()
			defer leader.sup.mu.Unlock()
			r, _ := leader.sup.machine.Held()
			return r.Version
		}
		for last := heldVersion(); heldVersion() == last; {
			time.Sleep(10 * time.Millisecond)
			synctest.Wait()
		}
		rollback(savedLease, savedUnit)
		standby.sup.Nudge()
		for end := time.Now().Add(2 * span); time.Now().Before(end); {
			time.Sleep(100 * time.Millisecond)
			synctest.Wait()
			if t.Failed() {
				t.Logf("leader's journal:\n%s\nstandby's journal:\n%s", leader.logs, standby.logs)
				return
			}
		}
		t.Logf("%v after the rollback: web.service runs on %v; leader %s, standby %s",
			2*span, c.runs("web.service"), leader.sup.Status().Role, standby.sup.Status().Role)
	})
}

// TestProbeRestartedRollbackUnderALeader: the rollback comes with a
// restart (an older AOF: a new identity). The standby ages node-0's
// released record; the leader's next renewal is a loss. No two copies.
func TestProbeRestartedRollbackUnderALeader(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{AppendOnly: true})
	rollbackUnderALeader(t, srv, func(lease, unit string) {
		srv.Command("SET", "unitlease:lease:L", lease)
		srv.Command("SET", "unitlease:unit:web.service", unit)
		srv.Restart()
	})
}
