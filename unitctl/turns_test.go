package unitctl

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
)

// giveBack releases both holds of a turn's place.
func giveBack(sl *slot) {
	sl.release()
	sl.release()
}

// TestLineWaitsWithoutAGoroutineAndGoesInOrder: with the pool full, 500
// starts join the line and no goroutine is made for any of them; once a
// place comes back they run one by one (a pool of one place), in the
// order they joined, each on its own place, and the pool ends empty.
func TestLineWaitsWithoutAGoroutineAndGoesInOrder(t *testing.T) {
	pool := make(chan struct{}, 1)
	l := &line{pool: pool, holders: 2}
	pool <- struct{}{} // held by a start outside the line
	const n = 500
	var order []int
	var mu sync.Mutex
	var wg sync.WaitGroup
	wg.Add(n)
	before := runtime.NumGoroutine()
	for i := range n {
		l.wait(context.Background(), func(sl *slot) {
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			giveBack(sl)
			wg.Done()
		}, func(err error) { t.Errorf("turn %d failed: %v", i, err) })
	}
	if got := runtime.NumGoroutine(); got != before {
		t.Fatalf("%d goroutines after %d starts joined a full line, %d before", got, n, before)
	}
	<-pool
	l.next() // the place outside the line comes back
	wg.Wait()
	if !slices.Equal(order, intsTo(n)) {
		t.Fatalf("the line ran out of order: %v", order)
	}
	if len(pool) != 0 {
		t.Fatalf("%d places held after every turn gave its back", len(pool))
	}
}

func intsTo(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}

// TestLineLeavesWhenItsCtxEnds: a start whose ctx ends while it waits
// fails with the ctx's error and never runs; the one behind it gets the
// next place.
func TestLineLeavesWhenItsCtxEnds(t *testing.T) {
	pool := make(chan struct{}, 1)
	l := &line{pool: pool, holders: 2}
	pool <- struct{}{}
	ctx, cancel := context.WithCancel(t.Context())
	failed := make(chan error, 1)
	ran := make(chan string, 2)
	l.wait(ctx, func(sl *slot) { ran <- "first"; giveBack(sl) }, func(err error) { failed <- err })
	l.wait(context.Background(), func(sl *slot) { ran <- "second"; giveBack(sl) }, func(err error) { t.Errorf("second failed: %v", err) })
	cancel()
	if err := <-failed; !errors.Is(err, context.Canceled) {
		t.Fatalf("the first failed with %v, want context.Canceled", err)
	}
	<-pool
	l.next()
	if got := <-ran; got != "second" {
		t.Fatalf("%s ran, want second", got)
	}
	select {
	case got := <-ran:
		t.Fatalf("%s ran too", got)
	default:
	}
}

// TestLineEachTurnOnceUnderRaces: starts join from many goroutines,
// some with a ctx that ends at a random moment, while places come and
// go: each gets exactly one of run and fail, never more places are held
// than the pool has, and none is left held. Run it under -race.
func TestLineEachTurnOnceUnderRaces(t *testing.T) {
	pool := make(chan struct{}, 2)
	l := &line{pool: pool, holders: 2}
	const n = 2000
	var calls [n]atomic.Int32
	var ran, failed atomic.Int64
	var wg sync.WaitGroup
	wg.Add(n)
	for g := range 8 {
		go func() {
			for i := g; i < n; i += 8 {
				ctx, cancel := context.WithCancel(context.Background())
				l.wait(ctx, func(sl *slot) {
					calls[i].Add(1)
					ran.Add(1)
					if len(pool) > cap(pool) {
						t.Error("more places held than the pool has")
					}
					go func() {
						giveBack(sl)
						wg.Done()
					}()
				}, func(error) {
					calls[i].Add(1)
					failed.Add(1)
					wg.Done()
				})
				if rand.IntN(3) == 0 {
					go cancel()
				} else {
					defer cancel()
				}
			}
		}()
	}
	wg.Wait()
	for i := range n {
		if c := calls[i].Load(); c != 1 {
			t.Fatalf("turn %d got %d calls, want 1", i, c)
		}
	}
	if len(pool) != 0 {
		t.Fatalf("%d places held at the end", len(pool))
	}
	t.Logf("%d ran, %d failed", ran.Load(), failed.Load())
}

// TestStartQueuedAsStart: against the fake systemd, 16 StartQueued
// return at once and each reports its unit active; never more than
// maxStarts of their jobs are in systemd at once; a StartQueued whose ctx
// ends while it waits reports that, and its unit gets no StartUnit call;
// no place stays held.
func TestStartQueuedAsStart(t *testing.T) {
	f := newFakeSystemd(t)
	s := dialFake(t, nil)
	var mu sync.Mutex
	live := map[uint32]string{}
	called := map[string]bool{}
	maxLive := 0
	arrived := make(chan struct{}, 64)
	f.onStart(func(name string) (uint32, *dbus.Error) {
		id := f.job()
		f.set(name, "activating", id, "start")
		mu.Lock()
		live[id] = name
		called[name] = true
		maxLive = max(maxLive, len(live))
		mu.Unlock()
		arrived <- struct{}{}
		return id, nil
	})
	const n = 16
	errs := make(chan error, n+1)
	for i := range n {
		s.StartQueued(ctxFor(t, 20*time.Second), fmt.Sprintf("q%d.service", i), func(err error) { errs <- err })
	}
	gone, cancel := context.WithCancel(t.Context())
	s.StartQueued(gone, "gone.service", func(err error) { errs <- err })
	cancel()
	for ended := 0; ended < n; ended++ {
		<-arrived
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
	var cancelled int
	for range n + 1 {
		err := <-errs
		var je *JobError
		switch {
		case err == nil:
		case errors.As(err, &je) && je.Unit == "gone.service" && errors.Is(err, context.Canceled):
			cancelled++
		default:
			t.Error(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if cancelled != 1 || called["gone.service"] {
		t.Errorf("the start whose ctx ended: reported %d times, StartUnit called %t; want once, never", cancelled, called["gone.service"])
	}
	if maxLive > maxStarts {
		t.Errorf("%d start jobs in systemd at once, want at most %d", maxLive, maxStarts)
	}
	if !poolsEmpty(s, 5*time.Second) {
		t.Errorf("%d start places held after every start returned", len(s.startCalls))
	}
}
