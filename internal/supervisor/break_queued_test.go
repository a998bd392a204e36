package supervisor

// Review tests of the lifetime (daa7902) and of starts queued through
// QueuedUnits (4f1c273): the context contract of the actions' context, its
// hooks around the end, a line that registers on it under a lock of its
// own, the result of a start that waited while the lease was lost and
// taken again, and a lease of several units.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/unitlease/unitlease/internal/logging"
)

// TestBreakQueuedLifetimeErrChangesAfterEnd shows a CONTRACT VIOLATION
// (low severity; the daemon launches on context.WithoutCancel, whose Err
// is always nil, so it is not reached there): context.Context says "after
// Err returns a non-nil error, successive calls to Err return the same
// error". A supervisor launched on a parent with a deadline and ended by
// its end func has an actions' context whose Err is context.Canceled, and
// becomes context.DeadlineExceeded once the parent's deadline passes:
// lifetime.Err reads the parent's Err on every call. Its children keep
// context.Canceled, so the context and its children disagree. Before
// daa7902 the actions ran on context.WithCancel(parent): Canceled for
// good.
//
// Suggested fix: end records the error once (the parent's Err at that
// moment, else context.Canceled) under life.mu or in an atomic, and Err
// returns the recorded value.
// Closed: lifetime.ended records it before done is closed.
func TestBreakQueuedLifetimeErrChangesAfterEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		parent, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		s := demoSupervisor(t, []string{"demo.service"}, &fakeStore{t: t, noRelease: true}, &fakeUnits{}, logging.Text(io.Discard, slog.LevelDebug))
		end := s.Launch(parent)
		ctx := s.ctx
		child, cancelChild := context.WithTimeout(ctx, time.Hour)
		defer cancelChild()
		end()
		first := ctx.Err()
		if !errors.Is(first, context.Canceled) || !errors.Is(child.Err(), context.Canceled) {
			t.Fatalf("ended: ctx %v, child %v; want context.Canceled", first, child.Err())
		}
		time.Sleep(2 * time.Minute) // the parent's deadline passes
		synctest.Wait()
		if again := ctx.Err(); again != first {
			t.Fatalf("the actions' context said %v, then %v once its parent's deadline passed (its child: %v): Err must not change once non-nil", first, again, child.Err())
		}
	})
}

// TestBreakQueuedLifetimeLosesParentCause shows a REGRESSION of the
// context's cause (low severity: nothing in this repository, go-redis or
// godbus reads context.Cause): a supervisor started on a context
// cancelled with a cause ran its actions, before daa7902, on that very
// context (Start) or on a context.WithCancel of it (Launch), and
// context.Cause of the actions' context and of every request's child was
// that cause. The lifetime's Value hides the parent's cancelCtx
// (context.WithoutCancel answers nil for it), so Cause falls back to Err:
// context.Canceled.
//
// Suggested fix: context.Cause cannot be taught a custom Context's cause
// (it looks for the unexported cancelCtx key), so either document that the
// actions' context has no cause, or derive the lifetime's values context
// so that Cause reaches the parent's cancelCtx once the parent ended (e.g.
// Value returns parent.Value for the lookup when l.parent.Err() != nil),
// keeping WithoutCancel only while the parent lives.
// Closed: after an end that the parent's caused, lifetime.Value is the
// parent's own.
func TestBreakQueuedLifetimeLosesParentCause(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		why := errors.New("the daemon was told to stop")
		parent, cancel := context.WithCancelCause(t.Context())
		s := demoSupervisor(t, []string{"demo.service"}, &fakeStore{t: t, noRelease: true}, &fakeUnits{}, logging.Text(io.Discard, slog.LevelDebug))
		s.Start(parent)
		child, cancelChild := context.WithTimeout(s.ctx, time.Hour) // a request's
		defer cancelChild()
		cancel(why)
		<-s.Done()
		synctest.Wait()
		if c := context.Cause(child); c != why {
			t.Errorf("a request's context ended with cause %v, want its supervisor's parent's cause %v", c, why)
		}
		if c := context.Cause(s.ctx); c != why {
			t.Errorf("the actions' context ended with cause %v, want its parent's cause %v", c, why)
		}
	})
}

// TestBreakQueuedLifetimeHooksAroundTheEnd probes the window in
// Supervisor.end between close(done) (under s.mu) and life.end: a hook
// registered there is run by end, one registered after runs at once on a
// goroutine of its own, each exactly once; stop after the end reports
// false. Then, with a launched supervisor, goroutines derive and cancel
// request contexts from the actions' context while it ends: every child
// derived is done once the end returned or at its derivation after it,
// and no hook stays registered. It holds.
func TestBreakQueuedLifetimeHooksAroundTheEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := &lifetime{parent: context.Background(), values: context.Background(), done: make(chan struct{})}
		close(l.done) // end's first half
		var inWindow, after int
		stopWindow := l.AfterFunc(func() { inWindow++ })
		l.end()
		if inWindow != 1 {
			t.Fatalf("a hook registered between close(done) and end ran %d times, want 1", inWindow)
		}
		if stopWindow() {
			t.Fatal("stop of a hook end ran reports it stopped it")
		}
		ranLate := make(chan struct{})
		stopLate := l.AfterFunc(func() { after++; close(ranLate) })
		<-ranLate
		synctest.Wait()
		if after != 1 || stopLate() {
			t.Fatalf("a hook registered after the end ran %d times (want 1); its stop says %t (want false)", after, stopLate())
		}
	})
	synctest.Test(t, func(t *testing.T) {
		s := demoSupervisor(t, []string{"demo.service"}, &fakeStore{t: t, noRelease: true}, &fakeUnits{}, logging.Text(io.Discard, slog.LevelDebug))
		end := s.Launch(context.WithoutCancel(t.Context()))
		ctx := s.ctx
		var mu sync.Mutex
		var kept []context.Context
		var cancels []context.CancelFunc // called only after the check
		defer func() {
			for _, c := range cancels {
				c()
			}
		}()
		start := make(chan struct{})
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Go(func() {
				<-start
				for i := range 200 {
					c, cancel := context.WithTimeout(ctx, time.Hour)
					if (g+i)%3 != 0 {
						cancel()
						continue
					}
					mu.Lock()
					kept = append(kept, c) // left to the end
					cancels = append(cancels, cancel)
					mu.Unlock()
				}
			})
		}
		close(start)
		end()
		wg.Wait()
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		for i, c := range kept {
			if !errors.Is(c.Err(), context.Canceled) {
				t.Fatalf("child %d of %d derived around the end is not done: %v", i, len(kept), c.Err())
			}
		}
		s.life.mu.Lock()
		defer s.life.mu.Unlock()
		if s.life.hooks != nil {
			t.Fatalf("%d hooks registered after the end", len(s.life.hooks))
		}
	})
}

// bqLineUnits is fakeUnits whose StartQueued works as unitctl's line does,
// with the same locking: a turn registers context.AfterFunc on the
// supervisor's lifetime while holding the line's lock, leaves the line
// under it when its ctx ends, and a turn that gets the place stops that
// watch and starts on a goroutine of its own; one place, each start
// taking bqJobTime of the fake clock.
type bqLineUnits struct {
	fakeUnits
	mu     sync.Mutex
	free   int
	q      []*bqLineTurn
	failed int
}

type bqLineTurn struct {
	done func(error)
	stop func() bool
	over bool
}

const bqJobTime = 50 * time.Millisecond

func (u *bqLineUnits) StartQueued(ctx context.Context, unit string, env Env, done func(error)) {
	t := &bqLineTurn{done: done}
	u.mu.Lock()
	t.stop = context.AfterFunc(ctx, func() {
		u.mu.Lock()
		if t.over {
			u.mu.Unlock()
			return
		}
		t.over = true
		u.failed++
		u.mu.Unlock()
		done(ctx.Err())
	})
	u.q = append(u.q, t)
	u.mu.Unlock()
	u.next(ctx, unit, env)
}

func (u *bqLineUnits) next(ctx context.Context, unit string, env Env) {
	u.mu.Lock()
	defer u.mu.Unlock()
	for len(u.q) > 0 {
		t := u.q[0]
		if !t.over {
			if u.free == 0 {
				return
			}
			u.free--
			t.over = true
			go func() {
				t.stop()
				time.Sleep(bqJobTime) // the job, on the bubble's clock
				err := u.fakeUnits.Start(ctx, unit, env)
				u.mu.Lock()
				u.free++
				u.mu.Unlock()
				u.next(ctx, unit, env)
				t.done(err)
			}()
		}
		u.q[0] = nil
		u.q = u.q[1:]
	}
	u.q = nil
}

// TestBreakQueuedLineOnTheLifetimeNoDeadlock probes the locks a queued
// start takes (the line's, the lifetime's through AfterFunc, s.mu in the
// step of its result) with supervisors ended while their starts wait in
// the line, are given their turn, or have just started: 40 supervisors
// share a line of one place; every third is ended at a moment spread over
// the line's run. It holds: nothing deadlocks, every supervisor not ended
// leads with its unit started, every ended one took no step after its
// end, and no supervisor keeps a hook on its lifetime once the line
// drained.
func TestBreakQueuedLineOnTheLifetimeNoDeadlock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const leases = 40
		u := &bqLineUnits{free: 1}
		log := logging.Text(io.Discard, slog.LevelInfo)
		sups := make([]*Supervisor, leases)
		ends := make([]func(), leases)
		for i := range leases {
			s := demoSupervisor(t, []string{fmt.Sprintf("u%d.service", i)}, &fakeStore{t: t, noRelease: true}, u, log)
			s.Lease = fmt.Sprintf("l%d", i)
			sups[i], ends[i] = s, s.Launch(context.WithoutCancel(t.Context()))
		}
		// The leases are acquired and their starts join the line within
		// the lease span and the confirm wait; the line then runs for
		// leases*bqJobTime. End every third while it runs.
		time.Sleep(9 * time.Second)
		var ended []int
		for i := 0; i < leases; i += 3 {
			time.Sleep(3 * bqJobTime / 2)
			ends[i]()
			ended = append(ended, i)
		}
		time.Sleep(10 * time.Second)
		synctest.Wait()
		isEnded := map[int]bool{}
		for _, i := range ended {
			isEnded[i] = true
		}
		for i, s := range sups {
			st := s.Status()
			switch {
			case isEnded[i]:
				select {
				case <-s.Done():
				default:
					t.Errorf("lease %d: ended, but its Done is open", i)
				}
			case st.Role != "leader" || !st.Holding:
				t.Errorf("lease %d, not ended: %s, holding %t", i, st.Role, st.Holding)
			}
			s.life.mu.Lock()
			if n := len(s.life.hooks); n != 0 {
				t.Errorf("lease %d keeps %d hooks on its lifetime after the line drained", i, n)
			}
			s.life.mu.Unlock()
		}
		u.mu.Lock()
		defer u.mu.Unlock()
		if len(u.q) != 0 || u.free != 1 {
			t.Errorf("the line keeps %d turns, %d places free (want 0, 1)", len(u.q), u.free)
		}
		t.Logf("%d starts left the line as their supervisor ended", u.failed)
		for _, i := range ended {
			ends[i]()
		}
		for i, end := range ends {
			if !isEnded[i] {
				end()
			}
		}
	})
}

// bqHeldStarts is fakeUnits whose Start (the goroutine path: not
// QueuedUnits) waits until the test answers it, as a Start waiting for
// its place in unitctl's pool does.
type bqHeldStarts struct {
	fakeUnits
	mu      sync.Mutex
	pending []bqHeldStart
}

type bqHeldStart struct {
	env    Env
	answer chan error
}

func (u *bqHeldStarts) Start(ctx context.Context, unit string, env Env) error {
	g := bqHeldStart{env, make(chan error, 1)}
	u.mu.Lock()
	u.pending = append(u.pending, g)
	u.mu.Unlock()
	select {
	case err := <-g.answer:
		if err == nil {
			return u.fakeUnits.Start(ctx, unit, env)
		}
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (u *bqHeldStarts) waiting() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.pending)
}

// next answers the oldest start waiting with err.
func (u *bqHeldStarts) next(err error) Env {
	u.mu.Lock()
	g := u.pending[0]
	u.pending = u.pending[1:]
	u.mu.Unlock()
	g.answer <- err
	return g.env
}

// TestBreakQueuedStaleStartResultTakenByNextTenure shows a POLICY BUG
// that the line makes no better and no worse (the "goroutine path"
// subtest fails the same way): a start's result carries nothing of the
// tenure it was issued in, and the machine takes any UnitStartFailed
// while a StartUnit is outstanding (m.job == StartUnit) as that start's.
//
// Here tenure 1's start waits its turn; the lease is lost (renew lost:
// stop, back off), the node acquires it again (tenure 2, a larger token)
// and queues tenure 2's start behind tenure 1's. Tenure 1's start then
// fails, as it does in the daemon when its turn comes while the node is
// not starting it (the guard refuses it): the machine takes that as
// tenure 2's start failing, journals unit_failed (counted against the
// node by the daemon's failure threshold), stops and releases a lease
// whose own start is still waiting and would have succeeded.
//
// With a line, a start waiting long enough for a lease to be lost and
// taken again is the daemon's startup with thousands of leases (two at a
// time, about 47 ms each). Suggested fix: give start results the token of
// the StartUnit they answer (Env.Token is at hand in startQueued's done
// and in execute) and have the machine drop a result whose token is not
// the current tenure's; or cancel a waiting start (a ctx of its own,
// derived from the lifetime) when the machine stops, which also takes it
// out of the line.
// Closed: a start's result carries the StartUnit's token (policy.Event.Token)
// and the machine drops one of another tenure (policy's
// TestAnotherTenuresStartResultIsDropped).
func TestBreakQueuedStaleStartResultTakenByNextTenure(t *testing.T) {
	type waiter struct {
		waiting func() int
		next    func(error) Env
	}
	scenario := func(t *testing.T, u Units, w waiter) {
		logs := &syncBuffer{}
		store := &fakeStore{t: t}
		s := demoSupervisor(t, []string{"demo.service"}, store, u, logging.Text(logs, slog.LevelDebug))
		defer s.Launch(context.WithoutCancel(t.Context()))()
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if w.waiting() != 1 || s.Status().Role != "starting" {
			t.Fatalf("tenure 1: %d starts waiting, role %s; want 1, starting", w.waiting(), s.Status().Role)
		}
		store.steal() // a partition: another node took the lease; it never renews
		for range 120 {
			time.Sleep(time.Second)
			synctest.Wait()
			if w.waiting() == 2 {
				break
			}
		}
		st := s.Status()
		if w.waiting() != 2 || st.Role != "starting" || !st.Holding {
			t.Fatalf("tenure 2 not reached: %d starts waiting, %+v\n%s", w.waiting(), st, logs)
		}
		before := strings.Count(logs.String(), "UNITLEASE_EVENT=unit_failed")
		stale := w.next(errors.New("start refused: this node is standby for lease demo")) // tenure 1's, the guard's answer
		synctest.Wait()
		st = s.Status()
		if st.Role != "starting" || !st.Holding || strings.Count(logs.String(), "UNITLEASE_EVENT=unit_failed") != before {
			t.Fatalf("the result of tenure 1's start (token %d) was taken as tenure 2's: now %s, holding %t, unit_failed journalled %d more times\n%s",
				stale.Token, st.Role, st.Holding, strings.Count(logs.String(), "UNITLEASE_EVENT=unit_failed")-before, logs)
		}
	}
	t.Run("queued", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			u := newQueuedUnits()
			close(u.gate)
			scenario(t, u, waiter{u.waiting, func(err error) Env { return u.next(err).env }})
		})
	})
	t.Run("goroutine path", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			u := &bqHeldStarts{}
			scenario(t, u, waiter{u.waiting, u.next})
		})
	})
}

// TestBreakQueuedSeveralUnitsNotQueued probes a lease of two units over
// QueuedUnits: it must not go through StartQueued (which starts one unit)
// but start both, in systemd's order, on a goroutine, and lead. It holds.
func TestBreakQueuedSeveralUnitsNotQueued(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		u := newQueuedUnits()
		close(u.gate) // blocking Starts go through
		s := demoSupervisor(t, []string{"a.service", "b.service"}, &fakeStore{t: t, noRelease: true}, u, logging.Text(io.Discard, slog.LevelDebug))
		defer s.Launch(context.WithoutCancel(t.Context()))()
		time.Sleep(15 * time.Second)
		synctest.Wait()
		_, starts, _ := u.state()
		u.mu.Lock()
		calls := u.calls
		u.mu.Unlock()
		if st := s.Status(); calls != 0 || starts != 2 || st.Role != "leader" {
			t.Fatalf("a lease of two units: %d StartQueued calls, %d starts, %s; want 0, 2, leader", calls, starts, st.Role)
		}
	})
}
