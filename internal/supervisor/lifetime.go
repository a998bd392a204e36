package supervisor

import (
	"context"
	"sync"
	"time"
)

// lifetime is the context a supervisor's actions run on: it has the
// values and the deadline of the context the supervisor was started
// on, and it is done once the supervisor ended (its Done channel).
//
// It is no context.WithCancel, for memory's sake. Every request to Redis
// derives a context with a timeout from it, and a *context.cancelCtx
// keeps the map it made for its first child, and its done channel, for
// as long as it lives: with the cancelCtx itself, about 700 bytes a
// lease, kept by thousands of leases. A lifetime is part of its
// supervisor, its done channel is the supervisor's, and its children
// register with its AfterFunc, which the context package calls for a
// parent that has one, in a list it lets go of whenever it is empty.
type lifetime struct {
	parent context.Context // the context the supervisor started on
	values context.Context // parent without its cancellation
	done   chan struct{}   // closed by Supervisor.end
	// byParent: it ended because parent did (set before done is
	// closed): its Err is parent's, which does not change once set, and
	// its values are parent's own, so that context.Cause finds parent's
	// cause.
	byParent bool

	mu    sync.Mutex
	over  bool    // end ran: a hook added now runs at once; guarded by mu
	hooks []*hook // the children to end with it; nil when none; guarded by mu
}

// hook is one AfterFunc's function.
type hook struct{ f func() }

func (l *lifetime) Deadline() (time.Time, bool) { return l.parent.Deadline() }
func (l *lifetime) Done() <-chan struct{}       { return l.done }

// Value is parent's value for key. While the lifetime lasts, and after
// an end by a call, it comes through context.WithoutCancel: parent's
// cancellation is hidden, so that context.Cause says nothing while it
// lasts and context.Canceled after. After an end that parent's end
// caused, it is parent's own: context.Cause then finds parent's cause.
func (l *lifetime) Value(key any) any {
	select {
	case <-l.done:
		if l.byParent {
			return l.parent.Value(key)
		}
	default:
	}
	return l.values.Value(key)
}

// Err is, once the supervisor ended, the parent's error if the parent
// had ended then (the supervisor ended with it), else context.Canceled;
// it does not change after.
func (l *lifetime) Err() error {
	select {
	case <-l.done:
		if l.byParent {
			return l.parent.Err()
		}
		return context.Canceled
	default:
		return nil
	}
}

// ended sets Err for the end; the caller then closes done.
func (l *lifetime) ended() {
	l.byParent = l.parent != nil && l.parent.Err() != nil
}

// AfterFunc arranges for f to run once the lifetime is over; stop
// unregisters it, and reports whether it did so before f was called.
// The context package calls it to end a child, with the child locked: f
// only cancels that child, which end does on its own goroutine, and
// which AfterFunc, on a lifetime already over, leaves to a goroutine of
// its own.
func (l *lifetime) AfterFunc(f func()) (stop func() bool) {
	h := &hook{f: f}
	l.mu.Lock()
	if l.over {
		l.mu.Unlock()
		go f()
		return func() bool { return false }
	}
	l.hooks = append(l.hooks, h)
	l.mu.Unlock()
	return func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		for i, o := range l.hooks {
			if o == h {
				last := len(l.hooks) - 1
				l.hooks[i], l.hooks[last] = l.hooks[last], nil
				l.hooks = l.hooks[:last]
				if last == 0 {
					l.hooks = nil // a lease idle between requests keeps no list
				}
				return true
			}
		}
		return false
	}
}

// end runs the hooks registered, each once; the caller closed done.
func (l *lifetime) end() {
	l.mu.Lock()
	l.over = true
	hooks := l.hooks
	l.hooks = nil
	l.mu.Unlock()
	for _, h := range hooks {
		h.f()
	}
}
