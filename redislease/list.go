package redislease

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/redis/go-redis/v9"

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
	ctx, cancel := s.bounded(ctx)
	defer cancel()
	var keys []string
	iter := s.rdb.Scan(ctx, 0, s.Key("*"), 500).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		return nil, fmt.Errorf("redislease: list: %w", err)
	}
	sort.Strings(keys)
	var out []Entry
	for len(keys) > 0 {
		batch := keys[:min(len(keys), 500)]
		keys = keys[len(batch):]
		vals, err := s.rdb.MGet(ctx, batch...).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return nil, fmt.Errorf("redislease: list: %w", err)
		}
		for i, v := range vals {
			out = append(out, s.entry(batch[i], v))
		}
	}
	return out, nil
}

func (s *Store) entry(key string, v any) Entry {
	e := Entry{Name: strings.TrimPrefix(key, s.Key(""))}
	if str, ok := v.(string); ok {
		e.Record, e.Err = Decode(key, str)
	}
	return e
}
