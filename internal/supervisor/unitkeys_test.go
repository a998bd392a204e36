package supervisor

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

	"github.com/unitlease/unitlease/internal/logging"
	"github.com/unitlease/unitlease/internal/redistest"
	"github.com/unitlease/unitlease/policy"
	"github.com/unitlease/unitlease/redislease"
)

// cluster is the units of several nodes: it records, at every start,
// whether another node runs the unit already.
type cluster struct {
	t       *testing.T
	mu      sync.Mutex
	running map[string][]string // unit -> the nodes running it
	starts  map[string]int      // node -> starts
}

func newCluster(t *testing.T) *cluster {
	return &cluster{t: t, running: map[string][]string{}, starts: map[string]int{}}
}

// on returns node's units.
func (c *cluster) on(node string) nodeUnits { return nodeUnits{c, node} }

// runs reports the nodes running unit.
func (c *cluster) runs(unit string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.running[unit])
}

func (c *cluster) startsOn(node string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.starts[node]
}

type nodeUnits struct {
	c    *cluster
	node string
}

func (u nodeUnits) StartOrder(_ context.Context, units []string) ([]string, error) { return units, nil }

func (u nodeUnits) Start(_ context.Context, unit string, _ Env) error {
	u.c.mu.Lock()
	defer u.c.mu.Unlock()
	u.c.starts[u.node]++
	if others := u.c.running[unit]; len(others) > 0 {
		u.c.t.Errorf("%s started %s at %v while %v ran it: two copies", u.node, unit, time.Now().Format("15:04:05.000"), others)
	}
	if !slices.Contains(u.c.running[unit], u.node) {
		u.c.running[unit] = append(u.c.running[unit], u.node)
	}
	return nil
}

func (u nodeUnits) Stop(_ context.Context, unit string, _ func()) (bool, error) {
	u.c.mu.Lock()
	defer u.c.mu.Unlock()
	u.c.running[unit] = slices.DeleteFunc(u.c.running[unit], func(n string) bool { return n == u.node })
	return false, nil
}

// node is one node's supervisor of one lease over a real Redis.
type node struct {
	sup    *Supervisor
	store  *redislease.Store
	logs   *syncBuffer
	cancel context.CancelFunc
}

// syncBuffer is a log buffer safe to read while supervisors write to it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// startNode runs a supervisor of lease with units on name, inside the
// caller's synctest bubble, against srv. It is stopped when the bubble's
// function returns.
func startNode(t *testing.T, srv *redistest.Server, c *cluster, name, lease string, units ...string) *node {
	t.Helper()
	m, err := policy.New(policy.Config{Timing: testTiming, Seed: uint64(len(name) + len(lease))})
	if err != nil {
		t.Fatal(err)
	}
	store, err := redislease.New(redislease.Config{URL: srv.URL(), KeyPrefix: "unitlease:", Node: name,
		ReplyMax: testTiming.ReplyMax, LeaseSpan: m.Timing().LeaseSpan})
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

// stop ends the supervisor and closes its store (twice is harmless).
func (n *node) stop() {
	n.cancel()
	<-n.sup.Done()
	n.store.Close()
}

// reannotated sets up a rolling re-annotation: node-1 holds lease A with
// db.service and runs it; then node-2, already re-annotated, manages
// db.service under lease B. For five lease spans, while node-1 renews A,
// node-2 must not acquire B, and says why in its journal.
func reannotated(t *testing.T, srv *redistest.Server, c *cluster) (n1, n2 *node) {
	n1 = startNode(t, srv, c, "node-1", "A", "db.service")
	time.Sleep(20 * time.Second)
	synctest.Wait()
	if st := n1.sup.Status(); st.Role != "leader" || !slices.Equal(c.runs("db.service"), []string{"node-1"}) {
		t.Fatalf("node-1 is %s for A, db.service runs on %v (want leader, node-1)", st.Role, c.runs("db.service"))
	}
	n2 = startNode(t, srv, c, "node-2", "B", "db.service")
	span := testTiming.SafeMinimum() // the lease span: testTiming derives it
	time.Sleep(5 * span)
	synctest.Wait()
	if st := n2.sup.Status(); st.Holding || c.startsOn("node-2") > 0 {
		t.Fatalf("node-2 holds B (%+v) or started db.service (%d starts) while node-1 renews A", st, c.startsOn("node-2"))
	}
	if st := n1.sup.Status(); st.Role != "leader" {
		t.Fatalf("node-1 is %s for A (want leader)", st.Role)
	}
	if j := n2.logs.String(); !strings.Contains(j, "db.service") || !strings.Contains(j, "lease A") {
		t.Errorf("node-2's journal does not say that db.service is under lease A:\n%s", j)
	}
	if st := n2.sup.Status(); st.Reason != "db.service held under lease A" || st.Holder != "node-1" {
		t.Errorf("node-2's status for B: %+v (want the reason and A's holder)", st)
	}
	return n1, n2
}

// TestReannotatedUnitMovesOnlyOnRelease: node-2 acquires B, and starts
// db.service, only once node-1 released A.
func TestReannotatedUnitMovesOnlyOnRelease(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		n1, n2 := reannotated(t, srv, c)
		n1.sup.Handoff(t.Context())
		time.Sleep(30 * time.Second)
		synctest.Wait()
		if st := n2.sup.Status(); st.Role != "leader" || !slices.Equal(c.runs("db.service"), []string{"node-2"}) {
			t.Fatalf("after node-1 released A, node-2 is %s for B and db.service runs on %v (want leader, node-2)\n%s", st.Role, c.runs("db.service"), n2.logs)
		}
		if st := n1.sup.Status(); st.Holding {
			t.Fatalf("node-1 holds A again: %+v", st)
		}
	})
}

// TestReannotatedUnitMovesOnceTheOtherLeaseAgedOut: node-1 is cut off
// from Redis; it stops db.service by its deadline, and node-2 acquires B
// only once A's record stayed the same for the lease span.
func TestReannotatedUnitMovesOnceTheOtherLeaseAgedOut(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		n1, n2 := reannotated(t, srv, c)
		n1.store.Close()                 // every request of node-1 now fails: cut off
		span := testTiming.SafeMinimum() // the lease span: testTiming derives it
		time.Sleep(span - time.Second)
		synctest.Wait()
		if st := n2.sup.Status(); st.Holding {
			t.Fatalf("node-2 holds B within the lease span of A's last renewal: %+v", st)
		}
		time.Sleep(30 * time.Second)
		synctest.Wait()
		if st := n2.sup.Status(); st.Role != "leader" || !slices.Equal(c.runs("db.service"), []string{"node-2"}) {
			t.Fatalf("after A aged out, node-2 is %s for B and db.service runs on %v (want leader, node-2)\n%s", st.Role, c.runs("db.service"), n2.logs)
		}
	})
}

// A garbage value in a unit key is reported, once, by the holder and by a
// standby of another lease naming the unit; nobody writes over it, the
// holder renews on, and the standby does not acquire.
func TestGarbageUnitKeyIsReportedAndLeftAlone(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		n1 := startNode(t, srv, c, "node-1", "A", "db.service")
		time.Sleep(20 * time.Second)
		synctest.Wait()
		const junk = "not a unit record"
		srv.Command("SET", "unitlease:unit:db.service", junk)
		n2 := startNode(t, srv, c, "node-2", "B", "db.service")
		time.Sleep(30 * time.Second)
		synctest.Wait()
		if got := srv.Command("GET", "unitlease:unit:db.service"); got != junk {
			t.Fatalf("the unit key was written over: %q", got)
		}
		if st := n1.sup.Status(); st.Role != "leader" || c.startsOn("node-2") > 0 || n2.sup.Status().Holding {
			t.Fatalf("node-1 is %s; node-2 started db.service %d times", st.Role, c.startsOn("node-2"))
		}
		for _, n := range []*node{n1, n2} {
			if j := n.logs.String(); strings.Count(j, "UNITLEASE_EVENT=garbage") != 1 || !strings.Contains(j, "unitlease:unit:db.service") {
				t.Errorf("want one garbage entry naming the unit key:\n%s", j)
			}
		}
	})
}

// claimingStore refuses every acquisition: a unit is held under lease A.
type claimingStore struct{ fakeStore }

func (c *claimingStore) ObserveUnits(ctx context.Context, name string, _ []string) (policy.Record, error) {
	return policy.Record{Present: true, Raw: "-A", Holder: "node-1", Version: 3, Other: &policy.OtherLease{Lease: "A", Unit: "db.service"}}, nil
}

func (c *claimingStore) AcquireUnits(_ context.Context, name string, units []string, seen policy.Record) (policy.Record, error) {
	cur := policy.Record{Present: true, Raw: "-A4", Holder: "node-1", Version: 4, Other: &policy.OtherLease{Lease: "A", Unit: "db.service"}}
	return policy.Record{}, &redislease.ClaimedError{Lease: name, Unit: units[0], Key: "unitlease:unit:" + units[0], Current: cur, Seen: "x"}
}

func (c *claimingStore) RenewUnits(ctx context.Context, name string, _ []string, held policy.Record) (policy.Record, error) {
	return c.Renew(ctx, name, held)
}

func (c *claimingStore) ReleaseUnits(ctx context.Context, name string, _ []string, held policy.Record) (policy.Record, error) {
	return c.Release(ctx, name, held)
}

// A refused acquisition is journalled with the unit and the other lease,
// and the standby goes on aging.
func TestClaimedAcquisitionIsJournalled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, err := policy.New(policy.Config{Timing: testTiming, Seed: 7})
		if err != nil {
			t.Fatal(err)
		}
		logs, units := &bytes.Buffer{}, &fakeUnits{}
		store := &claimingStore{fakeStore{t: t, noRelease: true}}
		s := New("B", []string{"db.service"}, "node-2", m, store, units, BootClock(), logging.Text(logs, slog.LevelDebug))
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		s.Start(ctx)
		time.Sleep(20 * time.Second)
		synctest.Wait()
		j := logs.String()
		for _, want := range []string{"db.service: acquiring lease B refused", "held under lease A by node-1 at version 4",
			"UNITLEASE_EVENT=unit_elsewhere", "UNITLEASE_OTHER_LEASE=A", "UNITLEASE_UNIT=db.service"} {
			if !strings.Contains(j, want) {
				t.Errorf("journal lacks %q:\n%s", want, j)
			}
		}
		if running, starts, _ := units.state(); running || starts > 0 || s.Status().Holding {
			t.Fatalf("started after a refused acquisition")
		}
	})
}
