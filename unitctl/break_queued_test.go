package unitctl

// Review tests of StartQueued and its line (turns.go, 4f1c273): lost
// wake-ups, turns run twice or never, places leaked or given back twice,
// starts whose ctx ends at their turn, a Systemd closed while starts wait,
// what the line keeps once it drained, and the order in which the line and
// Starts waiting on the pool itself (takeSlot) get the places given back.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
	"weak"

	"github.com/godbus/dbus/v5"
)

// bqWaitingStart is a Start that waits on its own goroutine, as
// starting.run does: since the fix, it joins the line (line.take); before
// it, it waited on the pool itself (takeSlot for two holders, and the line
// told when the place came back). Once it has its place it sends it on
// got, named, and keeps it until the test gives it back.
func bqWaitingStart(l *line, name string, got chan<- bqHeldBy) {
	sl, err := l.take(context.Background())
	if err != nil {
		panic(err)
	}
	got <- bqHeldBy{name, sl}
}

type bqHeldBy struct {
	name string
	sl   *slot
}

// TestBreakQueuedLineOvertakenByLaterStarts shows a FAIRNESS/LIVENESS
// REGRESSION (not a safety bug): a start in the line never gets a place
// given back while any Start waits on the pool itself (takeSlot), however
// much later that Start began to wait. A place is given back by a receive
// from the full pool, and a receive from a full channel with a blocked
// sender hands the place to that sender at once (the runtime moves the
// sender's value into the buffer): the pool is full again before
// slot.freed calls line.next, which then finds no place. So the line's
// first does not "compete with" waiting Starts, as turns.go says: it
// loses every time.
//
// Before 4f1c273 every start waited as a goroutine in takeSlot, and the
// channel's waiting senders are served first come, first served: the
// "goroutine path" subtest shows the first to wait gets the first place.
// The daemon's Starts on the pool are the starts of leases of several
// units and every start-limit-hit retry: while they keep coming, the
// leases of one unit (most leases) starve, in Starting, renewing.
//
// Suggested fix: make every start go through the line (Start joins it
// and waits on a channel its turn closes, instead of takeSlot), so that
// the pool has one way in and the line's order is the order.
// Closed: starting.run takes its place with line.take, and both subtests
// pass.
func TestBreakQueuedLineOvertakenByLaterStarts(t *testing.T) {
	const rounds = 12
	run := func(t *testing.T, queued bool) (order []string) {
		synctest.Test(t, func(t *testing.T) {
			pool := make(chan struct{}, 2)
			l := &line{pool: pool, holders: 2}
			got := make(chan bqHeldBy, rounds+4)
			// Both places held by starts under way.
			go bqWaitingStart(l, "h0", got)
			go bqWaitingStart(l, "h1", got)
			held := []bqHeldBy{<-got, <-got}
			// The start under test begins to wait first.
			if queued {
				l.wait(context.Background(), func(sl *slot) { got <- bqHeldBy{"Q", sl} }, func(err error) { t.Errorf("Q failed: %v", err) })
			} else {
				go bqWaitingStart(l, "Q", got)
			}
			synctest.Wait()
			// Then, round by round, another Start begins to wait on the
			// pool, and the oldest place held is given back.
			for i := range rounds {
				go bqWaitingStart(l, fmt.Sprintf("s%d", i), got)
				synctest.Wait() // it waits, after Q
				giveBack(held[0].sl)
				held = held[1:]
				synctest.Wait()
				h := <-got
				order = append(order, h.name)
				held = append(held, h)
				if h.name == "Q" {
					break
				}
			}
			for _, h := range held {
				giveBack(h.sl)
			}
			synctest.Wait()
			for len(got) > 0 {
				giveBack((<-got).sl)
				synctest.Wait()
			}
			if len(pool) != 0 {
				t.Errorf("%d places held at the end", len(pool))
			}
		})
		return order
	}
	t.Run("goroutine path", func(t *testing.T) {
		if order := run(t, false); len(order) == 0 || order[0] != "Q" {
			t.Fatalf("the places went to %v; want Q, the first to wait, first (the channel's waiters are served in order)", order)
		}
	})
	t.Run("queued", func(t *testing.T) {
		order := run(t, true)
		if len(order) == 0 || order[0] != "Q" {
			t.Fatalf("the start in the line joined before any of %v began to wait, and %d places given back all went to them: %v (the line never gets a place while a Start waits on the pool)",
				order, len(order), order)
		}
	})
}

// TestBreakQueuedEndedCtxNeverReachesSystemd probes a StartQueued whose
// ctx ended before it was called, with the pool free: wait registers
// the ctx's AfterFunc (which runs leave on a goroutine of its own) and
// then calls next, so the turn gets the place and runs, on an ended ctx,
// rather than failing (2,000 times of 2,000 in a probe of the line). It holds: the start makes no StartUnit
// call (detached looks at ctx first), done is called exactly once with a
// *JobError wrapping context.Canceled, and both holds of the place come
// back.
func TestBreakQueuedEndedCtxNeverReachesSystemd(t *testing.T) {
	f := newFakeSystemd(t)
	s := dialFake(t, nil)
	const n = 40
	var calls [n]atomic.Int32
	errs := make(chan error, 2*n)
	for i := range n {
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		s.StartQueued(ctx, fmt.Sprintf("e%d.service", i), func(err error) {
			calls[i].Add(1)
			errs <- err
		})
	}
	for range n {
		err := <-errs
		var je *JobError
		if !errors.As(err, &je) || !errors.Is(err, context.Canceled) {
			t.Errorf("a start whose ctx had ended reported %v, want a *JobError wrapping context.Canceled", err)
		}
	}
	if !poolsEmpty(s, 5*time.Second) {
		t.Fatalf("%d start places held after every start on an ended ctx returned", len(s.startCalls))
	}
	for i := range n {
		if c := calls[i].Load(); c != 1 {
			t.Errorf("start %d: done called %d times, want 1", i, c)
		}
	}
	if c := f.startCalls.Load(); c != 0 {
		t.Errorf("%d StartUnit calls for starts whose ctx had ended, want none", c)
	}
}

// TestBreakQueuedMixedWithStartsAndLimitRetries probes the line with
// everything that takes or gives back a start place at once, under
// -race: StartQueued and Start (the goroutine path) of many units,
// some of which hit their start limit at their first job (the retry
// takes a second place through takeSlot, competing with the line), and
// ctxs that end at random moments (waiting in the line, in the call,
// waiting for the job). It holds: every start reports exactly once (no
// turn lost, run twice, or both run and failed), never more than
// maxStarts StartUnit calls are in systemd at once, every start whose ctx
// did not end started, each start-limit-hit unit was reset and started
// once more, and no place stays held.
func TestBreakQueuedMixedWithStartsAndLimitRetries(t *testing.T) {
	f := newFakeSystemd(t)
	x := withExtras(t, f)
	s := dialFake(t, nil)
	const (
		queued  = 60
		direct  = 20
		limited = 6 // of the queued, the first few hit their start limit once
	)
	var limitHit sync.Map // unit -> *atomic.Int32: StartUnit calls
	results := make([]atomic.Value, queued)
	for i := range limited {
		r := &results[i]
		r.Store("start-limit-hit")
		serviceResultOf(t, f, fmt.Sprintf("q%d.service", i), r)
		limitHit.Store(fmt.Sprintf("q%d.service", i), &atomic.Int32{})
	}
	f.onStart(func(name string) (uint32, *dbus.Error) {
		runtime.Gosched()
		if c, ok := limitHit.Load(name); ok {
			if c.(*atomic.Int32).Add(1) == 1 {
				return f.finish(name, "failed", "failed"), nil
			}
			var i int
			fmt.Sscanf(name, "q%d.service", &i)
			results[i].Store("success")
		}
		return f.finish(name, "active", "done"), nil
	})
	type outcome struct {
		unit      string
		cancelled bool
		err       error
	}
	var calls sync.Map // unit -> *atomic.Int32: done calls
	out := make(chan outcome, queued+direct)
	var wg sync.WaitGroup
	for i := range queued + direct {
		unit := fmt.Sprintf("q%d.service", i)
		if i >= queued {
			unit = fmt.Sprintf("d%d.service", i)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		cancelled := i >= limited && rand.IntN(4) == 0
		c := &atomic.Int32{}
		calls.Store(unit, c)
		report := func(err error) {
			c.Add(1)
			out <- outcome{unit, cancelled, err}
		}
		if i < queued {
			s.StartQueued(ctx, unit, report)
		} else {
			wg.Go(func() { report(s.Start(ctx, unit)) })
		}
		if cancelled {
			go func() {
				for range rand.IntN(50) {
					runtime.Gosched()
				}
				cancel()
			}()
		} else {
			defer cancel()
		}
	}
	for range queued + direct {
		o := <-out
		if o.err != nil && !o.cancelled {
			t.Errorf("%s: %v (its ctx did not end)", o.unit, o.err)
		}
		if o.err != nil && o.cancelled && !errors.Is(o.err, context.Canceled) {
			t.Errorf("%s, whose ctx was cancelled: %v", o.unit, o.err)
		}
	}
	wg.Wait()
	calls.Range(func(k, v any) bool {
		if c := v.(*atomic.Int32).Load(); c != 1 {
			t.Errorf("%s: done called %d times, want 1", k, c)
		}
		return true
	})
	limitHit.Range(func(k, v any) bool {
		if c := v.(*atomic.Int32).Load(); c != 2 {
			t.Errorf("%s hit its start limit: %d StartUnit calls, want 2", k, c)
		}
		return true
	})
	if r := x.resets.Load(); r != limited {
		t.Errorf("%d ResetFailedUnit calls, want %d", r, limited)
	}
	if m := f.maxStartsIn.Load(); m > maxStarts {
		t.Errorf("%d StartUnit calls in systemd at once, want at most %d", m, maxStarts)
	}
	if !poolsEmpty(s, 5*time.Second) {
		t.Errorf("%d start places held after every start reported", len(s.startCalls))
	}
	if n := func() int { s.starts.mu.Lock(); defer s.starts.mu.Unlock(); return len(s.starts.q) }(); n != 0 {
		t.Errorf("%d turns left in the line after every start reported", n)
	}
}

// TestBreakQueuedCloseWhileStartsWait probes a Systemd closed (the
// daemon's last act) while two starts hold both places, their StartUnit
// calls unanswered, and more wait in the line on ctxs that never end. It
// holds: every start reports, with an error, and no StartUnit call is
// made after Close (the turns that follow run on a closed Systemd, whose
// calls fail at once with ErrClosed).
func TestBreakQueuedCloseWhileStartsWait(t *testing.T) {
	f := newFakeSystemd(t)
	s := dialFake(t, nil)
	gate := make(chan struct{})
	t.Cleanup(func() { close(gate) })
	f.onStart(func(name string) (uint32, *dbus.Error) {
		<-gate
		return f.finish(name, "active", "done"), nil
	})
	const n = 8
	errs := make(chan error, n)
	for i := range n {
		s.StartQueued(context.Background(), fmt.Sprintf("c%d.service", i), func(err error) { errs <- err })
	}
	if !until(10*time.Second, func() bool { return f.startsIn.Load() == maxStarts }) {
		t.Fatalf("%d StartUnit calls waiting, want %d", f.startsIn.Load(), maxStarts)
	}
	s.Close()
	timeout := time.After(30 * time.Second) // a hang detector only: each start reports at once
	for i := range n {
		select {
		case err := <-errs:
			if err == nil {
				t.Errorf("a start reported success on a closed Systemd")
			}
		case <-timeout:
			t.Fatalf("%d of %d starts never reported after Close (waiting in the line for a place no one gives back)", n-i, n)
		}
	}
	if c := f.startCalls.Load(); c != maxStarts {
		t.Errorf("%d StartUnit calls, want only the %d made before Close", c, maxStarts)
	}
}

// TestBreakQueuedLineLetsGoOfEndedTurns probes what the line keeps: turns
// whose ctx ended while the pool stayed full stay in the line, marked
// done, until a place is given back (turns.go says so); the first place
// given back must drop them all, and with them everything their run and
// fail closures hold (the daemon's: the supervisor). It holds once a
// place comes back; until then, the ended turns are kept (logged).
func TestBreakQueuedLineLetsGoOfEndedTurns(t *testing.T) {
	pool := make(chan struct{}, 1)
	l := &line{pool: pool, holders: 2}
	pool <- struct{}{} // a start under way holds the only place
	const n = 200
	ptrs := make([]weak.Pointer[[4096]byte], n)
	var failed sync.WaitGroup
	failed.Add(n)
	for i := range n {
		p := new([4096]byte)
		ptrs[i] = weak.Make(p)
		ctx, cancel := context.WithCancel(context.Background())
		l.wait(ctx, func(sl *slot) { _ = p; t.Error("an ended turn ran") }, func(error) { _ = p; failed.Done() })
		cancel()
	}
	failed.Wait()
	alive := func() int {
		runtime.GC()
		runtime.GC()
		k := 0
		for _, w := range ptrs {
			if w.Value() != nil {
				k++
			}
		}
		return k
	}
	l.mu.Lock()
	kept := len(l.q)
	l.mu.Unlock()
	t.Logf("while the pool stays full: %d ended turns kept in the line, %d payloads reachable", kept, alive())
	<-pool
	l.next() // the start under way gives its place back
	l.mu.Lock()
	q, c := l.q, cap(l.q)
	l.mu.Unlock()
	if q != nil {
		t.Fatalf("the line drained of ended turns keeps a slice of %d (cap %d)", len(q), c)
	}
	if k := alive(); k != 0 {
		t.Fatalf("%d of %d closures of ended turns still reachable after the line drained", k, n)
	}
	if len(pool) != 0 {
		t.Fatalf("%d places taken by ended turns", len(pool))
	}
}
