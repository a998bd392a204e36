package redislease

import (
	"context"
	"fmt"
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
	// ClearFailures: `unitlease clear` asks every node to forget the
	// lease's failures (ClearFailures). Nothing of the record changed.
	ClearFailures bool
	// Toggled: an operator disabled or enabled the lease (Disable,
	// Enable). Nothing of the record changed.
	Toggled bool
}

// clearFailuresMessage is what ClearFailures publishes on a lease's
// channel; the scripts publish records, which are JSON objects.
const clearFailuresMessage = "clear-failures"

// ClearFailures asks every daemon that watches lease to forget the
// failures of its units (a node that failed them FailureThreshold= times
// competes again), and returns how many daemons heard it. A daemon not
// connected at that moment does not: its failures leave their window on
// their own.
func (s *Store) ClearFailures(ctx context.Context, lease string) (int64, error) {
	ctx, cancel := s.bounded(ctx)
	defer cancel()
	n, err := s.rdb.Publish(ctx, s.Channel(lease), clearFailuresMessage).Result()
	if err != nil {
		return 0, fmt.Errorf("redislease: clearing the failures of %s: %w", lease, err)
	}
	return n, nil
}

// Wakeups subscribes to the events channels of the given leases and
// delivers a Wake for each release or acquisition, so a standby acts on a
// release within a round trip. After a disconnect it subscribes again,
// backing off up to maxBackoff, and sends a Resync. The channel closes when
// ctx ends; to watch a different set of leases, end it and call again.
//
// The subscriptions also tell peers who is watching a lease (Watchers).
// Wake-ups only hurry observations along; nothing depends on them for
// safety, and a standby still polls.
func (s *Store) Wakeups(ctx context.Context, leases []string) <-chan Wake {
	out := make(chan Wake, 64)
	go func() {
		defer close(out)
		backoff := 100 * time.Millisecond
		for ctx.Err() == nil {
			if s.subscribe(ctx, leases, out) {
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
func (s *Store) subscribe(ctx context.Context, leases []string, out chan<- Wake) bool {
	channels := make([]string, len(leases))
	for i, l := range leases {
		channels[i] = s.Channel(l)
	}
	ps := s.rdb.Subscribe(ctx)
	defer ps.Close()
	// Receive returns on a message or a deadline, not on a cancelled
	// context: closing the subscription is what ends it (else each
	// reload would leave one behind, counted as a watcher by peers).
	defer context.AfterFunc(ctx, func() { ps.Close() })()
	if len(channels) == 0 {
		<-ctx.Done()
		return true
	}
	if err := ps.Subscribe(ctx, channels...); err != nil {
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
			if established || m.Count < len(channels) {
				continue // one confirmation per channel: resync once, after the last
			}
			established = true
			w.Resync = true
		case *redis.Message:
			w.Lease = strings.TrimPrefix(m.Channel, s.prefix+"events:")
			w.ClearFailures = m.Payload == clearFailuresMessage
			w.Toggled = m.Payload == disabledMessage || m.Payload == enabledMessage
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

// Watchers counts the daemons subscribed to a lease's events channel: every
// node that manages the lease, this one included if it does.
func (s *Store) Watchers(ctx context.Context, name string) (int, error) {
	ctx, cancel := s.bounded(ctx)
	defer cancel()
	n, err := s.rdb.PubSubNumSub(ctx, s.Channel(name)).Result()
	if err != nil {
		return 0, fmt.Errorf("redislease: watchers of %s: %w", name, err)
	}
	return int(n[s.Channel(name)]), nil
}
