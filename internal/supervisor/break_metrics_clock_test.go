package supervisor

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/unitlease/unitlease/policy"
)

// bmGatedRead is an offset source whose next read can be held: held
// reads return the offset of the moment they began, once released.
type bmGatedRead struct {
	mu      sync.Mutex
	off     Offset
	hold    chan struct{} // non-nil: the next read waits on it
	reads   int
	waiting chan struct{} // closed once a held read began
}

func (g *bmGatedRead) read() (Offset, error) {
	g.mu.Lock()
	g.reads++
	o, hold, waiting := g.off, g.hold, g.waiting
	g.hold = nil
	g.mu.Unlock()
	if hold != nil {
		close(waiting)
		<-hold
	}
	return o, nil
}

func (g *bmGatedRead) holdNext() (release func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	h := make(chan struct{})
	g.hold, g.waiting = h, make(chan struct{})
	return func() { close(h) }
}

func (g *bmGatedRead) set(o Offset) {
	g.mu.Lock()
	g.off = o
	g.mu.Unlock()
}

// TestBreakMetricsOffsetCacheALateStoreOfAPreResumeReading: a reader
// read the offset before a resume and stores it only after Resumed and a
// fresh post-resume reading were stored (it overwrites the fresh one).
// A read after that must not reuse the pre-resume reading, and the clock
// built on the cache must not go back.
func TestBreakMetricsOffsetCacheALateStoreOfAPreResumeReading(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := &bmGatedRead{}
		cached := cachedOffset(g.read)
		clock := SuspendClock(cached)
		time.Sleep(OffsetReuse) // the base reading is stale
		release := g.holdNext()
		var a policy.Instant
		done := make(chan struct{})
		go func() { a = clock(); close(done) }() // reads the offset 0, held
		<-g.waiting
		g.set(Offset{Lo: time.Hour, Hi: time.Hour}) // the machine slept an hour
		Resumed()
		b := clock() // reads the hour
		if b < policy.Instant(time.Hour) {
			t.Fatalf("after Resumed the clock reads %v: the hour asleep is not counted", b)
		}
		release()
		<-done
		if a > b+policy.Instant(time.Second) {
			t.Fatalf("odd: %v, %v", a, b)
		}
		reads := g.reads
		o, _ := cached() // the pre-resume reading is the last stored
		if o.Lo != time.Hour || g.reads != reads+1 {
			t.Errorf("after Resumed a pre-resume reading was reused: %+v (reads %d -> %d)", o, reads, g.reads)
		}
		if c := clock(); c < b {
			t.Errorf("the clock went back from %v to %v", b, c)
		}
	})
}

// TestBreakMetricsOffsetCacheOutOfOrderStoresWithoutResume: the same
// without a Resumed (a suspend not yet noticed): the older reading
// overwrites the newer and is reused, but the clock keeps the larger
// growth it saw and does not go back.
func TestBreakMetricsOffsetCacheOutOfOrderStoresWithoutResume(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := &bmGatedRead{}
		clock := SuspendClock(cachedOffset(g.read))
		time.Sleep(OffsetReuse)
		release := g.holdNext()
		done := make(chan struct{})
		go func() { clock(); close(done) }()
		<-g.waiting
		g.set(Offset{Lo: time.Hour, Hi: time.Hour})
		b := clock() // the cache is still stale: reads the hour
		release()
		<-done
		for range 10 {
			if c := clock(); c < b {
				t.Fatalf("the clock went back from %v to %v", b, c)
			}
		}
	})
}

// TestBreakMetricsBootClockUnderConcurrentReadersAndResumes: many
// goroutines read one BootClock while resumes are signalled; under
// -race nothing races, and each goroutine's readings never go back, nor
// does a reading taken after another returned.
func TestBreakMetricsBootClockUnderConcurrentReadersAndResumes(t *testing.T) {
	clock := BootClock()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var last policy.Instant
	for range 16 {
		wg.Go(func() {
			prev := clock()
			for range 2000 {
				now := clock()
				if now < prev {
					t.Errorf("clock went back: %v -> %v", prev, now)
					return
				}
				prev = now
				mu.Lock()
				if c := clock(); c < last {
					t.Errorf("a reading after another returned is earlier: %v < %v", c, last)
				} else {
					last = c
				}
				mu.Unlock()
			}
		})
	}
	wg.Go(func() {
		for range 200 {
			Resumed()
		}
	})
	wg.Wait()
}
