package supervisor

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/unitlease/unitlease/internal/logging"
	"github.com/unitlease/unitlease/policy"
)

// demoSupervisor is lease demo of units on node-a, over store and u,
// with testTiming and seed 7, not started.
func demoSupervisor(t testing.TB, units []string, store Records, u Units, log *slog.Logger) *Supervisor {
	t.Helper()
	m, err := policy.New(policy.Config{Timing: testTiming, Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	return New("demo", units, "node-a", m, store, u, BootClock(), log)
}

// TestLaunchEndsLikeStart: a launched supervisor acquires and runs its
// unit as a started one does; end (called twice, as a removal may) ends
// it, its actions' context with it, and it takes no step after; ending
// the parent ends one that was never ended.
func TestLaunchEndsLikeStart(t *testing.T) {
	launch := func(t *testing.T, store *fakeStore, units *fakeUnits, parent context.Context) (*Supervisor, func()) {
		s := demoSupervisor(t, []string{"demo.service"}, store, units, logging.Text(io.Discard, slog.LevelDebug))
		return s, s.Launch(parent)
	}
	synctest.Test(t, func(t *testing.T) {
		store, units := &fakeStore{t: t, noRelease: true}, &fakeUnits{}
		s, end := launch(t, store, units, context.WithoutCancel(t.Context()))
		time.Sleep(30 * time.Second)
		synctest.Wait()
		if running, starts, _ := units.state(); !running || starts != 1 || !s.Status().Holding {
			t.Fatalf("launched: unit running %t after %d starts, status %+v; want it held and started once", running, starts, s.Status())
		}
		end()
		end()
		select {
		case <-s.Done():
		default:
			t.Fatal("end returned and Done is not closed")
		}
		if s.ctx.Err() == nil {
			t.Fatal("ended, and the actions' context goes on")
		}
		_, version := store.holder()
		time.Sleep(30 * time.Second)
		synctest.Wait()
		if _, v := store.holder(); v != version {
			t.Fatalf("ended at version %d, and the record went on to %d: a step after the end", version, v)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		parent, cancel := context.WithCancel(t.Context())
		s, end := launch(t, &fakeStore{t: t, noRelease: true}, &fakeUnits{}, parent)
		defer end()
		cancel()
		synctest.Wait()
		select {
		case <-s.Done():
		default:
			t.Fatal("the parent ended and Done is not closed")
		}
	})
}

// gatedUnits parks the start of gated until gate closes, and records
// every Start call, whatever its ctx (a systemd that takes a call on an
// ended context, as unitctl's wait for a free slot may).
type gatedUnits struct {
	fakeUnits
	gated  string
	gate   chan struct{}
	called []string
}

func (u *gatedUnits) Start(ctx context.Context, unit string, env Env) error {
	u.mu.Lock()
	u.called = append(u.called, unit)
	u.mu.Unlock()
	if unit == u.gated {
		<-u.gate
	}
	return u.fakeUnits.Start(ctx, unit, env)
}

// TestEndedSupervisorStartsNoMoreOfItsGroup: a supervisor that ends while
// the first unit of its group is starting (a shutdown out of time) does
// not go on to start the next: its start stops at the end, whatever
// the call to systemd would have done with the ended context.
func TestEndedSupervisorStartsNoMoreOfItsGroup(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		u := &gatedUnits{gated: "a.service", gate: make(chan struct{})}
		s := demoSupervisor(t, []string{"a.service", "b.service"}, &fakeStore{t: t, noRelease: true}, u, logging.Text(io.Discard, slog.LevelDebug))
		end := s.Launch(context.WithoutCancel(t.Context()))
		time.Sleep(30 * time.Second)
		synctest.Wait()
		u.mu.Lock()
		called := slices.Clone(u.called)
		u.mu.Unlock()
		if !slices.Equal(called, []string{"a.service"}) {
			t.Fatalf("starts called %v; want a.service's, under way", called)
		}
		end()
		close(u.gate)
		synctest.Wait()
		u.mu.Lock()
		defer u.mu.Unlock()
		if slices.Contains(u.called, "b.service") {
			t.Fatalf("ended while a.service started, and b.service was started after: %v", u.called)
		}
	})
}
