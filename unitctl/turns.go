package unitctl

import (
	"context"
	"sync"
)

// A line is the starts waiting for a place in a pool of calls
// (Systemd.startCalls) as data, not as goroutines: a daemon that starts
// thousands of units two at a time kept thousands of goroutines parked
// in the wait, each with its stack, and the runtime keeps a goroutine's
// descriptor for good once made (about 450 bytes a lease, for the
// daemon's life). A start in the line takes no goroutine until its turn
// comes: then it runs on one of its own with its place, as a Start that
// waited for it would.
//
// The line is the pool's only way in: a Start that waits on its own
// goroutine joins it too (take), so that starts get their places in the
// order they came, however they wait. (A Start waiting on the pool
// itself would get each place given back before the line saw it: a
// channel hands a freed place to a sender already waiting.)
type line struct {
	pool    chan struct{}
	holders int32 // of each place given (see slot): two for a start's, its own and its call's
	mu      sync.Mutex
	q       []*turn // in order; a turn leaves it when it runs or its ctx ends
}

// A turn is one start in the line.
type turn struct {
	run  func(*slot) // on a goroutine of its own, with the place, for line.holders
	fail func(error) // the turn's ctx ended first
	stop func() bool // stops the watch of the ctx
	done bool        // run or fail was called (or is about to be); guarded by line.mu
}

// wait puts a start in the line: run is called once a place in the pool
// is free and every start before it in the line has had its turn, or
// fail, with unanswered(ctx), if ctx ends first; exactly one of the two,
// each on a goroutine of its own. The place is run's slot, for the
// line's holders, as takeSlot(ctx, pool, holders) would give it.
func (l *line) wait(ctx context.Context, run func(*slot), fail func(error)) {
	t := &turn{run: run, fail: fail}
	l.mu.Lock()
	t.stop = context.AfterFunc(ctx, func() { l.leave(ctx, t) })
	l.q = append(l.q, t)
	l.mu.Unlock()
	l.next()
}

// leave takes t out of the line, its ctx having ended, unless it ran.
func (l *line) leave(ctx context.Context, t *turn) {
	l.mu.Lock()
	if t.done {
		l.mu.Unlock()
		return
	}
	t.done = true
	l.mu.Unlock()
	t.fail(unanswered(ctx, nil))
	// It stays in q, done, until next reaches it: the line is walked
	// from its front only.
}

// next gives each free place to the first turn in the line, until the
// pool or the line runs out. It is called whenever a turn joins the line
// and whenever a place of the pool is given back: a place freed and a
// turn that joined are never both missed, as each is followed by a next
// that sees both.
func (l *line) next() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for len(l.q) > 0 {
		t := l.q[0]
		if !t.done {
			select {
			case l.pool <- struct{}{}:
			default:
				return // no place free: the next place given back calls next
			}
			t.done = true
			sl := &slot{pool: l.pool, freed: l.next}
			sl.holders.Store(l.holders)
			go func() {
				t.stop()
				t.run(sl)
			}()
		}
		l.q[0] = nil
		l.q = l.q[1:]
	}
	l.q = nil // an empty line keeps no array
}

// take waits in the line for a place, for a Start that waits on its own
// goroutine: the place, for the line's holders, or unanswered(ctx) if
// ctx ends first.
func (l *line) take(ctx context.Context) (*slot, error) {
	got := make(chan *slot, 1)
	failed := make(chan error, 1)
	l.wait(ctx, func(sl *slot) { got <- sl }, func(err error) { failed <- err })
	select {
	case sl := <-got:
		return sl, nil
	case err := <-failed:
		return nil, err
	}
}
