package supervisor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/unitlease/unitlease/internal/logging"
	"github.com/unitlease/unitlease/policy"
)

// queuedUnits is fakeUnits whose starts wait in a line until the test
// lets them through (next); a blocking Start parks until it is let
// through too, so that a supervisor that did not queue its start parks
// a goroutine for it.
type queuedUnits struct {
	fakeUnits
	mu    sync.Mutex
	line  []queued
	gate  chan struct{} // closed: blocking Starts go through
	calls int           // StartQueued calls
}

type queued struct {
	ctx  context.Context
	unit string
	env  Env
	done func(error)
}

func newQueuedUnits() *queuedUnits { return &queuedUnits{gate: make(chan struct{})} }

func (u *queuedUnits) StartQueued(ctx context.Context, unit string, env Env, done func(error)) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.calls++
	u.line = append(u.line, queued{ctx, unit, env, done})
}

func (u *queuedUnits) Start(ctx context.Context, unit string, env Env) error {
	<-u.gate
	return u.fakeUnits.Start(ctx, unit, env)
}

// next lets the first start in the line through with err (nil: the unit
// runs), on a goroutine of its own as unitctl does; it reports the start.
func (u *queuedUnits) next(err error) queued {
	u.mu.Lock()
	q := u.line[0]
	u.line = u.line[1:]
	u.mu.Unlock()
	if err == nil {
		_ = u.fakeUnits.Start(q.ctx, q.unit, q.env)
	}
	go q.done(err)
	return q
}

func (u *queuedUnits) waiting() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.line)
}

// TestQueuedStartsParkNoGoroutine: 300 supervisors of one unit each,
// whose starts wait their turn, hold no goroutine for their starts
// while they wait: fewer goroutines than a tenth of the leases more
// than before they were launched. Once let through, every unit runs and
// every lease is held with the token its acquisition wrote.
func TestQueuedStartsParkNoGoroutine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const leases = 300
		u := newQueuedUnits()
		log := logging.Text(io.Discard, slog.LevelInfo)
		base := runtime.NumGoroutine()
		sups := make([]*Supervisor, leases)
		for i := range leases {
			m := demoSupervisor(t, []string{fmt.Sprintf("u%d.service", i)}, &fakeStore{t: t, noRelease: true}, u, log)
			m.Lease = fmt.Sprintf("l%d", i)
			sups[i] = m
			defer m.Launch(context.WithoutCancel(t.Context()))()
		}
		time.Sleep(10 * time.Second) // the lease span and the confirm wait of testTiming
		synctest.Wait()
		if extra := runtime.NumGoroutine() - base; extra >= leases/10 {
			t.Fatalf("%d goroutines more than before the %d leases, their starts waiting in the line", extra, leases)
		}
		if n := u.waiting(); n != leases {
			t.Fatalf("%d starts in the line, want %d", n, leases)
		}
		for range leases {
			q := u.next(nil)
			if q.env.Token == 0 || q.env.Lease == "" {
				t.Fatalf("a start without its tenure: %+v", q.env)
			}
		}
		synctest.Wait()
		for _, s := range sups {
			if st := s.Status(); st.Role != "leader" || !st.Holding {
				t.Fatalf("lease %s after its start: %+v", s.Lease, st)
			}
		}
	})
}

// TestQueuedStartFailedOrLate: a queued start that fails is journalled
// start_failed and the lease is stopped and released; a queued start
// that succeeds after the lease was lost meanwhile (its stop already
// done) is not taken as the unit running: the lease stays lost.
func TestQueuedStartFailedOrLate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		u := newQueuedUnits()
		logs := &syncBuffer{}
		store := &fakeStore{t: t}
		s := demoSupervisor(t, []string{"demo.service"}, store, u, logging.Text(logs, slog.LevelDebug))
		defer s.Launch(context.WithoutCancel(t.Context()))()
		time.Sleep(10 * time.Second)
		synctest.Wait()
		u.next(errors.New("the job failed"))
		time.Sleep(time.Second)
		synctest.Wait()
		if !strings.Contains(logs.String(), "UNITLEASE_EVENT=start_failed") {
			t.Fatalf("a failed queued start is not journalled start_failed:\n%s", logs)
		}
		if st := s.Status(); st.Holding {
			t.Fatalf("still holding after the start failed: %+v", st)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		u := newQueuedUnits()
		store := &fakeStore{t: t, noRelease: true}
		s := demoSupervisor(t, []string{"demo.service"}, store, u, logging.Text(io.Discard, slog.LevelDebug))
		defer s.Launch(context.WithoutCancel(t.Context()))()
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if u.waiting() != 1 {
			t.Fatalf("%d starts waiting, want 1", u.waiting())
		}
		_, _, stops := u.state()
		store.steal()
		time.Sleep(1500 * time.Millisecond) // the next renewal finds it lost: the stop
		synctest.Wait()
		if _, _, after := u.state(); after != stops+1 {
			t.Fatalf("%d stops after the lease was lost, want %d", after, stops+1)
		}
		u.next(nil) // the start that waited goes through after all
		synctest.Wait()
		if st := s.Status(); st.Holding || st.Role == "leader" {
			t.Fatalf("the late start's success made the lost lease %+v", st)
		}
	})
}

// TestQueuedStartOfAnEndedSupervisorIsDropped: the supervisor ends while
// its start waits; when the start's result comes it takes no step.
func TestQueuedStartOfAnEndedSupervisorIsDropped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		u := newQueuedUnits()
		s := demoSupervisor(t, []string{"demo.service"}, &fakeStore{t: t, noRelease: true}, u, logging.Text(io.Discard, slog.LevelDebug))
		end := s.Launch(context.WithoutCancel(t.Context()))
		time.Sleep(10 * time.Second)
		synctest.Wait()
		before := s.Status()
		end()
		q := u.next(nil)
		if q.ctx.Err() == nil {
			t.Fatal("the supervisor ended and its queued start's ctx goes on")
		}
		synctest.Wait()
		if after := s.Status(); after.At != before.At || after.Role != before.Role {
			t.Fatalf("a step after the end: %+v, then %+v", before, after)
		}
	})
}

// TestReleaseLostCarriesWhatTheKeyHolds: a release refused because the
// key holds another record tells the policy what it holds, so that this
// node's own later record (a renewal whose reply was lost) is released
// again rather than left behind.
func TestReleaseLostCarriesWhatTheKeyHolds(t *testing.T) {
	store := &fakeStore{t: t}
	store.mu.Lock()
	held := store.write(policy.Record{Holder: "node-a", Version: 2, Token: strings.Repeat("a", 32)})
	later := held
	later.Version = 3
	later = store.write(later)
	store.mu.Unlock()
	s := demoSupervisor(t, []string{"demo.service"}, store, &fakeUnits{}, logging.Text(io.Discard, slog.LevelDebug))
	ev := s.release(t.Context(), held)
	if ev.Kind != policy.ReleaseLost || !ev.Record.Same(later) || !ev.Record.Extends(held) {
		t.Fatalf("release of version 2 over this node's version 3: %v, want release_lost carrying version 3", ev)
	}
}
