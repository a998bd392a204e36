package supervisor

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/unitlease/unitlease/policy"
)

// brkClock is pure fake time inside a synctest bubble: no real
// CLOCK_BOOTTIME offset, so runs with and without steppers are comparable.
func brkClock() Clock { return SuspendClock(func() (Offset, error) { return Offset{}, nil }) }

// brkStore counts the requests that reached the store and calls hook
// (if set) before each Observe and Renew.
type brkStore struct {
	*fakeStore
	hook     func(kind string)
	inFlight atomic.Int32
	overlap  atomic.Bool // two requests of this lease were in flight at once
	calls    atomic.Int32
}

func (b *brkStore) enter(kind string) func() {
	b.calls.Add(1)
	if b.inFlight.Add(1) > 1 {
		b.overlap.Store(true)
	}
	if b.hook != nil {
		b.hook(kind)
	}
	return func() { b.inFlight.Add(-1) }
}

func (b *brkStore) Observe(ctx context.Context, name string) (policy.Record, error) {
	defer b.enter("observe")()
	return b.fakeStore.Observe(ctx, name)
}

func (b *brkStore) Renew(ctx context.Context, name string, held policy.Record) (policy.Record, error) {
	defer b.enter("renew")()
	return b.fakeStore.Renew(ctx, name, held)
}

func (b *brkStore) Acquire(ctx context.Context, name string, seen policy.Record) (policy.Record, error) {
	defer b.enter("acquire")()
	return b.fakeStore.Acquire(ctx, name, seen)
}

func brkSup(t *testing.T, lease string, seed uint64, p *Steppers, st *brkStore) *Supervisor {
	t.Helper()
	m, err := policy.New(policy.Config{Timing: testTiming, Seed: seed})
	if err != nil {
		t.Fatal(err)
	}
	s := New(lease, []string{lease + ".service"}, "node-a", m, st, &fakeUnits{}, brkClock(), slog.New(slog.DiscardHandler))
	if p != nil {
		s.SetSteppers(p)
	}
	return s
}

// brkRun runs n leases for d of fake time; the pool (if max > 0) is
// cancelled at cancelAt (0: never), or from inside the cancelOn-th store
// request (0: never), while other leases' ticks of that instant are being
// handed over. It returns each lease's store version and request count,
// and checks the pool ended with no steppers.
func brkRun(t *testing.T, n, max int, d, cancelAt time.Duration, cancelOn int32) (versions []uint64, calls []int32) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	pctx, stopPool := context.WithCancel(ctx)
	defer stopPool()
	var p *Steppers
	if max > 0 {
		p = NewSteppers(pctx, max)
	}
	var total atomic.Int32
	stores := make([]*brkStore, n)
	sups := make([]*Supervisor, n)
	for i := range n {
		st := &brkStore{fakeStore: &fakeStore{t: t}}
		st.hook = func(string) {
			if cancelOn > 0 && total.Add(1) == cancelOn {
				stopPool()
			}
		}
		stores[i] = st
		sups[i] = brkSup(t, fmt.Sprintf("l%d", i), uint64(i%3+1), p, st)
	}
	if cancelAt > 0 {
		time.AfterFunc(cancelAt, stopPool)
	}
	for _, s := range sups {
		s.Start(ctx)
	}
	time.Sleep(d)
	synctest.Wait()
	for i, st := range stores {
		if st.overlap.Load() {
			t.Errorf("lease %d: two store requests in flight at once", i)
		}
		_, v := st.holder()
		versions = append(versions, v)
		calls = append(calls, st.calls.Load())
	}
	cancel()
	synctest.Wait()
	if p != nil {
		stopPool()
		synctest.Wait()
		if l := p.Len(); l != 0 {
			t.Errorf("%d steppers left after the pool's context ended", l)
		}
	}
	return versions, calls
}

// Ending the pool while ticks are being handed over (at the instant a
// tick fires, or from inside another lease's step at the same instant)
// loses no tick and delays none: every lease renews exactly as often,
// and makes exactly as many requests, as with no steppers at all.
func TestBreakSteppersPoolEndLosesNoTick(t *testing.T) {
	const n, d = 24, 20 * time.Second
	var base []uint64
	var baseCalls []int32
	synctest.Test(t, func(t *testing.T) { base, baseCalls = brkRun(t, n, 0, d, 0, 0) })
	for _, v := range base {
		if v < 10 {
			t.Fatalf("baseline renewed too little: %v", base)
		}
	}
	cases := []struct {
		name     string
		max      int
		cancelAt time.Duration
		cancelOn int32
	}{
		{"never", 4, 0, 0},
		{"bound1", 1, 0, 0},
		{"bound256", 256, 0, 0},
		{"at5s", 4, 5 * time.Second, 0},
		{"at10s", 2, 10 * time.Second, 0},
		{"at0", 3, time.Nanosecond, 0},
	}
	for _, k := range []int32{1, 7, 30, 61, 100, 150} {
		cases = append(cases, struct {
			name     string
			max      int
			cancelAt time.Duration
			cancelOn int32
		}{fmt.Sprintf("inRequest%d", k), 3, 0, k})
	}
	for _, c := range cases {
		for round := range 5 {
			t.Run(fmt.Sprintf("%s/%d", c.name, round), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					got, calls := brkRun(t, n, c.max, d, c.cancelAt, c.cancelOn)
					for i := range got {
						if got[i] != base[i] || calls[i] != baseCalls[i] {
							t.Errorf("lease %d: version %d after %d requests, want %d after %d (as without steppers)", i, got[i], calls[i], base[i], baseCalls[i])
						}
					}
				})
			})
		}
	}
}

// brkFresh is a supervisor marked started whose timer does nothing, so a
// test brings its ticks itself: its first tick steps (its wake is 0),
// and that step observes once.
func brkFresh(t *testing.T, ctx context.Context, lease string, p *Steppers, observed *atomic.Int32) *Supervisor {
	t.Helper()
	st := &brkStore{fakeStore: &fakeStore{t: t}, hook: func(kind string) {
		if kind == "observe" {
			observed.Add(1)
		}
	}}
	s := brkSup(t, lease, 1, p, st)
	s.mu.Lock()
	s.ctx, s.started = ctx, true
	s.timer = time.AfterFunc(time.Hour, func() {})
	s.timer.Stop()
	s.mu.Unlock()
	return s
}

// A tick handed to a parked stepper at the very moment the pool's context
// ends is stepped, not dropped: take() reports true only if a stepper
// received it, and a stepper steps what it received before it looks at
// its context.
func TestBreakSteppersHandoverRacingPoolEnd(t *testing.T) {
	for round := range 300 {
		synctest.Test(t, func(t *testing.T) {
			ctx := t.Context()
			pctx, stopPool := context.WithCancel(ctx)
			p := NewSteppers(pctx, 2)
			var warm, raced atomic.Int32
			w := brkFresh(t, ctx, "warm", p, &warm)
			w.tick()
			synctest.Wait() // one stepper, parked
			if warm.Load() != 1 || p.Len() != 1 {
				t.Fatalf("warm-up: %d observations, %d steppers", warm.Load(), p.Len())
			}
			s := brkFresh(t, ctx, "raced", p, &raced)
			var start sync.WaitGroup
			start.Add(2)
			go func() { start.Done(); start.Wait(); stopPool() }()
			go func() { start.Done(); start.Wait(); s.tick() }()
			synctest.Wait()
			if got := raced.Load(); got != 1 {
				t.Fatalf("round %d: the raced tick observed %d times, want 1", round, got)
			}
			if l := p.Len(); l != 0 {
				t.Fatalf("round %d: %d steppers after the pool ended", round, l)
			}
		})
	}
}

// A supervisor whose context ends while a stepper is inside its step's
// request: Done closes without waiting for the request, the stepper comes
// back to the pool once the request returns (it is not leaked or
// counted twice), and it then steps other leases' ticks.
func TestBreakSteppersSupervisorEndsWhileHeld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		p := NewSteppers(ctx, 4)
		gate, entered := make(chan struct{}), make(chan struct{})
		var once atomic.Bool
		hst := &brkStore{fakeStore: &fakeStore{t: t}, hook: func(string) {
			if once.CompareAndSwap(false, true) {
				close(entered)
				<-gate
			}
		}}
		hung := brkSup(t, "hung", 1, p, hst)
		hctx, hcancel := context.WithCancel(ctx)
		hung.Start(hctx)
		<-entered
		hcancel()
		synctest.Wait()
		select {
		case <-hung.Done():
		default:
			t.Fatal("Done not closed while a stepper holds the ended supervisor's request")
		}
		close(gate)
		synctest.Wait()
		if l := p.Len(); l != 1 {
			t.Fatalf("%d steppers after the ended supervisor's request returned, want 1", l)
		}
		before := hst.calls.Load()
		var offStepper atomic.Int32
		fst := &brkStore{fakeStore: &fakeStore{t: t}, hook: func(string) {
			if !onStepper() {
				offStepper.Add(1)
			}
		}}
		free := brkSup(t, "free", 1, p, fst)
		free.Start(ctx)
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if fst.calls.Load() < 10 || offStepper.Load() != 0 {
			t.Errorf("free lease: %d requests, %d off the steppers", fst.calls.Load(), offStepper.Load())
		}
		if l := p.Len(); l != 1 {
			t.Errorf("%d steppers, want the one that came back", l)
		}
		if hst.calls.Load() != before {
			t.Errorf("the ended supervisor made %d more requests", hst.calls.Load()-before)
		}
	})
}

// With every stepper the bound allows hung in a store request, the other
// leases keep stepping on their timers' goroutines, on time: at no
// instant is any lease Busy, Overdue or Stuck in the watchdog's eyes, and
// the pool never exceeds its bound.
func TestBreakSteppersAllHungWatchdogSeesNothingLate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		const max = 2
		p := NewSteppers(ctx, max)
		gate := make(chan struct{})
		var hungCount atomic.Int32
		var sups []*Supervisor
		var stores []*brkStore
		for i := range max {
			var once atomic.Bool
			st := &brkStore{fakeStore: &fakeStore{t: t}, hook: func(string) {
				if once.CompareAndSwap(false, true) {
					hungCount.Add(1)
					<-gate
				}
			}}
			s := brkSup(t, fmt.Sprintf("hung%d", i), 1, p, st)
			s.Start(ctx)
			synctest.Wait()
			_ = st
		}
		if hungCount.Load() != max || p.Len() != max {
			t.Fatalf("%d hung, %d steppers", hungCount.Load(), p.Len())
		}
		for i := range 5 {
			st := &brkStore{fakeStore: &fakeStore{t: t}}
			s := brkSup(t, fmt.Sprintf("free%d", i), uint64(i+1), p, st)
			s.Start(ctx)
			sups, stores = append(sups, s), append(stores, st)
		}
		clock := sups[0].clock
		// Check every 10 ms, between the instants at which ticks fire.
		time.Sleep(5 * time.Millisecond)
		for range 2000 {
			time.Sleep(10 * time.Millisecond)
			synctest.Wait()
			if p.Len() > max {
				t.Fatalf("%d steppers, bound %d", p.Len(), max)
			}
			for i, s := range sups {
				now := sups[i].clock()
				_ = clock
				if s.Busy(now, 0) || s.Overdue(now, 0) || s.Stuck(now, 0) {
					t.Fatalf("at %v lease free%d busy %t overdue %t stuck %t", now, i, s.Busy(now, 0), s.Overdue(now, 0), s.Stuck(now, 0))
				}
			}
		}
		for i, st := range stores {
			if h, v := st.holder(); h != "node-a" || v < 15 {
				t.Errorf("free%d: held by %q at version %d after 20 s", i, h, v)
			}
		}
		close(gate)
	})
}

// A flood of ticks from many timers at once keeps the pool's count exact:
// it never exceeds the bound, never goes negative, and is 0 once the pool
// ended; concurrent take() calls refused at the bound still step inline.
func TestBreakSteppersCountUnderConcurrentTakes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		pctx, stopPool := context.WithCancel(ctx)
		const max, n = 3, 64
		p := NewSteppers(pctx, max)
		gate := make(chan struct{})
		var observed atomic.Int32
		var bad atomic.Int32
		sups := make([]*Supervisor, n)
		for i := range n {
			st := &brkStore{fakeStore: &fakeStore{t: t}, hook: func(kind string) {
				if kind == "observe" {
					observed.Add(1)
				}
				if l := p.Len(); l > max || l < 0 {
					bad.Store(int32(l))
				}
				<-gate
			}}
			s := brkSup(t, fmt.Sprintf("f%d", i), 1, p, st)
			s.mu.Lock()
			s.ctx, s.started = ctx, true
			s.timer = time.AfterFunc(time.Hour, func() {})
			s.timer.Stop()
			s.mu.Unlock()
			sups[i] = s
		}
		for _, s := range sups {
			go s.tick()
		}
		synctest.Wait()
		if got := observed.Load(); got != n {
			t.Errorf("%d of %d ticks observed", got, n)
		}
		if l := p.Len(); l != max {
			t.Errorf("%d steppers with all busy, want %d", l, max)
		}
		if b := bad.Load(); b != 0 {
			t.Errorf("Len() was %d", b)
		}
		stopPool()
		close(gate)
		synctest.Wait()
		if l := p.Len(); l != 0 {
			t.Errorf("%d steppers after the pool ended", l)
		}
	})
}

// Len is "how many steppers there are", and there are never more than the
// bound; but a take() refused at the bound adds one to the count before
// it checks, and takes it off after, so a Len() read meanwhile reports
// more steppers than exist (and than the bound allows).
func TestBreakSteppersLenNeverAboveBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		const max = 2
		p := NewSteppers(ctx, max)
		gate := make(chan struct{})
		defer close(gate)
		for i := range max {
			var observed atomic.Int32
			s := brkFresh(t, ctx, fmt.Sprintf("hung%d", i), p, &observed)
			s.store.(*brkStore).hook = func(string) { <-gate }
			s.tick()
			synctest.Wait()
		}
		if l := p.Len(); l != max {
			t.Fatalf("%d steppers, want %d", l, max)
		}
		var observed atomic.Int32
		s := brkFresh(t, ctx, "refused", p, &observed)
		seen := 0
		for range 2000 {
			var wg sync.WaitGroup
			stop := make(chan struct{})
			reader := make(chan int)
			go func() {
				m := 0
				for {
					if l := p.Len(); l > m {
						m = l
					}
					select {
					case <-stop:
						reader <- m
						return
					default:
					}
				}
			}()
			for range 8 {
				wg.Go(func() {
					if p.take(s) {
						t.Error("take() succeeded with every stepper busy at the bound")
					}
				})
			}
			wg.Wait()
			close(stop)
			if m := <-reader; m > seen {
				seen = m
			}
			if seen > max {
				break
			}
		}
		if seen > max {
			t.Errorf("Len() reported %d steppers; there are %d (the bound)", seen, max)
		}
	})
}
