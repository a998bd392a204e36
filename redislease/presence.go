package redislease

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// A daemon tells its peers what it is ready for by the channels it
// subscribes to, not by keys it writes: a subscription lives exactly as
// long as the daemon's connection, so a daemon that stops (or whose
// connection Redis drops) is gone from every peer's view with nothing to
// clean up, and announcing costs no write. Each announcement is a channel
// under the events namespace that no lease's channel can be (a lease name
// never holds a '/'):
//
//	<prefix>events:/NODE/drained           the node is drained
//	<prefix>events:/NODE/STATE/LEASE       the node manages LEASE, in STATE
//
// where STATE is one of the Announce* states. Nothing is ever published
// on them. A node whose machine dies without closing its connection stays
// announced until Redis notices (its tcp-keepalive, 300 s by default):
// announcements steer handoffs and preferences, never safety.
const (
	// AnnounceReady: the node may take the lease when it is offered.
	AnnounceReady = "ready"
	// AnnounceDrained: the node is drained: it takes no lease.
	AnnounceDrained = "drained"
	// AnnounceExcluded: the unit failed on the node too often lately.
	AnnounceExcluded = "excluded"
	// AnnounceIneligible: the node must not run the unit (a drop-in is
	// defeated, a unit refused).
	AnnounceIneligible = "ineligible"
	// AnnounceDisabled: an operator disabled the lease (Disable): no node
	// takes it.
	AnnounceDisabled = "disabled"
)

var announceStates = []string{AnnounceReady, AnnounceDrained, AnnounceExcluded, AnnounceIneligible, AnnounceDisabled}

// Announcement is what one node says of itself: of one lease, or of
// itself (Lease "") when it is drained.
type Announcement struct {
	Node  string
	State string
	Lease string // "" for the node itself
}

func (s *Store) announceChannel(a Announcement) string {
	c := s.prefix + "events:/" + a.Node + "/" + a.State
	if a.Lease != "" {
		c += "/" + a.Lease
	}
	return c
}

// parseAnnouncement reads a channel announceChannel wrote.
func (s *Store) parseAnnouncement(c string) (Announcement, bool) {
	rest, ok := strings.CutPrefix(c, s.prefix+"events:/")
	if !ok {
		return Announcement{}, false
	}
	parts := strings.SplitN(rest, "/", 3)
	if len(parts) < 2 || ValidNode(parts[0]) != nil || !slices.Contains(announceStates, parts[1]) {
		return Announcement{}, false
	}
	a := Announcement{Node: parts[0], State: parts[1]}
	if len(parts) == 3 {
		a.Lease = parts[2]
	}
	return a, a.Lease != "" || a.State == AnnounceDrained
}

// Presence keeps this node's announcements subscribed on one connection
// of its own while its context lasts. Set replaces them.
type Presence struct {
	s    *Store
	ps   *redis.PubSub
	mu   sync.Mutex
	have map[string]bool // subscribed (or to be, on go-redis's next reconnect)
}

// Announce opens the node's announcements, none at first; they end with
// ctx.
func (s *Store) Announce(ctx context.Context) *Presence {
	p := &Presence{s: s, ps: s.rdb.Subscribe(ctx), have: map[string]bool{}}
	context.AfterFunc(ctx, func() { p.ps.Close() })
	go func() {
		// Reading is what notices a dropped connection; go-redis then
		// reconnects and subscribes every channel again.
		backoff := 100 * time.Millisecond
		for ctx.Err() == nil {
			if _, err := p.ps.Receive(ctx); err == nil {
				backoff = 100 * time.Millisecond
				continue
			}
			select {
			case <-ctx.Done():
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, maxBackoff)
		}
	}()
	return p
}

// Set announces exactly as: subscribes what is new, unsubscribes what
// is gone (new first, so that a node changing state is never seen
// absent). An error leaves the rest to go-redis's resubscription.
func (p *Presence) Set(ctx context.Context, as []Announcement) error {
	want := map[string]bool{}
	for _, a := range as {
		want[p.s.announceChannel(a)] = true
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var add, drop []string
	for c := range want {
		if !p.have[c] {
			add = append(add, c)
		}
	}
	for c := range p.have {
		if !want[c] {
			drop = append(drop, c)
		}
	}
	p.have = want
	var err error
	for chunk := range slices.Chunk(add, 1000) {
		err = errors.Join(err, p.ps.Subscribe(ctx, chunk...))
	}
	for chunk := range slices.Chunk(drop, 1000) {
		err = errors.Join(err, p.ps.Unsubscribe(ctx, chunk...))
	}
	if err != nil {
		return fmt.Errorf("redislease: announcing: %w", err)
	}
	return nil
}

// SetAnnouncements replaces this node's announcements with as: they
// last until the next call or until the store is closed.
func (s *Store) SetAnnouncements(ctx context.Context, as []Announcement) error {
	s.mu.Lock()
	if s.presence == nil {
		pctx, end := context.WithCancel(context.Background())
		s.presence, s.endPresence = s.Announce(pctx), end
	}
	p := s.presence
	s.mu.Unlock()
	return p.Set(ctx, as)
}

// Announced reads what node announces of lease: one of the Announce*
// states, or "" when it announces nothing of it (it does not manage the
// lease, or its daemon is not running). A drained node is AnnounceDrained
// whatever it says of the lease.
func (s *Store) Announced(ctx context.Context, lease, node string) (string, error) {
	ctx, cancel := s.bounded(ctx)
	defer cancel()
	channels := []string{s.announceChannel(Announcement{Node: node, State: AnnounceDrained})}
	for _, st := range announceStates {
		channels = append(channels, s.announceChannel(Announcement{Node: node, State: st, Lease: lease}))
	}
	n, err := s.rdb.PubSubNumSub(ctx, channels...).Result()
	if err != nil {
		return "", fmt.Errorf("redislease: what %s announces: %w", node, err)
	}
	if n[channels[0]] > 0 {
		return AnnounceDrained, nil
	}
	for i, st := range announceStates {
		if n[channels[i+1]] > 0 {
			return st, nil
		}
	}
	return "", nil
}

// ReadyAmong reports, for each lease, which of the nodes given for it
// announce themselves ready for it, in one round trip.
func (s *Store) ReadyAmong(ctx context.Context, nodes map[string][]string) (map[string][]string, error) {
	ctx, cancel := s.bounded(ctx)
	defer cancel()
	var channels []string
	for lease, ns := range nodes {
		for _, n := range ns {
			channels = append(channels, s.announceChannel(Announcement{Node: n, State: AnnounceReady, Lease: lease}))
		}
	}
	out := map[string][]string{}
	if len(channels) == 0 {
		return out, nil
	}
	subs, err := s.rdb.PubSubNumSub(ctx, channels...).Result()
	if err != nil {
		return nil, fmt.Errorf("redislease: ready nodes: %w", err)
	}
	for _, lease := range slices.Sorted(maps.Keys(nodes)) {
		for _, n := range nodes[lease] {
			if subs[s.announceChannel(Announcement{Node: n, State: AnnounceReady, Lease: lease})] > 0 {
				out[lease] = append(out[lease], n)
			}
		}
	}
	return out, nil
}

// Announcements lists every node's announcements (PUBSUB CHANNELS, which
// the ACL grants as pubsub|channels), sorted by node, lease and state.
func (s *Store) Announcements(ctx context.Context) ([]Announcement, error) {
	ctx, cancel := s.bounded(ctx)
	defer cancel()
	cs, err := s.rdb.PubSubChannels(ctx, globEscape(s.prefix+"events:/")+"*").Result()
	if err != nil {
		return nil, fmt.Errorf("redislease: listing the nodes' announcements: %w", err)
	}
	var as []Announcement
	for _, c := range cs {
		if a, ok := s.parseAnnouncement(c); ok {
			as = append(as, a)
		}
	}
	slices.SortFunc(as, func(a, b Announcement) int {
		return strings.Compare(a.Node+"\x00"+a.Lease+"\x00"+a.State, b.Node+"\x00"+b.Lease+"\x00"+b.State)
	})
	return as, nil
}

// globEscape escapes the characters Redis's glob patterns give a meaning.
func globEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
