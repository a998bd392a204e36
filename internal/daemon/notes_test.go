package daemon

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// TestNoteLineWritesEveryNoteFewAtATime: a burst of notes (a daemon that
// acquires thousands of leases within seconds) is written in full, by at
// most noteWriters goroutines at once, each note within historyWait of
// when it was made: one that waited longer gets a context already done,
// and the line goes on.
func TestNoteLineWritesEveryNoteFewAtATime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var l noteLine
		gate := make(chan struct{})
		var writing, most, written, late atomic.Int32
		var wg sync.WaitGroup
		const n = 1000
		for range n {
			wg.Add(1)
			l.add(func(ctx context.Context) {
				defer wg.Done()
				now := writing.Add(1)
				for m := most.Load(); now > m && !most.CompareAndSwap(m, now); m = most.Load() {
				}
				<-gate
				if ctx.Err() != nil {
					late.Add(1)
				}
				written.Add(1)
				writing.Add(-1)
			})
		}
		synctest.Wait()
		if w := writing.Load(); w != noteWriters {
			t.Fatalf("%d notes being written at once out of %d waiting; want %d", w, n, noteWriters)
		}
		time.Sleep(historyWait + time.Second) // the first notes hang past every note's bound
		close(gate)
		wg.Wait()
		if written.Load() != n || most.Load() != noteWriters {
			t.Fatalf("%d of %d notes written, at most %d at once; want all, %d", written.Load(), n, most.Load(), noteWriters)
		}
		if late.Load() != n {
			t.Fatalf("%d of %d notes made %v before their write had a live context", n-late.Load(), n, historyWait+time.Second)
		}
		synctest.Wait()
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.workers != 0 || l.q != nil {
			t.Fatalf("after the burst: %d workers, a line of %d (array kept: %t)", l.workers, len(l.q), l.q != nil)
		}
	})
}
