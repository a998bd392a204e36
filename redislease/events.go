package redislease

import (
	"context"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Wake tells a standby to observe a lease now rather than at its next poll.
type Wake struct {
	// Lease is the lease whose record was released or acquired.
	Lease string
	// Resync is set after the subscription was (re-)established: events
	// may have been missed, so observe every lease.
	Resync bool
}

// Wakeups subscribes to every lease's events channel and delivers a Wake
// for each release or acquisition, so a standby acts on a release within a
// round trip. After a disconnect it subscribes again, backing off up to
// maxBackoff, and sends a Resync. The channel closes when ctx ends.
//
// Wake-ups only hurry observations along; nothing depends on them for
// safety, and a standby still polls.
func (s *Store) Wakeups(ctx context.Context) <-chan Wake {
	out := make(chan Wake, 64)
	go func() {
		defer close(out)
		backoff := 100 * time.Millisecond
		for ctx.Err() == nil {
			if s.subscribe(ctx, out) {
				backoff = 100 * time.Millisecond
			}
			select {
			case <-ctx.Done():
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, maxBackoff)
		}
	}()
	return out
}

const maxBackoff = 5 * time.Second

// subscribe runs one subscription until it fails or ctx ends. It reports
// whether the subscription was established.
func (s *Store) subscribe(ctx context.Context, out chan<- Wake) bool {
	pattern := s.prefix + "events:*"
	ps := s.rdb.PSubscribe(ctx)
	defer ps.Close()
	if err := ps.PSubscribe(ctx, pattern); err != nil {
		return false
	}
	established := false
	for {
		msg, err := ps.Receive(ctx)
		if err != nil {
			return established
		}
		var w Wake
		switch m := msg.(type) {
		case *redis.Subscription:
			established = true
			w.Resync = true
		case *redis.Message:
			w.Lease = strings.TrimPrefix(m.Channel, s.prefix+"events:")
		default:
			continue
		}
		select {
		case out <- w:
		case <-ctx.Done():
			return established
		}
	}
}
