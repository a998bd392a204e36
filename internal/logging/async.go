package logging

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// DropEvent is the UNITLEASE_EVENT of the entry that reports entries the
// journal lost while it was not reading.
const DropEvent = "journal_dropped"

// QueueMax is how many entries the daemon's journal queue holds before it
// drops: a burst of a few thousand leases moving at once fits.
const QueueMax = 16384

// Async is a slog.Handler that never blocks its caller: Handle puts the
// entry on a queue, and one goroutine writes the queue to the next
// handler in order. When the queue is full (journald stopped reading its
// socket), entries are dropped and counted, and once the writes go
// through again one entry says how many were lost. A supervisor's step
// and the stop it asks for therefore never wait on the journal.
//
// The queue takes memory only for the entries in it. Close writes what
// is queued, for at most a timeout, and ends the goroutine.
type Async struct {
	next slog.Handler
	q    *queue
}

type queued struct {
	h slog.Handler
	r slog.Record
}

type queue struct {
	root slog.Handler // for the report of drops
	max  int

	mu      sync.Mutex
	items   []queued
	dropped int
	closed  bool
	wake    chan struct{} // one pending wake-up
	done    chan struct{} // closed when the writer ends
}

// NewAsync starts the writer of a queue of at most max entries in front
// of next.
func NewAsync(next slog.Handler, max int) *Async {
	q := &queue{root: next, max: max, wake: make(chan struct{}, 1), done: make(chan struct{})}
	go q.write()
	return &Async{next: next, q: q}
}

// Enabled reports whether the next handler takes entries of level l.
func (a *Async) Enabled(ctx context.Context, l slog.Level) bool { return a.next.Enabled(ctx, l) }

// Handle queues r, or counts it as dropped when the queue is full or
// closed. It never blocks on the next handler.
func (a *Async) Handle(_ context.Context, r slog.Record) error {
	q := a.q
	q.mu.Lock()
	if q.closed || len(q.items) >= q.max {
		q.dropped++
		q.mu.Unlock()
		return nil
	}
	q.items = append(q.items, queued{a.next, r.Clone()})
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
	return nil
}

// WithAttrs returns an Async on the same queue.
func (a *Async) WithAttrs(as []slog.Attr) slog.Handler {
	return &Async{next: a.next.WithAttrs(as), q: a.q}
}

// WithGroup returns an Async on the same queue.
func (a *Async) WithGroup(name string) slog.Handler {
	return &Async{next: a.next.WithGroup(name), q: a.q}
}

// Dropped is how many entries were dropped and not yet reported.
func (a *Async) Dropped() int {
	a.q.mu.Lock()
	defer a.q.mu.Unlock()
	return a.q.dropped
}

// Close stops taking entries, waits up to timeout for the queue to be
// written, and reports whether it was.
func (a *Async) Close(timeout time.Duration) bool {
	q := a.q
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-q.done:
		return true
	case <-t.C:
		return false
	}
}

// write writes the queue in order until it is closed and empty.
func (q *queue) write() {
	defer close(q.done)
	var batch []queued
	for {
		q.mu.Lock()
		batch, q.items = q.items, batch[:0]
		closed := q.closed
		q.mu.Unlock()
		for i, e := range batch {
			_ = e.h.Handle(context.Background(), e.r)
			batch[i] = queued{} // let the record's attributes go
		}
		if len(batch) > 0 {
			q.report()
			continue
		}
		if closed {
			return
		}
		<-q.wake
	}
}

// report writes how many entries were dropped since the last report, once
// a write went through.
func (q *queue) report() {
	q.mu.Lock()
	n := q.dropped
	q.dropped = 0
	q.mu.Unlock()
	if n == 0 {
		return
	}
	r := slog.NewRecord(time.Now(), slog.LevelWarn,
		fmt.Sprintf("the journal did not read in time: %d entries were dropped", n), 0)
	r.AddAttrs(slog.String(Event, DropEvent), slog.Int("UNITLEASE_DROPPED", n))
	_ = q.root.Handle(context.Background(), r)
}
