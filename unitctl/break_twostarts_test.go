package unitctl

// Review tests of maxStarts = 2 (two StartUnit jobs of this Systemd in
// systemd at once), against the fake systemd of break_jobs_test.go.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
)

// slotWatch checks, until stopped, that every StartUnit call waiting in
// the fake's handler holds a start place: with no call arriving between
// the reads (startCalls unchanged), a call in the handler at the last
// read was on its way before the first, so its place was taken then and
// is given back only after the handler returns.
func slotWatch(t *testing.T, f *fakeSystemd, s *Systemd) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	var bad atomic.Int64
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			c1 := f.startCalls.Load()
			held := len(s.startCalls)
			in := f.startsIn.Load()
			c2 := f.startCalls.Load()
			if c1 == c2 && in > 0 && held == 0 {
				bad.Add(1)
			}
			if held > maxStarts {
				bad.Add(1)
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
		if n := bad.Load(); n != 0 {
			t.Errorf("%d samples with a StartUnit call in systemd holding no start place", n)
		}
	}
}

// Start jobs end only when the test ends them: never more than maxStarts
// start jobs of the Systemd live in the fake (counted from the StartUnit
// call's arrival to the JobRemoved), and every Start returns.
func TestTwoStartsJobsInSystemdBounded(t *testing.T) {
	f := newFakeSystemd(t)
	s := dialFake(t, nil)
	stop := slotWatch(t, f, s)
	var mu sync.Mutex
	live := map[uint32]string{}
	maxLive := 0
	arrived := make(chan struct{}, 64)
	f.onStart(func(name string) (uint32, *dbus.Error) {
		id := f.job()
		f.set(name, "activating", id, "start")
		mu.Lock()
		live[id] = name
		maxLive = max(maxLive, len(live))
		mu.Unlock()
		arrived <- struct{}{}
		return id, nil
	})
	const n = 16
	errs := make(chan error, n)
	for i := range n {
		go func() { errs <- s.Start(ctxFor(t, 20*time.Second), fmt.Sprintf("b%d.service", i)) }()
	}
	for ended := 0; ended < n; ended++ {
		<-arrived // a job to end
		mu.Lock()
		var id uint32
		var name string
		for id, name = range live {
			break
		}
		delete(live, id)
		mu.Unlock()
		f.set(name, "active", 0, "")
		f.removed(id, name, "done")
	}
	for range n {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	stop()
	mu.Lock()
	defer mu.Unlock()
	if maxLive > maxStarts {
		t.Errorf("%d start jobs in systemd at once, want at most %d", maxLive, maxStarts)
	}
	if !poolsEmpty(s, 5*time.Second) {
		t.Errorf("%d start places held after every start returned", len(s.startCalls))
	}
}

// Both places taken by calls systemd has not answered, their Starts'
// ctxs end: the places stay taken while the calls are unanswered (no
// third call goes out), and come back once systemd answers; a later
// start then goes through.
func TestTwoStartsCtxEndsMidCall(t *testing.T) {
	f := newFakeSystemd(t)
	s := dialFake(t, nil)
	stop := slotWatch(t, f, s)
	gate := make(chan struct{})
	var once sync.Once
	open := func() { once.Do(func() { close(gate) }) }
	t.Cleanup(open)
	f.onStart(func(name string) (uint32, *dbus.Error) { <-gate; return f.finish(name, "active", "done"), nil })
	ctx, cancel := context.WithCancel(t.Context())
	errs := make(chan error, maxStarts)
	for i := range maxStarts {
		go func() { errs <- s.Start(ctx, fmt.Sprintf("m%d.service", i)) }()
	}
	if !until(10*time.Second, func() bool { return f.startsIn.Load() == maxStarts }) {
		t.Fatalf("%d calls in the fake", f.startsIn.Load())
	}
	cancel()
	for range maxStarts {
		if err := <-errs; !errors.Is(err, context.Canceled) {
			t.Errorf("Start whose ctx ended mid-call: %v", err)
		}
	}
	// A start behind them waits for a place while the calls are
	// unanswered, and goes through once they are.
	late := make(chan error, 1)
	go func() { late <- s.Start(ctxFor(t, 20*time.Second), "late.service") }()
	select {
	case err := <-late:
		t.Fatalf("a third start returned (%v) while both places were held by unanswered calls", err)
	default:
	}
	if got := f.startCalls.Load(); got != maxStarts {
		t.Errorf("%d StartUnit calls with %d unanswered, want %d", got, maxStarts, maxStarts)
	}
	open()
	if err := <-late; err != nil {
		t.Errorf("start after the unanswered calls were answered: %v", err)
	}
	stop()
	if !poolsEmpty(s, 5*time.Second) {
		t.Errorf("%d start places still held", len(s.startCalls))
	}
	if f.maxStartsIn.Load() > maxStarts {
		t.Errorf("%d StartUnit calls in systemd at once", f.maxStartsIn.Load())
	}
}

// One place held by a call that systemd refuses, one by a call it is slow
// to answer, many rounds with ctxs ending at each point: the places all
// come back and a start goes through.
func TestTwoStartsErrorsAndCancelsMixed(t *testing.T) {
	f := newFakeSystemd(t)
	s := dialFake(t, nil)
	stop := slotWatch(t, f, s)
	var k atomic.Int64
	f.onStart(func(name string) (uint32, *dbus.Error) {
		switch k.Add(1) % 3 {
		case 0:
			return 0, dbus.NewError("org.freedesktop.systemd1.NoSuchUnit", []any{"no " + name})
		case 1:
			return f.finish(name, "failed", "failed"), nil
		}
		return f.finish(name, "active", "done"), nil
	})
	var wg sync.WaitGroup
	for i := range 60 {
		wg.Go(func() {
			ctx, cancel := context.WithCancel(t.Context())
			if i%4 == 0 {
				cancel()
			}
			defer cancel()
			s.Start(ctx, fmt.Sprintf("x%d.service", i))
		})
	}
	wg.Wait()
	stop()
	if !poolsEmpty(s, 5*time.Second) {
		t.Fatalf("%d start places still held", len(s.startCalls))
	}
	f.onStart(func(name string) (uint32, *dbus.Error) { return f.finish(name, "active", "done"), nil })
	for i := range 2 * maxStarts {
		if err := s.Start(ctxFor(t, 5*time.Second), fmt.Sprintf("after%d.service", i)); err != nil {
			t.Fatalf("Start after the mixed starts: %v", err)
		}
	}
	if f.maxStartsIn.Load() > maxStarts {
		t.Errorf("%d StartUnit calls in systemd at once", f.maxStartsIn.Load())
	}
}

// A systemd slow to answer: the call outlasts startSlotHold (the hold's
// timer runs from before the call). The place is held until the answer,
// then until the job ends; then both places serve further starts.
func TestTwoStartsHoldExpiresDuringCall(t *testing.T) {
	f := newFakeSystemd(t)
	s := dialFake(t, nil)
	stop := slotWatch(t, f, s)
	var first atomic.Bool
	jobs := make(chan uint32, 4)
	f.onStart(func(name string) (uint32, *dbus.Error) {
		if name == "slow.service" && first.CompareAndSwap(false, true) {
			answer := make(chan struct{})
			time.AfterFunc(startSlotHold+500*time.Millisecond, func() { close(answer) }) // systemd slow to answer
			<-answer
			id := f.job()
			f.set(name, "activating", id, "start")
			jobs <- id
			return id, nil
		}
		return f.finish(name, "active", "done"), nil
	})
	done := make(chan error, 1)
	go func() { done <- s.Start(ctxFor(t, 30*time.Second), "slow.service") }()
	if !until(10*time.Second, func() bool { return f.startsIn.Load() == 1 }) {
		t.Fatal("no StartUnit")
	}
	// The other place serves starts meanwhile.
	for i := range 4 {
		if err := s.Start(ctxFor(t, 10*time.Second), fmt.Sprintf("o%d.service", i)); err != nil {
			t.Fatalf("start beside the slow call: %v", err)
		}
	}
	id := <-jobs
	f.set("slow.service", "active", 0, "")
	f.removed(id, "slow.service", "done")
	if err := <-done; err != nil {
		t.Fatalf("slow start: %v", err)
	}
	stop()
	if !poolsEmpty(s, 5*time.Second) {
		t.Fatalf("%d start places held after the slow start", len(s.startCalls))
	}
	gate := make(chan struct{})
	t.Cleanup(func() { close(gate) })
	f.onStart(func(name string) (uint32, *dbus.Error) { <-gate; return f.finish(name, "active", "done"), nil })
	for i := range maxStarts {
		go s.Start(t.Context(), fmt.Sprintf("fill%d.service", i))
	}
	if !until(10*time.Second, func() bool { return f.startsIn.Load() == maxStarts }) {
		t.Errorf("%d of %d places serve calls after the slow start", f.startsIn.Load(), maxStarts)
	}
}

// Two Starts of one unit at once, merged by systemd into one job, whose
// JobRemoved comes before, between and after the answers: both see the
// job's result, and both give their places back.
func TestTwoStartsSameUnitMerged(t *testing.T) {
	for _, when := range []string{"before", "after"} {
		t.Run(when, func(t *testing.T) {
			f := newFakeSystemd(t)
			s := dialFake(t, nil)
			id := f.job()
			f.set("m.service", "inactive", id, "start")
			var arrived atomic.Int64
			gate := make(chan struct{})
			f.onStart(func(name string) (uint32, *dbus.Error) {
				arrived.Add(1)
				<-gate
				return id, nil
			})
			errs := make(chan error, 2)
			for range 2 {
				go func() { errs <- s.Start(ctxFor(t, 10*time.Second), "m.service") }()
			}
			if !until(10*time.Second, func() bool { return arrived.Load() == 2 }) {
				t.Fatal("the two StartUnit calls did not both reach systemd")
			}
			if when == "before" {
				f.ended(t, s, id, "m.service", "failed", "failed")
				close(gate)
			} else {
				close(gate)
				if !until(10*time.Second, func() bool { return f.startsIn.Load() == 0 }) {
					t.Fatal("calls not answered")
				}
				// the answers are in; the job ends
				f.ended(t, s, id, "m.service", "failed", "failed")
			}
			for range 2 {
				err := <-errs
				var je *JobError
				if !errors.As(err, &je) || je.JobResult != "failed" {
					t.Errorf("merged start: %v; want a JobError with job result failed", err)
				}
			}
			if !poolsEmpty(s, 5*time.Second) {
				t.Errorf("%d start places held", len(s.startCalls))
			}
		})
	}
}

// Two starts of different units at once, their jobs ending in the
// opposite order with different results: each gets its own.
func TestTwoStartsOwnResults(t *testing.T) {
	f := newFakeSystemd(t)
	s := dialFake(t, nil)
	var mu sync.Mutex
	ids := map[string]uint32{}
	var in atomic.Int64
	f.onStart(func(name string) (uint32, *dbus.Error) {
		id := f.job()
		f.set(name, "activating", id, "start")
		mu.Lock()
		ids[name] = id
		mu.Unlock()
		in.Add(1)
		return id, nil
	})
	for round := range 20 {
		a, b := fmt.Sprintf("a%d.service", round), fmt.Sprintf("b%d.service", round)
		ea, eb := make(chan error, 1), make(chan error, 1)
		go func() { ea <- s.Start(ctxFor(t, 10*time.Second), a) }()
		go func() { eb <- s.Start(ctxFor(t, 10*time.Second), b) }()
		if !until(10*time.Second, func() bool { return in.Load() == int64(2*(round+1)) }) {
			t.Fatalf("round %d: both starts did not reach systemd at once (%d calls)", round, in.Load())
		}
		mu.Lock()
		ia, ib := ids[a], ids[b]
		mu.Unlock()
		// b's job ends first, done; then a's, failed.
		f.ended(t, s, ib, b, "active", "done")
		if err := <-eb; err != nil {
			t.Fatalf("round %d: %s: %v", round, b, err)
		}
		f.ended(t, s, ia, a, "failed", "failed")
		err := <-ea
		var je *JobError
		if !errors.As(err, &je) || je.JobResult != "failed" {
			t.Fatalf("round %d: %s: %v; want job result failed", round, a, err)
		}
	}
}

// Both places held by starts whose jobs never end (and whose calls
// systemd has not answered): a Stop of another unit, and a Stop of a
// unit being started, go through at once.
func TestTwoStartsStopsNotBehindStarts(t *testing.T) {
	f := newFakeSystemd(t)
	s := dialFake(t, nil)
	gate := make(chan struct{})
	var once sync.Once
	open := func() { once.Do(func() { close(gate) }) }
	t.Cleanup(open)
	var mu sync.Mutex
	ids := map[string]uint32{}
	f.onStart(func(name string) (uint32, *dbus.Error) {
		if name == "hung.service" {
			<-gate
			return f.finish(name, "active", "done"), nil
		}
		id := f.job()
		f.set(name, "activating", id, "start")
		mu.Lock()
		ids[name] = id
		mu.Unlock()
		return id, nil
	})
	f.onStop(func(name string) (uint32, *dbus.Error) {
		mu.Lock()
		sid := ids[name]
		mu.Unlock()
		if sid != 0 {
			f.removed(sid, name, "canceled") // the stop replaces the start job
		}
		return f.finish(name, "inactive", "done"), nil
	})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	slowErr := make(chan error, 1)
	go func() { slowErr <- s.Start(ctx, "jobless.service") }() // its job never ends on its own
	hungErr := make(chan error, 1)
	go func() { hungErr <- s.Start(ctx, "hung.service") }() // its call is never answered
	if !until(10*time.Second, func() bool { return f.startCalls.Load() == 2 && len(s.startCalls) == maxStarts }) {
		t.Fatalf("%d calls, %d places", f.startCalls.Load(), len(s.startCalls))
	}
	f.set("other.service", "active", 0, "")
	if err := s.Stop(ctxFor(t, 5*time.Second), "other.service", time.Minute); err != nil {
		t.Errorf("Stop of another unit behind two starts: %v", err)
	}
	if err := s.Stop(ctxFor(t, 5*time.Second), "jobless.service", time.Minute); err != nil {
		t.Errorf("Stop of the unit being started: %v", err)
	}
	if err := <-slowErr; err == nil {
		t.Errorf("Start whose job the stop canceled: nil")
	}
	open()
	if err := <-hungErr; err != nil {
		t.Errorf("hung start once answered: %v", err)
	}
	if !poolsEmpty(s, 5*time.Second) {
		t.Errorf("%d start places held", len(s.startCalls))
	}
}
