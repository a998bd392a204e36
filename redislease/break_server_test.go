package redislease

import (
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/unitlease/unitlease/internal/redistest"
	"github.com/unitlease/unitlease/policy"
)

// Attacks on rule 8 against a real redis-server: one node's
// policy.Machine driven by its own Store, at injected instants. Probes
// here pass; what gets through is in break_server_open_test.go.

// standby is one node's machine and store; started records StartUnit.
type standby struct {
	t       *testing.T
	m       policy.Machine
	st      *Store
	now     policy.Instant
	started bool
	acts    []policy.Action
}

func newStandby(t *testing.T, st *Store) *standby {
	t.Helper()
	m, err := policy.New(policy.Config{Timing: policy.DefaultTiming(), Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	s := &standby{t: t, m: m, st: st}
	s.step(policy.Event{Kind: policy.Tick})
	return s
}

// step runs e at s.now and carries out every action the step asks for,
// each answered at once by the store (or, for unit jobs, done).
func (s *standby) step(e policy.Event) {
	s.t.Helper()
	queue := []policy.Event{e}
	for len(queue) > 0 && len(s.acts) < 100 {
		var out policy.Output
		s.m, out = s.m.Step(s.now, queue[0])
		queue = queue[1:]
		for a := range out.Actions() {
			s.acts = append(s.acts, a)
			queue = append(queue, s.carry(a))
		}
	}
}

func (s *standby) carry(a policy.Action) policy.Event {
	s.t.Helper()
	switch a.Kind {
	case policy.StopUnit:
		return policy.Event{Kind: policy.UnitStopped}
	case policy.StartUnit:
		s.started = true
		return policy.Event{Kind: policy.UnitStarted}
	case policy.Observe:
		r, err := s.st.Observe(bg, "vpn")
		if err != nil {
			s.t.Logf("observe: %v", err)
			return policy.Event{Kind: policy.ObserveFailed}
		}
		return policy.Event{Kind: policy.Observed, Record: r}
	case policy.Acquire:
		r, err := s.st.Acquire(bg, "vpn", a.Record)
		var c *ConflictError
		switch {
		case err == nil:
			return policy.Event{Kind: policy.AcquireOK, Record: r}
		case errors.As(err, &c):
			return policy.Event{Kind: policy.AcquireLost}
		}
		return policy.Event{Kind: policy.AcquireUnknown}
	case policy.Renew:
		r, err := s.st.Renew(bg, "vpn", a.Record)
		if err != nil {
			return policy.Event{Kind: policy.RenewFailed}
		}
		return policy.Event{Kind: policy.RenewOK, Record: r}
	}
	s.t.Fatalf("unexpected action %v", a)
	return policy.Event{}
}

func (s *standby) acquired() bool {
	for _, a := range s.acts {
		if a.Kind == policy.Acquire {
			return true
		}
	}
	return false
}

// handedOver sets up: node-x held vpn and released it; node-y acquired
// over the release (y runs its unit); node-z, a standby, has read y's
// record. It returns y's record, x's released record, and a func that
// RESTOREs the lease key as it was after the release (DUMP, then RESTORE
// REPLACE into the running server: a live restore, which keeps the
// server's run id and replication id).
func handedOver(t *testing.T, srv *redistest.Server) (y *Store, ly, rel policy.Record, z *standby, restore func()) {
	t.Helper()
	x := newStore(t, srv, "node-x")
	lx := mustAcquire(t, x, "vpn")
	rel, err := x.Release(bg, "vpn", lx)
	if err != nil {
		t.Fatal(err)
	}
	restore = liveRestore(t, srv)
	y = newStore(t, srv, "node-y")
	if ly, err = y.Acquire(bg, "vpn", mustObserve(t, y, "vpn")); err != nil {
		t.Fatal(err)
	}
	z = newStandby(t, newStore(t, srv, "node-z")) // observes y's record at 0
	if r, _, ok := z.m.Seen(); !ok || !r.Same(ly) || z.m.State() != policy.Standby {
		t.Fatalf("z sees %v, %v; want y's record", r, z.m.State())
	}
	return y, ly, rel, z, restore
}

// TestProbeRestartRollbackOfAnAcquisitionIsAged: Redis restarts from an
// AOF that holds x's release but not y's acquisition (a restored backup):
// a new identity. z reads x's released record below the version it saw
// and ages it; y's next renewal is a loss.
func TestProbeRestartRollbackOfAnAcquisitionIsAged(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{AppendOnly: true})
	y, ly, rel, z, _ := handedOver(t, srv)
	srv.Command("SET", "unitlease:lease:vpn", rel.Raw)
	srv.Restart()
	_, _ = z.st.Observe(bg, "vpn") // the first call after the restart may meet the dead connection
	_, _ = y.Observe(bg, "vpn")
	z.now = policy.Instant(time.Second)
	z.step(policy.Event{Kind: policy.Nudge})
	if r, _, _ := z.m.Seen(); !r.Same(rel) || z.acquired() || z.started {
		t.Fatalf("z sees %v and acquired=%v started=%v; want x's release aged", r, z.acquired(), z.started)
	}
	if _, err := y.Renew(bg, "vpn", ly); !errors.As(err, new(*LostError)) {
		t.Fatalf("y's renewal over x's release: %v, want a loss", err)
	}
}

// liveRestore DUMPs the lease key now and returns a func that RESTOREs
// it (REPLACE) into the running server.
func liveRestore(t *testing.T, srv *redistest.Server) func() {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { c.Close() })
	dump, err := c.Dump(bg, "unitlease:lease:vpn").Result()
	if err != nil {
		t.Fatal(err)
	}
	return func() {
		if err := c.RestoreReplace(bg, "unitlease:lease:vpn", 0, dump).Err(); err != nil {
			t.Fatal(err)
		}
	}
}
