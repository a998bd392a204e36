package unitctl

import (
	"context"
	"sync"
)

// reloads is the set of Reloads subscribers.
type reloads struct {
	mu  sync.Mutex
	set map[chan struct{}]bool
}

func (r *reloads) notify() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for ch := range r.set {
		select {
		case ch <- struct{}{}:
		default: // one pending notice is enough
		}
	}
}

// Reloads delivers a notice after every daemon-reload that finished (and
// after a reconnect, since a re-exec reloads units too), so that the caller
// can look for changed annotations. Notices coalesce: one pending notice
// stands for any number of reloads. The channel closes when ctx ends.
//
// It includes the reloads unitctl itself asks for (Install, Uninstall).
func (s *Systemd) Reloads(ctx context.Context) <-chan struct{} {
	in := make(chan struct{}, 1)
	s.reloads.mu.Lock()
	s.reloads.set[in] = true
	s.reloads.mu.Unlock()
	out := make(chan struct{})
	go func() {
		defer close(out)
		defer func() {
			s.reloads.mu.Lock()
			delete(s.reloads.set, in)
			s.reloads.mu.Unlock()
		}()
		for {
			select {
			case <-ctx.Done():
				return
			case <-in:
			}
			select {
			case out <- struct{}{}:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}
