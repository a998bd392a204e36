package redislease

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/unitlease/unitlease/internal/redistest"
)

// Adversarial tests of the Sentinel split-brain check (Failover.Problems,
// which `unitlease run` refuses to start on: internal/daemon/process.go
// sentinelSafe). Each asserts that an unsafe setup is refused and fails
// while it is accepted.

// TestBreakRule8MaxLagZeroTurnsTheFenceOff: Redis enforces
// min-replicas-to-write only when min-replicas-max-lag is non-zero too
// (checkGoodReplicasStatus: "!server.repl_min_slaves_max_lag || ..." —
// a zero lag means "not configured"). Problems takes MaxLag 0 as the
// tightest setting: Writable = 0 + 2s, which passes for any down-after of
// 3s or more. A master cut off from every replica then takes renewals for
// as long as it runs, while the sentinels promote a replica and a standby
// acquires there.
func TestBreakRule8MaxLagZeroTurnsTheFenceOff(t *testing.T) {
	f := Failover{MinReplicas: 1, MaxLag: 0, Replicas: 2, DownAfter: 5 * time.Second,
		FailoverTimeout: 3 * time.Second, Sentinels: 3, Known: 3, Quorum: 2}

	// The real server: min-replicas-to-write 1, min-replicas-max-lag 0,
	// and no replica at all. The acquisition (a write in a script) goes
	// through; with max-lag 1 the same server refuses it.
	srv := redistest.Start(t, redistest.Options{Config: []string{"min-replicas-to-write 1", "min-replicas-max-lag 0"}})
	a := newStore(t, srv, "node-a")
	if _, err := a.Acquire(bg, "vpn", mustObserve(t, a, "vpn")); err != nil {
		t.Fatalf("with min-replicas-max-lag 0 the master refused a write: %v (the premise of this test is wrong)", err)
	}
	srv.Command("CONFIG", "SET", "min-replicas-max-lag", "1")
	_, err := a.Acquire(bg, "other", mustObserve(t, a, "other"))
	if err == nil || !strings.Contains(err.Error(), "NOREPLICAS") {
		t.Fatalf("with min-replicas-max-lag 1 and no replica: %v, want NOREPLICAS", err)
	}

	if p := f.Problems(); len(p) == 0 {
		t.Fatalf("%+v: no problem reported (%s), yet a master with min-replicas-max-lag 0 and no replica "+
			"just took a write: the fence is off, a cut-off master takes renewals forever", f, f.Inequality())
	}
}

// TestBreakRule8SentinelsNotListedAreNotChecked: Failover reads
// down-after-milliseconds only from the sentinels in the configuration
// (SentinelAddrs) and takes the smallest of those. It reads how many
// sentinels the first one knows (Known) but Problems never compares it
// with how many answered: a sentinel that watches the master but is not
// in this node's list (added later, or left out of one node's file) is
// never read. Its own down-after decides when it calls the master
// subjectively down; with the quorum reached by such sentinels, a
// replica is promoted long before the down-after that was checked.
func TestBreakRule8SentinelsNotListedAreNotChecked(t *testing.T) {
	f := Failover{MinReplicas: 1, MaxLag: time.Second, Replicas: 2, DownAfter: 5 * time.Second,
		FailoverTimeout: 3 * time.Second, Sentinels: 1, Known: 3, Quorum: 2}
	if p := f.Problems(); len(p) == 0 {
		t.Errorf("%+v: no problem reported though 2 of the 3 sentinels that watch the master were never read", f)
	}

	// The same with real sentinels: two of three (a quorum) lowered to
	// 200 ms, the node's configuration lists the third.
	s := redistest.StartSentinel(t, redistest.SentinelOptions{MinReplicas: 1, MaxLag: 1, DownAfter: 5 * time.Second})
	for _, sen := range s.Sentinels[1:] {
		sen.Command("SENTINEL", "SET", s.Name, "down-after-milliseconds", "200")
	}
	cfg := Config{Sentinels: s.Addrs()[:1], MasterName: s.Name, KeyPrefix: "unitlease:", Node: "node-a",
		ReplyMax: time.Second, LeaseSpan: 37 * time.Second}
	st, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	got, err := st.Failover(bg)
	if err != nil {
		t.Fatal(err)
	}
	if p := got.Problems(); len(p) == 0 {
		t.Errorf("read %+v: no problem, though a quorum of the sentinels has down-after-milliseconds 200ms "+
			"(%s checked only the listed one)", got, got.Inequality())
	}
}

// TestBreakRule8OnlyTheCurrentMastersFenceIsRead: min-replicas-to-write
// and min-replicas-max-lag are per-server settings, and Failover reads
// them from the current master alone (CONFIG GET through the failover
// client), once, at `run`. A replica configured without them passes the
// check; once it is promoted (the next failover), it is a master without
// the fence, and a partition that cuts it off lets it take renewals for
// as long as it runs. The check should read every server the sentinels
// list (SENTINEL REPLICAS), or be repeated on every new identity.
func TestBreakRule8OnlyTheCurrentMastersFenceIsRead(t *testing.T) {
	s := redistest.StartSentinel(t, redistest.SentinelOptions{MinReplicas: 1, MaxLag: 1, DownAfter: 5 * time.Second})
	master := s.Master()
	for _, srv := range s.Servers {
		if srv != master {
			srv.Command("CONFIG", "SET", "min-replicas-to-write", "0")
		}
	}
	st := sentinelStore(t, s, "node-a")
	got, err := st.Failover(bg)
	if err != nil {
		t.Fatal(err)
	}
	if p := got.Problems(); len(p) == 0 {
		t.Errorf("read %+v: no problem, though both replicas (the next masters) have min-replicas-to-write 0", got)
	}
}

// TestBreakRule8SetupsThatNeverTakeAWrite: liveness. Problems accepts a
// master that can never have enough replicas: with min-replicas-to-write
// above the replicas the sentinels know (0 replicas and
// min-replicas-to-write 1, or 2 replicas and 3), every acquisition gets
// NOREPLICAS, which the store reports as ErrUnknown: `run` starts, and
// the lease is never taken, with nothing but "outcome unknown" in the log.
func TestBreakRule8SetupsThatNeverTakeAWrite(t *testing.T) {
	for _, f := range []Failover{
		{MinReplicas: 1, MaxLag: time.Second, Replicas: 0, DownAfter: 5 * time.Second, Sentinels: 1, Known: 1, Quorum: 1},
		{MinReplicas: 3, MaxLag: time.Second, Replicas: 2, DownAfter: 5 * time.Second, Sentinels: 3, Known: 3, Quorum: 2},
	} {
		if p := f.Problems(); len(p) == 0 {
			t.Errorf("%+v: no problem, yet min-replicas-to-write %d > %d replicas: no write ever succeeds", f, f.MinReplicas, f.Replicas)
		}
	}
	// What an acquisition gets from such a master.
	srv := redistest.Start(t, redistest.Options{Config: []string{"min-replicas-to-write 1", "min-replicas-max-lag 1"}})
	a := newStore(t, srv, "node-a")
	_, err := a.Acquire(bg, "vpn", mustObserve(t, a, "vpn"))
	if !errors.Is(err, ErrUnknown) {
		t.Logf("acquisition on a master without enough replicas: %v", err)
	}
}
