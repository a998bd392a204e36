package redislease

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// A lease an operator disabled (`unitlease disable`) has a marker key,
// <prefix>disabled:<lease>, with no TTL, beside its record: the acquire
// script refuses every acquisition while it exists (ErrDisabled), and the
// daemons stop the lease's units where they run (a planned stop: confirm
// inactive, then release, so a stop that fails keeps the lease held
// stop_failed, as any other). Enable deletes it. The record itself is
// never written by either, so nothing of its holder's name, token or
// lease span is lost. A Redis that rolls back may lose the marker, or
// bring an old one back: the lease is then enabled or disabled against
// the operator's last word, never held twice.

// ErrDisabled: an acquisition was refused because the lease is disabled.
var ErrDisabled = errors.New("redislease: the lease is disabled")

// DisabledKey is the marker key of a disabled lease.
func (s *Store) DisabledKey(name string) string { return s.prefix + "disabled:" + name }

// Disabled is who disabled a lease, and when.
type Disabled struct {
	Lease string
	By    string    // the node `unitlease disable` ran on ("" if the marker does not say)
	At    time.Time // zero if the marker does not say
}

type disabledWire struct {
	By string `json:"by"`
	At int64  `json:"at"`
}

// The messages Disable and Enable publish on the lease's channel (the
// scripts publish records, which are JSON objects).
const (
	disabledMessage = "disabled"
	enabledMessage  = "enabled"
)

// Disable marks lease disabled in this node's name and tells the daemons
// that watch it. It reports whether the lease was disabled already (the
// marker is then left as it was).
func (s *Store) Disable(ctx context.Context, lease string) (already bool, err error) {
	ctx, cancel := s.bounded(ctx)
	defer cancel()
	v, _ := json.Marshal(disabledWire{By: s.node, At: time.Now().Unix()})
	ok, err := s.rdb.SetNX(ctx, s.DisabledKey(lease), v, 0).Result()
	if err != nil {
		return false, fmt.Errorf("redislease: disable %s: %w", lease, permission(err))
	}
	if err := s.rdb.Publish(ctx, s.Channel(lease), disabledMessage).Err(); err != nil {
		return !ok, fmt.Errorf("redislease: disable %s: telling the daemons: %w", lease, err)
	}
	return !ok, nil
}

// Enable removes lease's marker and tells the daemons; it reports
// whether the lease was disabled.
func (s *Store) Enable(ctx context.Context, lease string) (was bool, err error) {
	ctx, cancel := s.bounded(ctx)
	defer cancel()
	n, err := s.rdb.Del(ctx, s.DisabledKey(lease)).Result()
	if err != nil {
		return false, fmt.Errorf("redislease: enable %s: %w", lease, permission(err))
	}
	if err := s.rdb.Publish(ctx, s.Channel(lease), enabledMessage).Err(); err != nil {
		return n > 0, fmt.Errorf("redislease: enable %s: telling the daemons: %w", lease, err)
	}
	return n > 0, nil
}

// DisabledAmong reports which of leases are disabled, reading at most
// 500 markers a round trip. A marker of any value or type counts.
func (s *Store) DisabledAmong(ctx context.Context, leases []string) (map[string]bool, error) {
	ctx, cancel := s.bounded(ctx)
	defer cancel()
	out := map[string]bool{}
	for len(leases) > 0 {
		batch := leases[:min(len(leases), 500)]
		leases = leases[len(batch):]
		keys := make([]string, len(batch))
		for i, l := range batch {
			keys[i] = s.DisabledKey(l)
		}
		vals, _, err := s.read(ctx, keys)
		if err != nil {
			return nil, fmt.Errorf("redislease: reading which leases are disabled: %w", err)
		}
		for i, v := range vals {
			if v != nil {
				out[batch[i]] = true
			}
		}
	}
	return out, nil
}

// DisabledLeases lists every disabled lease, sorted by name.
func (s *Store) DisabledLeases(ctx context.Context) ([]Disabled, error) {
	var out []Disabled
	prefix := s.DisabledKey("")
	err := s.scan(ctx, globEscape(prefix)+"*", func(key string, v any) {
		if v == nil {
			return
		}
		d := Disabled{Lease: strings.TrimPrefix(key, prefix)}
		var w disabledWire
		if str, ok := v.(string); ok && json.Unmarshal([]byte(str), &w) == nil && ValidNode(w.By) == nil {
			d.By = w.By
			if w.At > 0 {
				d.At = time.Unix(w.At, 0)
			}
		}
		out = append(out, d)
	})
	if err != nil {
		return nil, fmt.Errorf("redislease: listing the disabled leases: %w", err)
	}
	return out, nil
}
