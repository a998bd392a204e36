package redislease

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/unitlease/unitlease/policy"
)

// Entry is one lease in the cluster's view.
type Entry struct {
	Name string
	// Record is the key's value (not Present: missing).
	Record policy.Record
	// Err is set when the value is not a record; Record then holds its
	// bytes alone.
	Err error
}

// List returns every lease key under the prefix, sorted by name: the
// cluster's view for `unitlease status`. It does not update what this
// store has seen.
func (s *Store) List(ctx context.Context) ([]Entry, error) {
	var out []Entry
	err := s.scan(ctx, s.Key("*"), func(key string, v any) { out = append(out, s.entry(key, v)) })
	if err != nil {
		return nil, fmt.Errorf("redislease: list: %w", err)
	}
	return out, nil
}

// scan calls f with every key matching pattern, in sorted order, and its
// value (nil if it went missing meanwhile, an *Odd if readScript reads it
// so), reading 500 keys a round trip.
func (s *Store) scan(ctx context.Context, pattern string, f func(key string, v any)) error {
	ctx, cancel := s.bounded(ctx)
	defer cancel()
	var keys []string
	iter := s.rdb.Scan(ctx, 0, pattern, 500).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		return err
	}
	sort.Strings(keys)
	for len(keys) > 0 {
		batch := keys[:min(len(keys), 500)]
		keys = keys[len(batch):]
		reply, err := readScript.Run(ctx, s.rdb, batch, flag(false)).Slice()
		if err != nil {
			return permission(err)
		}
		vals, err := readReply(batch, reply)
		if err != nil {
			return err
		}
		for i, v := range vals {
			f(batch[i], v)
		}
	}
	return nil
}

func (s *Store) entry(key string, v any) Entry {
	e := Entry{Name: strings.TrimPrefix(key, s.Key(""))}
	switch v := v.(type) {
	case string:
		e.Record, e.Err = Decode(key, v)
	case *Odd:
		e.Record, e.Err = v.garbage(key)
	}
	return e
}
