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
// The queue takes memory only for the entries in it (after a burst its
// array goes back to the heap). Attribute values are resolved when an
// entry is queued. An entry the next handler refuses counts as dropped.
// The report of drops follows the first batch written after them, so it
// may come before entries that were queued before the drops. Close
// writes what is queued, for at most a timeout, and ends the goroutine.
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
	q.items = append(q.items, queued{a.next, resolved(r)})
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
		failed := 0
		for i, e := range batch {
			if e.h.Handle(context.Background(), e.r) != nil {
				failed++ // refused (journald restarting, say): lost too
			}
			batch[i] = queued{} // let the record's attributes go
		}
		if len(batch) > 0 {
			if cap(batch) > 256 {
				batch = nil // a burst's array goes back to the heap
			}
			q.report(failed)
			continue
		}
		if closed {
			return
		}
		<-q.wake
	}
}

// report writes how many entries were lost (dropped, or refused by the
// next handler) since the last report, after a batch was written. A
// report that is refused too keeps its count for the next one.
func (q *queue) report(failed int) {
	q.mu.Lock()
	q.dropped += failed
	n := q.dropped
	q.dropped = 0
	q.mu.Unlock()
	if n == 0 {
		return
	}
	r := slog.NewRecord(time.Now(), slog.LevelWarn,
		fmt.Sprintf("the journal did not read in time: %d entries were dropped", n), 0)
	r.AddAttrs(slog.String(Event, DropEvent), slog.Int("UNITLEASE_DROPPED", n))
	if q.root.Handle(context.Background(), r) != nil {
		q.mu.Lock()
		q.dropped += n
		q.mu.Unlock()
	}
}

// resolved is a copy of r whose attribute values are resolved now, on the
// caller's goroutine: the writer formats them later.
func resolved(r slog.Record) slog.Record {
	c := slog.NewRecord(r.Time, r.Level, r.Message, r.PC)
	r.Attrs(func(a slog.Attr) bool {
		c.AddAttrs(resolveAttr(a))
		return true
	})
	return c
}

func resolveAttr(a slog.Attr) slog.Attr {
	a.Value = a.Value.Resolve()
	if a.Value.Kind() == slog.KindGroup {
		g := a.Value.Group()
		rs := make([]slog.Attr, len(g))
		for i, m := range g {
			rs[i] = resolveAttr(m)
		}
		a.Value = slog.GroupValue(rs...)
	}
	return a
}
