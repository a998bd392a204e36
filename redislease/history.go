package redislease

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// What `unitlease status` shows of a lease's history lives beside its
// record, in keys the daemons write after the fact, outside the scripts:
// they are for people, and nothing decides on them. A write that fails,
// or one a rollback loses, only makes status show less.
//
//	<prefix>released:<lease>       the last release: by whom, at which version, why
//	<prefix>transition:<lease>     the last acquisition: from whom, to whom, why, the token
//	<prefix>failures:<lease>:<node> a node's failure count, expiring with its window
//
// Each is JSON, at most a few hundred bytes, written with a TTL.

// HistoryTTL is how long a release note and a transition are kept.
const HistoryTTL = 7 * 24 * time.Hour

// Release is a releasing node's note of why it released.
type Release struct {
	By      string `json:"by"`
	Version uint64 `json:"version"` // the released record's
	Why     string `json:"why"`
	AtMS    int64  `json:"at_ms"`
}

// Transition is the last change of holder a new holder noted: when it
// acquired (its wall clock), over whom, why the lease moved, and the
// token of its tenure.
type Transition struct {
	At    time.Time
	From  string // "" when the key was missing
	To    string
	Why   string
	Token uint64
}

type transitionWire struct {
	AtMS  int64  `json:"at_ms"`
	From  string `json:"from"`
	To    string `json:"to"`
	Why   string `json:"why"`
	Token uint64 `json:"token"`
}

func (s *Store) releasedKey(lease string) string   { return s.prefix + "released:" + lease }
func (s *Store) transitionKey(lease string) string { return s.prefix + "transition:" + lease }
func (s *Store) failuresKey(lease, node string) string {
	return s.prefix + "failures:" + lease + ":" + node
}

// NoteRelease records why this node released lease at version.
func (s *Store) NoteRelease(ctx context.Context, lease string, version uint64, why string) error {
	ctx, cancel := s.bounded(ctx)
	defer cancel()
	v, _ := json.Marshal(Release{By: s.node, Version: version, Why: why, AtMS: time.Now().UnixMilli()})
	return s.rdb.Set(ctx, s.releasedKey(lease), v, HistoryTTL).Err()
}

// LastRelease reads the last release note of lease (nil if none, or
// unreadable).
func (s *Store) LastRelease(ctx context.Context, lease string) (*Release, error) {
	rs, err := s.Releases(ctx, []string{lease})
	if r, ok := rs[lease]; ok {
		return &r, err
	}
	return nil, err
}

// Releases reads the last release note of each of leases, 500 a round
// trip (those with none, or an unreadable one, are left out).
func (s *Store) Releases(ctx context.Context, leases []string) (map[string]Release, error) {
	out := map[string]Release{}
	err := s.readNotes(ctx, leases, s.releasedKey, func(lease, v string) {
		var r Release
		if json.Unmarshal([]byte(v), &r) == nil {
			out[lease] = r
		}
	})
	if err != nil {
		return nil, fmt.Errorf("redislease: reading the release notes: %w", err)
	}
	return out, nil
}

// readNotes reads the note key(lease) of each of leases, 500 a round
// trip, and calls f with each string value.
func (s *Store) readNotes(ctx context.Context, leases []string, key func(string) string, f func(lease, v string)) error {
	ctx, cancel := s.bounded(ctx)
	defer cancel()
	for len(leases) > 0 {
		batch := leases[:min(len(leases), 500)]
		leases = leases[len(batch):]
		keys := make([]string, len(batch))
		for i, l := range batch {
			keys[i] = key(l)
		}
		vals, _, err := s.read(ctx, keys)
		if err != nil {
			return err
		}
		for i, v := range vals {
			if str, ok := v.(string); ok {
				f(batch[i], str)
			}
		}
	}
	return nil
}

// NoteTransition records the acquisition this node just made.
func (s *Store) NoteTransition(ctx context.Context, lease string, t Transition) error {
	ctx, cancel := s.bounded(ctx)
	defer cancel()
	v, _ := json.Marshal(transitionWire{AtMS: t.At.UnixMilli(), From: t.From, To: t.To, Why: t.Why, Token: t.Token})
	return s.rdb.Set(ctx, s.transitionKey(lease), v, HistoryTTL).Err()
}

// Transitions reads the last transition of each of leases (those with
// none, or an unreadable one, are left out).
func (s *Store) Transitions(ctx context.Context, leases []string) (map[string]Transition, error) {
	out := map[string]Transition{}
	err := s.readNotes(ctx, leases, s.transitionKey, func(lease, v string) {
		var w transitionWire
		if json.Unmarshal([]byte(v), &w) == nil {
			out[lease] = Transition{At: time.UnixMilli(w.AtMS), From: w.From, To: w.To, Why: w.Why, Token: w.Token}
		}
	})
	if err != nil {
		return nil, fmt.Errorf("redislease: reading the transitions: %w", err)
	}
	return out, nil
}

// NoteFailures records this node's failure count for lease, kept for
// window (the count's own expiry); a zero count removes it.
func (s *Store) NoteFailures(ctx context.Context, lease string, count int, window time.Duration) error {
	ctx, cancel := s.bounded(ctx)
	defer cancel()
	if count == 0 {
		return s.rdb.Del(ctx, s.failuresKey(lease, s.node)).Err()
	}
	return s.rdb.Set(ctx, s.failuresKey(lease, s.node), strconv.Itoa(count), window).Err()
}

// NodeFailures is one node's failure count for a lease.
type NodeFailures struct {
	Node  string
	Count int
}

// Failures lists every node's failure count, by lease.
func (s *Store) Failures(ctx context.Context) (map[string][]NodeFailures, error) {
	out := map[string][]NodeFailures{}
	prefix := s.prefix + "failures:"
	err := s.scan(ctx, globEscape(prefix)+"*", func(key string, v any) {
		str, ok := v.(string)
		n, err := strconv.Atoi(str)
		rest := strings.TrimPrefix(key, prefix)
		i := strings.LastIndexByte(rest, ':')
		if !ok || err != nil || n <= 0 || i < 0 || ValidNode(rest[i+1:]) != nil {
			return
		}
		out[rest[:i]] = append(out[rest[:i]], NodeFailures{Node: rest[i+1:], Count: n})
	})
	if err != nil && err != redis.Nil {
		return nil, fmt.Errorf("redislease: listing the failure counts: %w", err)
	}
	return out, nil
}
